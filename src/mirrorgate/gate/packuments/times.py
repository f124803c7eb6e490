"""A packument's publish times read as evidence, not truth: the package's first publish, and
where its times contradict each other or its version order.

Registries in front of mirrorgate rewrite or drop `time` (a remote repository stamping each
version with the day it copied it), and an untrusted document may say anything: a reading
never makes a package older than its listed versions say. docs/verdicts.md#how-times-are-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from mirrorgate.moments import moment, stamp
from mirrorgate.npm.packument import times_of, versions_of
from mirrorgate.npm.versions import order_key

__all__ = ["TOLERANCE", "FirstPublish", "first_publish", "first_publish_of", "order_contradicted"]

TOLERANCE = timedelta(minutes=1)
"""Times this close are not a contradiction: npm stamps `created` and the first version a few
milliseconds apart, and a release script may publish a line's patches within seconds."""
_SHOWN = 3  # contradictions named, at most; how many more is said


@dataclass(frozen=True, slots=True)
class FirstPublish:
    """When a package was first published, as its listed versions' times establish it (None:
    they cannot, and the package is treated as young), and what in its times was not
    believed, each a sentence (named in a verdict's evidence)."""

    when: datetime | None = None
    doubts: tuple[str, ...] = ()


def first_publish(listed: Mapping[str, object], created: object) -> FirstPublish:
    """The package's first publish from `listed` (each version the packument lists, and its
    time text): the earliest of them. Never earlier than `created` (a version "published"
    before the package was created is named, and the later time taken), and never from a
    version no longer listed or from `created` alone, which say nothing of what is served."""
    times = [(when, version) for version, text in listed.items()
             if (when := moment(text)) is not None]
    if not times:
        return FirstPublish(None, (
            "no version it lists carries a publish time mirrorgate can read, so its age "
            "cannot be established",) if listed else ())
    earliest, version = min(times)
    said = moment(created)
    if said is not None and earliest < said - TOLERANCE:
        return FirstPublish(said, (
            f"{version} was \"published\" {stamp(earliest)}, before the package was created "
            f"({stamp(said)}): its first publish is taken as the later",))
    return FirstPublish(earliest)


def first_publish_of(private: Mapping[str, Any] | None,
                     public: Mapping[str, Any] | None) -> FirstPublish:
    """A package's first publish from its packuments (either may be None): every version they
    list, denied ones included, also when one version is judged alone (a tarball's cold
    admission judges it young or old as the whole packument's gating does). Public's time
    for a version it lists (a mirrored copy's mark carries that one), the private registry's
    for the rest (a copy's is the moment of mirroring: later, never older)."""
    private_times, public_times = times_of(private), times_of(public)
    listed: dict[str, object] = {version: private_times.get(version)
                                 for version in versions_of(private)}
    listed.update({version: public_times.get(version) for version in versions_of(public)})
    created = [(when, t["created"]) for t in (public_times, private_times)
               if (when := moment(t.get("created"))) is not None]
    return first_publish(listed, min(created)[1] if created else None)


def order_contradicted(times: Mapping[str, object]) -> tuple[str, ...]:
    """Where the publish times contradict version order, each a sentence (none: they agree).
    Within a release line a lower patch is never published after a higher one, nor a minor
    line opened after a higher one of the same major; a backport (1.4.5 after 1.5.0) and a
    version below the whole history (0.0.1 after 1.x) contradict nothing here."""
    patches: dict[tuple[int, int], list[tuple[int, datetime, str]]] = {}
    for version, text in times.items():
        key = order_key(version)
        if key is None or key[3] == 0:  # not a version, or a prerelease
            continue
        when = moment(text)
        if when is not None:
            patches.setdefault((key[0], key[1]), []).append((key[2], when, version))
    found: list[str] = []
    openings: dict[int, list[tuple[int, datetime, str]]] = {}
    for (major, minor), line in patches.items():
        line.sort()
        found += _inverted(line)
        _patch, when, version = line[0]
        openings.setdefault(major, []).append((minor, when, version))
    for line in openings.values():
        line.sort()
        found += _inverted(line)
    if len(found) > _SHOWN:
        found = [*found[:_SHOWN], f"and {len(found) - _SHOWN} more"]
    return tuple(found)


def _inverted(line: list[tuple[int, datetime, str]]) -> list[str]:
    """The neighbours in `line` (in version order) whose times run backwards."""
    return [f"{lower} was \"published\" {stamp(then)}, after {higher} ({stamp(when)})"
            for (_a, then, lower), (_b, when, higher) in pairwise(line)
            if then > when + TOLERANCE]
