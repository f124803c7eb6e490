"""`mirrorgate prewarm` and `mirrorgate audit` as commands: the lockfiles, the mode, the report.

Each command's work is its own module's (`prewarm`, `audit`), asked of the upstreams directly
or of a running mirrorgate (`via_proxy`); this module picks the mode from the command line and
turns the results into the report and the exit status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from mirrorgate.commands import audit as audits
from mirrorgate.commands import prewarm as prewarms
from mirrorgate.commands.parts import (
    MirroringFactory,
    PartsError,
    open_command_queue,
    open_parts,
)
from mirrorgate.commands.pinned import pinned
from mirrorgate.commands.report import Outcome as ReportLine
from mirrorgate.commands.report import Report, usage_error
from mirrorgate.commands.via_proxy import (
    audit_via_proxy,
    open_proxy,
    prewarm_via_proxy,
    token_refused,
    wait_via_proxy,
)
from mirrorgate.config import Settings
from mirrorgate.upstream.client import UpstreamError
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.registry import store_root

__all__ = ["run_audit", "run_prewarm"]


def run_prewarm(settings: Settings, paths: list[Path], *, proxy: str | None, wait: bool,
                within: float, as_json: bool, mirroring: MirroringFactory) -> int:
    """`mirrorgate prewarm LOCKFILE...`: 0 when every locked version is (or is on its way to
    being) in the private registry, 1 with findings, 2 for a lockfile or setting that cannot
    be used."""
    report = Report("prewarm", as_json=as_json)
    return asyncio.run(_prewarm(settings, paths, proxy, wait, within, report, mirroring))


async def _prewarm(settings: Settings, paths: list[Path], proxy: str | None, wait: bool,
                   within: float, report: Report, mirroring: MirroringFactory) -> int:
    entries = pinned(paths, report)
    if isinstance(entries, int):
        return entries
    where: dict[str, str] = {}
    for entry in entries:
        where.setdefault(entry.spec, entry.where)
    locked = [(entry.name, entry.version) for entry in entries]
    progress = report.progress(len(where))
    following = wait

    def settled(result: prewarms.Result) -> None:
        if not (following and result.outcome is prewarms.Outcome.ENQUEUED):
            progress.step(result.label)

    try:
        if proxy is not None:
            results = await _through_proxy(settings, proxy, locked, wait, within, settled)
        else:
            async with open_parts(settings, report, mirroring) as parts, \
                    open_command_queue(settings) as queue:
                # the memory queue lives in this process: prewarm is its worker
                following = wait or not queue.crosses_processes
                planned = await prewarms.plan(locked, source=parts.source, queue=queue,
                                              release=parts.gate.gate.release,
                                              progress=settled)
                followed: list[prewarms.Result] = []
                if not queue.crosses_processes:
                    followed = await prewarms.follow_worker(
                        planned.jobs, queue, parts.mirroring(), within=within,
                        progress=settled)
                elif wait:
                    followed = await prewarms.follow_target(
                        planned.jobs, parts.mirroring(), within=within, progress=settled)
                results = prewarms.merge(planned, followed)
    except PartsError as error:
        return usage_error(str(error))
    finally:
        progress.close()
    for result in sorted(results, key=lambda r: (r.name, r.version)):
        report.add(ReportLine(result.name, result.version, result.outcome.value,
                              finding=result.outcome in prewarms.FINDINGS, reason=result.detail,
                              where=where.get(result.label, "")))
    return report.finish()


async def _through_proxy(settings: Settings, proxy: str, locked: list[tuple[str, str]],
                         wait: bool, within: float,
                         settled: Callable[[prewarms.Result], None],
                         ) -> list[prewarms.Result]:
    refused = await token_refused(settings.via_proxy, proxy)
    if refused is not None:
        raise PartsError(refused)  # exit 2, as any setting that cannot be used
    async with open_proxy(settings.via_proxy, proxy) as client:
        pulled = await prewarm_via_proxy(locked, client, progress=settled,
                                         max_tarball_bytes=settings.max_tarball_bytes)
        if not wait:
            return pulled
        ended = {r.label: r for r in await wait_via_proxy(pulled, client, within=within,
                                                                     progress=settled)}
        return [ended.get(r.label, r) for r in pulled]


def run_audit(settings: Settings, paths: list[Path], *, names: list[str], search: bool,
              proxy: str | None, as_json: bool) -> int:
    """`mirrorgate audit [LOCKFILE...] [--names N,...] [--search]`: 0 when every mirrored
    version checked is sound, 1 with findings, 2 for an argument or setting that cannot be
    used. Without names, the file store is walked entirely; a registry needs them named."""
    report = Report("audit", as_json=as_json)
    return asyncio.run(_audit(settings, paths, names, search, proxy, report))


async def _audit(settings: Settings, paths: list[Path], given: list[str], search: bool,
                 proxy: str | None, report: Report) -> int:
    entries = pinned(paths, report)
    if isinstance(entries, int):
        return entries
    names = [*given, *(entry.name for entry in entries)]
    store = settings.private_upstream.startswith("file://")
    if search and (store or proxy is not None):
        return usage_error("--search asks a registry's search for every name it holds; the "
                           "file store is walked without it, and a proxy's search is the "
                           "public one: name the packages (LOCKFILE or --names) instead")
    if not names and not search and not store:
        return usage_error(f"which packages? the private registry "
                           f"({settings.private_upstream}) is not the file store, so name "
                           "them: LOCKFILE..., --names a,@s/b, or --search (Verdaccio)")
    if not names and proxy is not None:
        return usage_error("through --proxy, name the packages to audit: LOCKFILE... or "
                           "--names a,@s/b")
    try:
        if proxy is not None:
            refused = await token_refused(settings.via_proxy, proxy)
            if refused is not None:
                return usage_error(refused)
            async with open_proxy(settings.via_proxy, proxy) as client:
                progress = report.progress(len(dict.fromkeys(names)))
                try:
                    results = await audit_via_proxy(
                        names, client, max_tarball_bytes=settings.max_tarball_bytes,
                        progress=lambda name, _results: progress.step(name))
                finally:
                    progress.close()
        else:
            async with open_parts(settings, report) as parts:
                if search:
                    assert parts.gate.upstreams.private is not None  # not the store: a registry
                    try:
                        names = [*names, *[n async for n in audits.search_names(
                            parts.gate.upstreams.private)]]
                    except UpstreamError as error:
                        return usage_error(f"the private registry's search failed: {error}")
                elif not names:
                    names = await FileStore(store_root(settings.private_upstream)).names()
                progress = report.progress(len(dict.fromkeys(names)))
                try:
                    results = await audits.audit(
                        names, source=parts.source, private=parts.private,
                        max_tarball_bytes=settings.max_tarball_bytes,
                        progress=lambda name, _results: progress.step(name))
                finally:
                    progress.close()
    except PartsError as error:
        return usage_error(str(error))
    for result in sorted(results, key=lambda r: (r.name, r.version, r.finding)):
        data = ({"admitted": result.digests[0], "stored": result.digests[1]}
                if result.digests is not None else {})
        report.add(ReportLine(result.name, result.version, result.finding.value,
                              finding=result.finding in audits.FINDINGS, reason=result.detail,
                              data=data))
    return report.finish()
