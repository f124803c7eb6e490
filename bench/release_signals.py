"""False positives of the release signals on real releases: the latest release of each of the
most depended-on public packages, read against the release before it.

Run by hand from the repository root (it reaches the public registry; never in CI):
`.venv/bin/python -m bench.release_signals --count 1000 --out /tmp/release-fp.json --cache
/tmp/release-fp-cache` (with `--cache`, packuments and tarballs are kept there and read from
there on the next run: a rerun after a change measures the same releases, offline). The
registry is the one mirrorgate would use: `MIRRORGATE_PUBLIC_UPSTREAM`, else npm's own
(`npm config get registry`). The names are `bench/data/top-dependents.txt` (most dependents
first). For each: the packument, the `latest` version and the one before it
(`npm.versions.version_before`), both tarballs (verified against their `dist.integrity`), the
same reading the relay does (`npm.contents`), and the checks of `rules.release`, with
"young" measured now, as a first pull of that release today would.
Goal: at most 1% of the releases flagged; the figure and each flagged release, explained,
go in docs/serving.md ("Release signals").
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from mirrorgate.config import npm_configured_registry
from mirrorgate.integrity import StreamVerifier, TooLarge, digests_from_dist
from mirrorgate.moments import moment
from mirrorgate.npm.contents import Contents, contents_of, manifest_runs
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS
from mirrorgate.npm.specs import installed_dependencies
from mirrorgate.npm.versions import version_before
from mirrorgate.rules.kinship import provenance_repository
from mirrorgate.rules.release import (
    Dependency,
    Fired,
    Release,
    added_packages,
    check_dependencies,
    check_install,
    check_obfuscation,
    check_outside,
    check_typosquat,
    check_unreadable,
    check_young_package,
)
from mirrorgate.rules.takeover import publishers_of
from mirrorgate.rules.typosquat import NameIndex, popular_names

NAMES = Path(__file__).parent / "data" / "top-dependents.txt"
YOUNG = timedelta(days=30)
MAX_TARBALL = 64 * 1024 * 1024
MAX_DEPENDENCIES_ASKED = 20  # gate.verdicts.judge's bound: more new dependencies are a refusal
GOAL = 0.01


def registry() -> str:
    found = os.environ.get("MIRRORGATE_PUBLIC_UPSTREAM") or npm_configured_registry()
    if not found:
        sys.exit("no public registry: set MIRRORGATE_PUBLIC_UPSTREAM or configure npm")
    return found.rstrip("/") + "/"


def names(count: int) -> list[str]:
    listed = [line.strip() for line in NAMES.read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")]
    return listed[:count]


def _path(name: str) -> str:
    return quote(name, safe="@")  # `@scope%2fname`, as npm asks for it


class Reader:
    def __init__(self, session: aiohttp.ClientSession, base: str,
                 cache: Path | None = None) -> None:
        self.session = session
        self.cache = cache
        self.base = base
        self.origin = urlsplit(base)[:2]
        self._packuments: dict[str, asyncio.Task[dict[str, Any] | None]] = {}
        self.cpu: list[tuple[int, float]] = []
        """(compressed bytes, CPU seconds) of each tarball read: what a first pull costs."""

    async def packument(self, name: str) -> dict[str, Any] | None:
        if name not in self._packuments:
            self._packuments[name] = asyncio.ensure_future(self._packument(name))
        return await self._packuments[name]

    def _kept(self, kind: str, key: str) -> Path | None:
        if self.cache is None:
            return None
        folder = self.cache / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder / hashlib.sha256(key.encode()).hexdigest()

    async def _packument(self, name: str) -> dict[str, Any] | None:
        kept = self._kept("packuments", name)
        if kept is not None and kept.exists():
            document: dict[str, Any] | None = json.loads(kept.read_bytes())
            return document
        async with self.session.get(self.base + _path(name),
                                    headers={"Accept": "application/json"}) as answer:
            if answer.status == 404:
                document = None
            else:
                answer.raise_for_status()
                document = await answer.json(content_type=None)
        if kept is not None:
            kept.write_text(json.dumps(document), encoding="utf-8")
        return document

    async def tarball(self, manifest: Mapping[str, Any]) -> bytes:
        """A version's tarball, verified against its `dist` (kept in the cache when given)."""
        dist = manifest.get("dist") or {}
        url = dist.get("tarball")
        if not isinstance(url, str) or urlsplit(url)[:2] != self.origin:
            raise ValueError(f"tarball URL off the registry's origin: {url!r}")
        verifier = StreamVerifier(digests_from_dist(dist), expected_size=None,
                                  limit=MAX_TARBALL)
        chunks = []
        kept = self._kept("tarballs", url)
        if kept is not None and kept.exists():
            # verified again below: a cache is no more trusted than a network
            chunks.append(kept.read_bytes())
            verifier.update(chunks[0])
        else:
            async with self.session.get(url) as answer:
                answer.raise_for_status()
                async for chunk in answer.content.iter_chunked(256 * 1024):
                    verifier.update(chunk)
                    chunks.append(chunk)
        verifier.finish()
        body = b"".join(chunks)
        if kept is not None and not kept.exists():
            kept.write_bytes(body)
        return body

    async def contents(self, manifest: Mapping[str, Any],
                       reuse: Contents | None = None) -> Contents:
        body = await self.tarball(manifest)

        def timed() -> Contents:
            started = time.thread_time()
            read = contents_of(body, reuse.code if reuse is not None else None)
            self.cpu.append((len(body), time.thread_time() - started))
            return read

        return await asyncio.to_thread(timed)


