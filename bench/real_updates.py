"""Real updates for the side-by-side bench: good releases, each against the one before it, to
count false positives on.

The latest release of each of the most depended-on packages (`bench/data/top-dependents.txt`,
most dependents first), then the versions the five real projects pin
(`bench/data/real_projects`, read as `mirrorgate check` reads their lockfiles), taken in turn
from each lockfile, until `count` releases are gathered; each beside the version before it
(`npm.versions.version_before`), both tarballs from the registry npm is configured with
(verified, cached), the packages it adds as the registry knows them. A release with no
version before it, or one the registry no longer has, is said and skipped.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from itertools import zip_longest
from pathlib import Path
from typing import Any

from tests.servers.packages import semver_key

from bench.corpus import UPDATE, Case, Published, in_order
from bench.registry_history import added_dependencies, created_of, published_version
from bench.release_signals import Reader, names
from mirrorgate.commands.lockfiles import read_lockfile
from mirrorgate.npm.versions import version_before

__all__ = ["LOCKFILES", "gather_updates", "wanted"]

PROJECTS = Path(__file__).resolve().parent / "data" / "real_projects"
LOCKFILES = ("axios/package-lock.json", "chartjs/pnpm-lock.yaml", "hono/bun.lock",
             "lighthouse/yarn.lock", "prettier/yarn.lock")


def wanted(count: int, top: list[str], pins: list[list[tuple[str, str]]]) -> list[
        tuple[str, str | None, str]]:
    """(name, version or None for its latest, where it comes from): the top names first,
    then the lockfiles' pins in turn, one from each, without repeating a release."""
    found: list[tuple[str, str | None, str]] = [(name, None, "top-dependents")
                                                for name in top[:count]]
    seen: set[tuple[str, str]] = set()
    for row in zip_longest(*pins):
        for index, pin in enumerate(row):
            if len(found) >= count:
                return found
            if pin is None or pin in seen:
                continue
            seen.add(pin)
            found.append((pin[0], pin[1], LOCKFILES[index].split("/")[0]))
    return found


def _pins() -> list[list[tuple[str, str]]]:
    return [[(entry.name, entry.version) for entry in read_lockfile(PROJECTS / path).entries
             if entry.alias is None] for path in LOCKFILES]


async def _update(reader: Reader, store: Path, now: datetime, name: str,
                  version: str | None, source: str) -> Case | str:
    """The release and the one before it, as a case; or why it is skipped."""
    document = await reader.packument(name)
    if document is None:
        return "not on the registry"
    versions: Mapping[str, Any] = document.get("versions") or {}
    if version is None:
        version = (document.get("dist-tags") or {}).get("latest")
    if not isinstance(version, str) or version not in versions:
        return f"{version} not on the registry"
    before = version_before(list(versions), version)
    if before is None:
        return f"{version} has no version before it"
    try:  # the fixture registry serves semver versions only
        semver_key(version), semver_key(before)
    except ValueError as error:
        return str(error)
    new = await published_version(reader, store, document, version)
    old = await published_version(reader, store, document, before)
    published, previous = in_order(old.published, now, created_of(document))
    new = Published(new.version, new.manifest, new.tarball, published, new.dist)
    old = Published(old.version, old.manifest, old.tarball, previous, old.dist)
    added = await added_dependencies(reader, new.manifest, old.manifest, timedelta(0))
    return Case(UPDATE, f"{name}@{version}", name, (old, new), (version,), previous, False,
                f"{source} (against {before})", tuple(document.get("maintainers") or ()),
                added)


async def gather_updates(reader: Reader, store: Path, count: int, now: datetime,
                         concurrency: int) -> list[Case]:
    """`count` real updates (fewer when some are skipped: each is said)."""
    chosen = wanted(count, names(count), _pins())
    gate = asyncio.Semaphore(concurrency)
    results: list[Case | str | None] = [None] * len(chosen)

    async def one(index: int, name: str, version: str | None, source: str) -> None:
        async with gate:
            try:
                results[index] = await _update(reader, store, now, name, version, source)
            except Exception as error:  # a bench: said, and on to the next
                results[index] = f"{type(error).__name__}: {error}"[:200]
            done = sum(1 for r in results if r is not None)
            if done % 200 == 0:
                print(f"updates: {done}/{len(chosen)} gathered", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(i, *item) for i, item in enumerate(chosen)))
    cases: list[Case] = []
    seen: set[str] = set()
    for (name, version, source), result in zip(chosen, results, strict=True):
        if isinstance(result, Case):
            # a top name's latest release can be a lockfile's pin as well: judged once
            if result.label not in seen:
                seen.add(result.label)
                cases.append(result)
        else:
            print(f"update {name}@{version or 'latest'} ({source}) skipped: {result}",
                  file=sys.stderr)
    return cases
