"""What a release verdict is made from, shared by the judge (`gate.verdicts.judge`) and the reading
of one version (`gate.verdicts.reading`): the findings kept as the version's record, the release
as the checks of `rules.release` compare it, and why a tarball could not be had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mirrorgate.gate.records import Gated, VersionRecord
from mirrorgate.moments import moment
from mirrorgate.npm.contents import Contents, manifest_runs
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.scripts import install_commands
from mirrorgate.npm.specs import installed_dependencies
from mirrorgate.rules.kinship import provenance_repository
from mirrorgate.rules.release import Fired, Release
from mirrorgate.rules.takeover import publishers_of
from mirrorgate.store import Verdict

__all__ = ["MAX_DEPENDENCIES_ASKED", "UNSETTLED", "Findings", "Unread", "kept_as",
           "package_first_published", "read_under", "release_of", "signals_text"]

MAX_DEPENDENCIES_ASKED = 20
"""New dependencies of one release whose first publish is looked up at most; more are a
refusal (`unreadable-release`): the publisher chose how many to add."""
UNSETTLED = "release-unchecked"
"""The rule a version is refused by when no release it could be compared with was judged
clean within the bound (`gate.verdicts.baseline`): the signals' own "could not check"."""


@dataclass(frozen=True, slots=True)
class Findings:
    """What one analysis found, kept per version: the verdict is made again from it under the
    rules in force at each pull (an allow entry added later releases it without a new read)."""

    fired: tuple[Fired, ...]
    published: datetime | None
    compared_with: str | None
    times: tuple[str, ...] = ()
    """What in the packument's times was not believed (`gate.packuments.times`), each a
    sentence: kept with the evidence, though no signal reads it back."""
    built: str | None = None
    """Where the release was built against where the release compared with was
    (`rules.provenance`): said whatever the verdict, weighed by none."""

    def evidence(self) -> str:
        return json.dumps({"fired": [[f.signal, f.evidence, list(f.details)] for f in self.fired],
                           "published": self.published.isoformat() if self.published else None,
                           "times": list(self.times), "built": self.built})

    @classmethod
    def of(cls, verdict: Verdict) -> Findings | None:
        """The facts a kept verdict carries; None when its evidence cannot be read (then the
        version is read again at its next first pull)."""
        try:
            data = json.loads(verdict.evidence)
            fired = tuple(Fired(str(signal), str(evidence), tuple(str(d) for d in details))
                          for signal, evidence, details in data["fired"])
            published = moment(data["published"]) if data["published"] else None
            times = tuple(str(doubt) for doubt in data.get("times", ()))
            built = data.get("built")
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return cls(fired, published, verdict.compared_with, times,
                   built if isinstance(built, str) else None)


def package_first_published(gated: Gated) -> datetime | None:
    """A package's first publish, as its listed versions' times establish it (None: they
    cannot, and it is treated as young): `gate.packuments.times`."""
    return gated.first_published


def _dependencies(manifest: Mapping[str, Any]) -> dict[str, str]:
    """What npm installs for it, by key (peers included), as the specs it reads them from."""
    return {key: how.spec for key, how in installed_dependencies(manifest).items()}


def release_of(version: str, manifest: dict[str, Any], contents: Contents,
             published: datetime | None = None) -> Release:
    return Release(version, contents, manifest_runs(manifest), _dependencies(manifest),
                   published, publishers_of(manifest), install_commands(manifest),
                   provenance_repository(manifest))


@dataclass(frozen=True, slots=True)
class Unread:
    """Why the previous version's bytes could not be had, and whether the publisher's own
    shape is the cause (over the bound, unreadable) or an outage of mirrorgate's sources."""

    reason: str
    publishers: bool = False


def kept_as(name: PackageName, record: VersionRecord) -> tuple[str, str, str]:
    """A version's reading and verdict are kept by its name, version and bytes (their
    strongest digest, `VersionRecord.integrity`)."""
    return (name.full, record.version, record.integrity())


_SIGNALS = "signals"  # the first word of what a verdict keeps of the signals it was read under


def signals_text(reading: frozenset[str]) -> str:
    """The signals in force a verdict was read under (`ReleaseRules.signals_in_force`), as its
    record keeps them: in the store's `generation` column, named for the rules' generation
    number it held before, which said nothing a later process could compare."""
    return " ".join([_SIGNALS, *sorted(reading)])


def read_under(verdict: Verdict) -> frozenset[str] | None:
    """The signals a kept verdict was read under; None for one an earlier release kept (its
    rules generation number): it answers for no signal, and its bytes are read again."""
    words = verdict.generation.split()
    return frozenset(words[1:]) if words[:1] == [_SIGNALS] else None