def _release(version: str, manifest: Mapping[str, Any], contents: Contents,
             published: datetime | None = None) -> Release:
    """As `gate.verdicts.judge` builds it: peers and aliases as npm installs them, whole
    commands."""
    scripts = manifest.get("scripts")
    commands = ({key: scripts[key] for key in INSTALL_SCRIPT_KEYS
                 if isinstance(scripts.get(key), str) and scripts[key]}
                if isinstance(scripts, Mapping) else {})
    return Release(version, contents, manifest_runs(dict(manifest)),
                   {key: how.spec for key, how in installed_dependencies(manifest).items()},
                   published, publishers_of(manifest), commands,
                   provenance_repository(manifest))


def _dependency(document: Mapping[str, Any] | None) -> Dependency | None:
    if document is None:
        return None
    found = set(publishers_of({"maintainers": document.get("maintainers")}))
    repositories: set[str] = set()
    for manifest in list((document.get("versions") or {}).values())[-20:]:
        if isinstance(manifest, Mapping):
            found |= publishers_of(manifest)
            repository = provenance_repository(manifest)
            if repository is not None:
                repositories.add(repository)
    return Dependency(_first(document), frozenset(found), frozenset(repositories))


def _first(document: Mapping[str, Any] | None) -> datetime | None:
    times = document.get("time") if document else None
    if not isinstance(times, Mapping):
        return None
    found = [when for key, value in times.items() if key != "modified"
             and (when := moment(value)) is not None]
    return min(found) if found else None


