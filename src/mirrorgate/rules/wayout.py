"""The way through a refusal: what a person reads after "denied", besides why.

A refusal names the version first, then at most `SHOWN` others ("and 147 more"), the moment a
timed denial ends, the admitted version to use instead, and how to get an exception. The
packument's `policyRestrictions` message (`gate.records`) and the tarball's 403
(`gate.refusals`) both say it with these sentences, so npm, pnpm, yarn and bun read one text.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from mirrorgate.moments import stamp
from mirrorgate.npm.versions import highest, nearest

__all__ = ["SHOWN", "exception_how", "exception_who", "installable_from", "instead", "listed"]

SHOWN = 3
"""Versions a refusal names before "and N more": about 150 pushed npm's own E403 line off a
terminal."""


def listed(versions: list[str], shown: int = SHOWN) -> str:
    """`versions` (in the order given) as "a, b, c and 147 more"."""
    more = f" and {len(versions) - shown} more" if len(versions) > shown else ""
    return ", ".join(versions[:shown]) + more


def installable_from(until: datetime | None) -> str:
    """For a timed denial (a minimum release age, a quarantine): when it ends by itself."""
    return f"installable from {stamp(until)}" if until is not None else ""


def instead(version: str | None, admitted: Iterable[str]) -> str | None:
    """The admitted version to use: the nearest to `version`, or the newest when None."""
    pool = list(admitted)
    return nearest(version, pool) if version is not None else highest(pool)


def exception_who(contact: str | None) -> str:
    """Who to ask (MIRRORGATE_OPERATOR_CONTACT): the short form a status line has room for."""
    return f"for an exception ask {contact}" if contact else \
        "for an exception ask mirrorgate's operator"


def exception_how(package: str, version: str | None, contact: str | None) -> str:
    """How a person gets an exception for `package@version` (None: a version to name), said in
    this one place: the operator's waiver command (`mirrorgate allow`, kept in the state store,
    in force on every replica within a second); the rules file's `[[exception]]` still works."""
    subject = f"{package}@{version}" if version is not None else f"{package}@VERSION"
    return (f"{exception_who(contact)}: mirrorgate allow {subject} --why ... --until DATE "
            "admits it until that date")
