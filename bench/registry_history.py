"""A real package's history as the side-by-side bench serves it: versions and their tarballs
from the registry npm is configured with (`bench.release_signals.Reader`, verified, cached),
their times, and the packages a release adds as the registry knows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.corpus import Dependency, Published, manifest_of, stored
from bench.release_signals import Reader
from mirrorgate.gate.verdicts.findings import release_of
from mirrorgate.moments import moment
from mirrorgate.npm.contents import Contents
from mirrorgate.rules.release import added_packages

__all__ = ["MAX_DEPENDENCIES", "added_dependencies", "created_of", "published_version",
           "time_of"]

MAX_DEPENDENCIES = 21
"""New dependencies served per release, at most: one past the 20 the gate looks up (more are
refused as unreadable whatever they are)."""
_MANIFESTS = 20  # a dependency's newest versions served: the gate reads their publishers


def time_of(document: Mapping[str, Any], version: str) -> datetime | None:
    return moment((document.get("time") or {}).get(version))


def created_of(document: Mapping[str, Any]) -> datetime | None:
    """The package's first publish: the earliest time its packument gives (`created` or a
    version's)."""
    times = [when for key, value in (document.get("time") or {}).items()
             if key != "modified" and (when := moment(value)) is not None]
    return min(times) if times else None


async def published_version(reader: Reader, store: Path, document: Mapping[str, Any],
                            version: str) -> Published:
    """One real version: its manifest, its tarball (verified, stored), its publication."""
    manifest = document["versions"][version]
    tarball = await reader.tarball(manifest)
    when = time_of(document, version)
    if when is None:
        raise ValueError(f"{document.get('name')}@{version} has no publication time")
    attestations = (manifest.get("dist") or {}).get("attestations")
    return Published(version, manifest_of(manifest), stored(store, tarball), when,
                     {"attestations": attestations} if attestations else {})


async def added_dependencies(reader: Reader, new: Mapping[str, Any], old: Mapping[str, Any],
                             offset: timedelta) -> tuple[Dependency, ...]:
    """The registry packages `new` installs and `old` did not (as the gate counts them), each
    as the registry knows it, its times moved by `offset` with the release's."""
    added = sorted(added_packages(release_of("new", dict(new), Contents()),
                                  release_of("old", dict(old), Contents())))
    found: list[Dependency] = []
    for name in added[:MAX_DEPENDENCIES]:
        document = await reader.packument(name)
        if document is None:
            continue  # the registry lacks it: the gate will say so
        times = {key: when + offset for key, value in (document.get("time") or {}).items()
                 if key != "modified" and (when := moment(value)) is not None}
        versions = [v for v in (document.get("versions") or {}) if v in times]
        newest = sorted(versions, key=lambda v: times[v])[-_MANIFESTS:]
        if not newest:
            continue
        found.append(Dependency(name, tuple(manifest_of(document["versions"][v])
                                            for v in newest),
                                {**{v: times[v] for v in newest},
                                 "created": min(times.values())}))
    return tuple(found)