async def one(reader: Reader, name: str, popular: NameIndex) -> dict[str, Any]:
    started = time.monotonic()
    document = await reader.packument(name)
    if document is None:
        return {"name": name, "skipped": "not on the registry"}
    latest = (document.get("dist-tags") or {}).get("latest")
    versions = document.get("versions") or {}
    if not isinstance(latest, str) or latest not in versions:
        return {"name": name, "skipped": "no latest version"}
    before = version_before(list(versions), latest)
    if before is None:
        return {"name": name, "version": latest, "skipped": "a first version"}
    new_manifest, old_manifest = versions[latest], versions[before]
    # the publisher's shape: `unreadable-release`, as gate.verdicts.judge says it
    unreadable: list[str] = []
    try:
        new_contents = await reader.contents(new_manifest)
    except TooLarge as error:
        unreadable.append(f"it: {error}")
        new_contents = Contents()
    try:  # as the relay reads it: the new version's unchanged files not measured again
        old_contents = await reader.contents(old_manifest, new_contents)
    except TooLarge as error:
        unreadable.append(f"{before}: {error}")
        old_contents = Contents()
    unreadable += [f"{which}: {c.problem}" for which, c in (("it", new_contents),
                                                             (before, old_contents))
                   if c.problem]
    if unreadable:  # only the manifests are compared, as gate.verdicts.judge does
        new_contents, old_contents = Contents(), Contents()
    published = moment((document.get("time") or {}).get(latest))
    # "young" as mirrorgate measures it at a first pull today: a release pulled for the first
    # time now (the registry this machine reaches rewrote old packages' times to when it
    # copied them, so an age measured at the release's own publication can come out negative)
    at = datetime.now().astimezone()
    new = _release(latest, new_manifest, new_contents, published)
    old = _release(before, old_manifest, old_contents)
    added = sorted(added_packages(new, old))
    if len(added) > MAX_DEPENDENCIES_ASKED:
        unreadable.append(f"it adds {len(added)} dependencies")
    first = {dep: _dependency(await reader.packument(dep))
             for dep in added[:MAX_DEPENDENCIES_ASKED]}
    fired: list[Fired | None] = [
        check_install(new, old), check_obfuscation(new, old),
        check_dependencies(new, old, first, YOUNG, "30 days", at),
        check_typosquat(name, _first(document), False, NameIndex(()), popular, YOUNG,
                        "30 days", at),
        check_outside(new, old), check_unreadable(unreadable),
        check_young_package(new, _first(document), YOUNG, "30 days", at)]
    return {"name": name, "version": latest, "previous": before,
            "published": published.isoformat() if published else None,
            "unread": list(new_contents.unread),
            "fired": [{"signal": f.signal, "evidence": f.evidence, "details": list(f.details)}
                      for f in fired if f],
            "seconds": round(time.monotonic() - started, 2)}


async def run(count: int, concurrency: int, cache: Path | None) -> list[dict[str, Any]]:
    base = registry()
    popular = popular_names()
    timeout = aiohttp.ClientTimeout(total=180)
    results: list[dict[str, Any]] = []
    gate = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        reader = Reader(session, base, cache)

        async def guarded(name: str) -> None:
            async with gate:
                try:
                    result = await one(reader, name, popular)
                except Exception as error:  # a bench: report it and go on (mirrorgate would
                    # leave such a release unchecked: its previous version could not be read)
                    result = {"name": name, "unchecked": [f"{type(error).__name__}: {error}"[:300]]}
                results.append(result)
                fired = result.get("fired") or []
                mark = ("FLAG" if fired else "skip" if "skipped" in result
                        else "unch" if "unchecked" in result else "ok")
                print(f"[{len(results):4}] {mark:4} {name}@{result.get('version', '?')}"
                      f"{' ' + '; '.join(f['signal'] for f in fired) if fired else ''}",
                      file=sys.stderr, flush=True)

        await asyncio.gather(*(guarded(name) for name in names(count)))
    size = sum(b for b, _ in reader.cpu)
    seconds = sum(s for _, s in reader.cpu)
    results.append({"name": "", "cpu": {"tarballs": len(reader.cpu), "bytes": size,
                                         "seconds": round(seconds, 2)}})
    return results


async def young_in_lockfile(path: Path, concurrency: int,
                            cache: Path | None) -> list[dict[str, Any]]:
    """`young-package-install-script` over a real lockfile: every pinned version of a package
    first published less than `YOUNG` ago, read as a first pull would read it; the rest are
    counted (an old package's versions are not read by that signal at all)."""
    from mirrorgate.commands.lockfiles import read_lockfile

    locked = read_lockfile(path).entries
    timeout = aiohttp.ClientTimeout(total=180)
    gate = asyncio.Semaphore(concurrency)
    at = datetime.now().astimezone()
    results: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        reader = Reader(session, registry(), cache)

        async def one(name: str, version: str) -> None:
            async with gate:
                try:
                    document = await reader.packument(name)
                    first = _first(document)
                    if document is None or first is None or at - first >= YOUNG:
                        results.append({"name": name, "version": version, "old": True})
                        return
                    manifest = (document.get("versions") or {}).get(version)
                    if not isinstance(manifest, Mapping):
                        results.append({"name": name, "version": version,
                                        "skipped": "version not on the registry"})
                        return
                    contents = await reader.contents(manifest)
                    found = check_young_package(_release(version, manifest, contents), first,
                                                YOUNG, "30 days", at)
                    results.append({"name": name, "version": version,
                                    "first": first.isoformat(),
                                    "fired": [found.evidence] if found else []})
                except Exception as error:  # a bench: said, and on to the next
                    results.append({"name": name, "version": version,
                                    "skipped": f"{type(error).__name__}: {error}"[:200]})

        await asyncio.gather(*(one(entry.name, entry.version) for entry in locked))
    return results


