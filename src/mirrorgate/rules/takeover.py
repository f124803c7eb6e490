"""Account-takeover signals over a packument's history: provenance continuity, publisher change.

A stolen token shows in the metadata: the attacker's version lacks the provenance attestation
the project's CI attached to the previous ones, or is published by an account that published
none of them. Both rules read one `History` per packument, so they stay pure and cost no request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from mirrorgate.moments import moment, stamp
from mirrorgate.npm.attestations import has_provenance
from mirrorgate.npm.lazydoc import objects
from mirrorgate.rules.patterns import PatternList, Subject

__all__ = ["MODES", "PROVENANCE_CONTINUITY", "PUBLISHER_CHANGE",
           "Finding", "History", "Release", "SignalRule", "check_provenance",
           "check_publisher", "publishers_of"]

PROVENANCE_CONTINUITY = "provenance-continuity"
PUBLISHER_CHANGE = "publisher-change"

Mode = Literal["deny", "quarantine", "off"]
MODES: tuple[str, ...] = ("deny", "quarantine", "off")
_SHOWN_NAMES = 4
_PRINTABLE = re.compile(r"[ -~]{1,100}")


@dataclass(frozen=True)
class SignalRule:
    """One signal's settings: what it does (`mode`), over how many previous versions
    (`window`), how long a quarantine lasts, and the entries that release a version."""

    mode: Mode = "off"
    window: int = 5
    quarantine: timedelta = timedelta(days=7)
    quarantine_text: str = "7 days"
    allow: PatternList = field(default_factory=PatternList)

    @property
    def on(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True, slots=True)
class Finding:
    """A signal that fired: the rule, the reason with its evidence, and for a quarantine the
    moment it ends (the packument is re-gated then)."""

    rule: str
    reason: str
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """One public version as the history sees it."""

    version: str
    published: datetime
    publishers: frozenset[str]
    provenance: bool


HISTORY_FIELDS = ("_npmUser", "maintainers", "dist")
"""What `History.of` reads of each version (`publishers_of`, `has_provenance`)."""


def publishers_of(manifest: Mapping[str, Any]) -> frozenset[str]:
    """The accounts that published a version (`_npmUser`, else its `maintainers`)."""
    # `_npmUser` names the account that ran the publish; old documents lack it, and then the
    # version's `maintainers` (the accounts able to publish it) stand in.
    user = manifest.get("_npmUser")
    if isinstance(user, Mapping) and isinstance(user.get("name"), str) and user["name"]:
        return frozenset((user["name"],))
    found: set[str] = set()
    maintainers = manifest.get("maintainers")
    if isinstance(maintainers, list):
        for entry in maintainers[:100]:
            name = entry.get("name") if isinstance(entry, Mapping) else entry
            if isinstance(name, str) and name:
                found.add(name.split(" <", 1)[0].strip())
    return frozenset(found)


class History:
    """The public versions of one packument in publish-time order. A version without a usable
    `time` entry cannot be placed, so it is left out: it neither fires a signal nor serves as
    evidence (the age rule decides what a missing time means). Ordered by the times alone; a
    release's publishers and provenance are read from its manifest when a rule reads it (a
    pull's rules read a few releases of thousands)."""

    def __init__(self, dated: list[tuple[datetime, str]], manifests: Mapping[str, Any]) -> None:
        self._dated = sorted(dated)
        self.index = {version: at for at, (_when, version) in enumerate(self._dated)}
        self._manifests = manifests
        self._releases: dict[int, Release] = {}

    @classmethod
    def of(cls, versions: Mapping[str, Any], times: Mapping[str, Any]) -> History:
        """The history of `versions` (each an object read for `HISTORY_FIELDS`; a lazily read
        mapping is parsed only where a release is read) dated by `times`."""
        dated: list[tuple[datetime, str]] = []
        for version in objects(versions):
            when = moment(times.get(version))
            if when is not None:
                dated.append((when, version))
        return cls(dated, versions)

    def _release(self, at: int) -> Release:
        found = self._releases.get(at)
        if found is None:
            when, version = self._dated[at]
            manifest = self._manifests[version]
            found = self._releases[at] = Release(version, when, publishers_of(manifest),
                                                 has_provenance(manifest))
        return found

    def get(self, version: str) -> Release | None:
        at = self.index.get(version)
        return None if at is None else self._release(at)

    def before(self, version: str, count: int) -> list[Release]:
        at = self.index.get(version, 0)
        return [self._release(earlier) for earlier in range(max(0, at - count), at)]

    def after(self, version: str) -> list[Release]:
        at = self.index.get(version)
        return [] if at is None else [self._release(later)
                                      for later in range(at + 1, len(self._dated))]