def young_summary(path: Path, results: list[dict[str, Any]]) -> str:
    young = [r for r in results if "fired" in r]
    fired = [r for r in young if r["fired"]]
    lines = [f"{path}: {len(results)} pinned versions, {len(young)} of packages first "
             f"published less than 30 days ago, {len(fired)} of them flagged by "
             f"young-package-install-script; {sum(1 for r in results if 'skipped' in r)} "
             "skipped"]
    lines += [f"- {r['name']}@{r['version']} (first published {r['first']}): "
              f"{'; '.join(r['fired']) or 'runs nothing at install'}" for r in young]
    lines += [f". {r['name']}@{r['version']}: {r['skipped']}" for r in results
              if "skipped" in r]
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> str:
    [cost] = [r["cpu"] for r in results if "cpu" in r]
    results = [r for r in results if "cpu" not in r]
    checked = [r for r in results if "fired" in r]
    flagged = [r for r in checked if r["fired"]]
    unchecked = [r for r in results if "unchecked" in r]
    read = len(checked) + len(unchecked)
    share = len(flagged) / max(1, read)
    partly = [r for r in checked if r["unread"]]
    lines = [f"{len(results)} packages: {read} releases with a predecessor, {len(checked)} "
             f"read against it, {len(flagged)} flagged ({share:.1%} of {read}; goal <= "
             f"{GOAL:.0%}), {len(unchecked)} unchecked, {len(partly)} read in part (a file "
             f"past its first 2 MiB); {sum(1 for r in results if 'skipped' in r)} skipped"]
    by_signal: dict[str, int] = {}
    for result in flagged:
        for fired in result["fired"]:
            by_signal[fired["signal"]] = by_signal.get(fired["signal"], 0) + 1
    lines.append(f"by signal: {json.dumps(by_signal)}")
    lines.append(f"reading cost: {cost['tarballs']} tarballs, {cost['bytes'] / 1e6:.0f} MB "
                 f"compressed, {cost['seconds']:.1f} s of CPU: "
                 f"{cost['seconds'] * 1e3 / max(1, cost['bytes'] / 1e6):.0f} ms per MB (the "
                 "new version read whole, the previous one reusing its unchanged files)")
    for result in flagged:
        for fired in result["fired"]:
            lines.append(f"- {result['name']}@{result['version']} (vs {result['previous']}): "
                         f"{fired['signal']}: {fired['evidence'][:400]}")
    for result in unchecked:
        lines.append(f"? {result['name']}@{result.get('version', '?')}: unchecked: "
                     f"{'; '.join(result['unchecked'])}")
    for result in results:
        if "skipped" in result:
            lines.append(f". {result['name']}: {result['skipped']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write every result as JSON")
    parser.add_argument("--cache", type=Path, default=None, help="a folder keeping packuments "
                        "and tarballs between runs (e.g. /tmp/release-fp-cache)")
    parser.add_argument("--lockfile", type=Path, default=None,
                        help="instead: young-package-install-script over a lockfile's pins")
    args = parser.parse_args()
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
    if args.lockfile is not None:
        pins = asyncio.run(young_in_lockfile(args.lockfile, args.concurrency, args.cache))
        print(young_summary(args.lockfile, pins))
        return
    results = asyncio.run(run(args.count, args.concurrency, args.cache))
    if args.out is not None:
        args.out.write_text(json.dumps(sorted(results, key=lambda r: r["name"]), indent=1),
                            encoding="utf-8")
    print(summary(results))


if __name__ == "__main__":
    main()