def _shown(text: str) -> str:
    """An upstream string (an account name, a version) safe to print in a terminal."""
    return f"`{text}`" if _PRINTABLE.fullmatch(text) else json.dumps(text[:100])


def _accounts(names: frozenset[str] | set[str]) -> str:
    if not names:
        return "an unknown account"
    listed = sorted(names)
    text = ", ".join(_shown(name) for name in listed[:_SHOWN_NAMES])
    return text + (f" and {len(listed) - _SHOWN_NAMES} more" if len(listed) > _SHOWN_NAMES
                   else "")


def _versions(releases: list[Release]) -> str:
    if len(releases) == 1:
        return f"version {_shown(releases[0].version)} was"
    return f"versions {_shown(releases[0].version)}-{_shown(releases[-1].version)} were"


def _verdict(rule: str, key: str, settings: SignalRule, name: str, release: Release,
             evidence: str, now: datetime) -> Finding | None:
    """The finding for a fired signal, unless an allow entry releases the version or its
    quarantine is over."""
    if settings.allow.first_match(Subject(name, release.version),
                                  unparseable_matches=False) is not None:
        return None
    release_hint = (f"if this is legitimate, add \"{name}@{release.version}\" (or \"{name}\") "
                    f"to {key}.allow")
    if settings.mode == "deny":
        return Finding(rule, f"{evidence}; {release_hint}")
    until = release.published + settings.quarantine
    if now >= until:
        return None
    return Finding(rule, f"quarantined until {stamp(until)} ({settings.quarantine_text} after "
                         f"publication) because it was {evidence}; {release_hint} to release "
                         "it sooner", until)


def check_provenance(settings: SignalRule, name: str, version: str, history: History,
                     now: datetime) -> Finding | None:
    """A version without provenance when any of the previous `window` versions had it."""
    release = history.get(version)
    if not settings.on or release is None or release.provenance:
        return None
    attested = [r for r in history.before(version, settings.window) if r.provenance]
    if not attested:
        return None
    # A quarantine also ends once a newer version restores provenance: the project's CI is
    # publishing again, so the gap was a one-off (a manual hotfix), not a takeover.
    if settings.mode == "quarantine" and any(r.provenance for r in history.after(version)):
        return None
    evidence = (f"published by {_accounts(release.publishers)} without provenance; "
                f"{_versions(attested)} published by "
                f"{_accounts(set().union(*(r.publishers for r in attested)))} with provenance")
    return _verdict(PROVENANCE_CONTINUITY, "provenance", settings, name, release, evidence, now)


def check_publisher(settings: SignalRule, name: str, version: str, history: History,
                    now: datetime) -> Finding | None:
    """A version published by an account that published none of the previous `window`."""
    release = history.get(version)
    if not settings.on or release is None or not release.publishers:
        return None
    previous = [r for r in history.before(version, settings.window) if r.publishers]
    known: set[str] = set().union(*(r.publishers for r in previous))
    # Nothing to compare against (a first version, or no publisher recorded before): no signal.
    if not known or release.publishers & known:
        return None
    evidence = (f"published by {_accounts(release.publishers)}, an account that published none "
                f"of the previous {len(previous)} versions; {_versions(previous)} published by "
                f"{_accounts(known)}")
    return _verdict(PUBLISHER_CHANGE, "publisher", settings, name, release, evidence, now)
