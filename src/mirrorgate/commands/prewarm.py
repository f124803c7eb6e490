"""`mirrorgate prewarm`: mirror a lockfile's admitted versions before anyone installs them.

Each locked version is gated by the proxy's own fill, and each admitted public-only one becomes
the job the serve path would enqueue (`gate.mirror_job`), on the same queue; the
memory queue's jobs are run here (`follow_worker`), the others followed with `--wait`.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from mirrorgate.gate import PackumentSource, mirror_job
from mirrorgate.gate.verdicts.findings import UNSETTLED
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.integrity import strongest_sri
from mirrorgate.mirror import MirrorJob, MirrorQueue, QueueMessage
from mirrorgate.npm.names import InvalidNameError, parse_name
from mirrorgate.upstream.client import UpstreamError
from mirrorgate.upstream.registry import RegistryError, TargetConflict

__all__ = ["FINDINGS", "Outcome", "Result", "follow_target", "follow_worker", "merge", "plan",
           "poll_until_settled"]


NAMES_AT_ONCE = 8
"""Packuments gated at the same time: the proxy's fill pool is 32, and this is one operator."""


class Outcome(enum.StrEnum):
    PUBLISHED = "published"
    """Followed to the end: the private registry now holds the version with its integrity."""
    ALREADY_PRESENT = "already_present"
    ENQUEUED = "enqueued"
    """Handed to the queue and not followed (no `--wait`)."""
    REFUSED = "refused"
    """Denied by today's rules, or refused by the worker (tampered bytes, a retired job)."""
    NOT_FOUND = "not_found"
    FAILED = "failed"
    """Nothing decided: an upstream failed, the queue was full or could not take the job."""
    PENDING = "pending"
    """Enqueued and followed, but not in the private registry when the wait ended."""


FINDINGS = frozenset({Outcome.REFUSED, Outcome.NOT_FOUND, Outcome.FAILED, Outcome.PENDING})
"""Outcomes that make the command exit 1."""


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    version: str
    outcome: Outcome
    detail: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class Planned:
    """What `plan` decided: a result for every version it settled, the jobs it enqueued."""

    results: list[Result]
    jobs: list[MirrorJob]


async def plan(locked: Iterable[tuple[str, str]], *, source: PackumentSource,
               queue: MirrorQueue, progress: Callable[[Result], None] | None = None,
               release: ReleaseJudge | None = None) -> Planned:
    """Gate every locked (name, version) and enqueue a job for each admitted public-only one.
    Versions locked twice (nested copies in a lockfile) are judged once. `release`: the
    gate's release verdicts, read and judged first for each version they have none for (a
    version the proxy would refuse by its bytes is refused here too, never mirrored)."""
    by_name: dict[str, list[str]] = {}
    for name, version in locked:
        versions = by_name.setdefault(name, [])
        if version not in versions:
            versions.append(version)
    results: list[Result] = []
    jobs: list[MirrorJob] = []
    slots = asyncio.Semaphore(NAMES_AT_ONCE)

    async def one(name: str, versions: list[str]) -> None:
        async with slots:
            for result, job in await _judge(name, versions, source):
                if job is not None and release is not None:
                    result, job = await _release_verdict(release, job, result)
                if job is not None:
                    result = await _enqueue(queue, job, result)
                    if result.outcome is Outcome.ENQUEUED:
                        jobs.append(job)
                results.append(result)
                if progress is not None:
                    progress(result)

    await asyncio.gather(*(one(name, versions) for name, versions in by_name.items()))
    return Planned(results, jobs)


async def _judge(name: str, versions: list[str],
                 source: PackumentSource) -> list[tuple[Result, MirrorJob | None]]:
    def every(outcome: Outcome, detail: str) -> list[tuple[Result, MirrorJob | None]]:
        return [(Result(name, version, outcome, detail), None) for version in versions]

    try:
        package = parse_name(name)
    except InvalidNameError as error:
        return every(Outcome.FAILED, f"not a package name: {error}")
    try:
        entry = (await source.load(package, None)).value
    except UpstreamError as error:
        return every(Outcome.FAILED, str(error))
    except Exception as error:  # e.g. a packument too large to gate: said, never a crash
        return every(Outcome.FAILED, f"{type(error).__name__}: {error}")
    gated = entry.gated
    if gated is None:
        return every(Outcome.NOT_FOUND, f"{name} is not on the private or the public upstream")
    judged: list[tuple[Result, MirrorJob | None]] = []
    for version in versions:
        record = gated.versions.get(version)
        if record is None:
            judged.append((Result(name, version, Outcome.NOT_FOUND, f"{name} has no version "
                                  f"{version} on the private or the public upstream"), None))
        elif record.denial is not None:
            judged.append((Result(name, version, Outcome.REFUSED,
                                  f"{record.denial.rule}: {record.denial.reason}"), None))
        elif record.private:
            judged.append((Result(name, version, Outcome.ALREADY_PRESENT,
                                  "first-party" if gated.first_party else "mirrored"), None))
        elif not entry.private_answered:
            # the private side may hold the version or own the name: never guess public
            judged.append((Result(name, version, Outcome.FAILED, "the private registry did "
                                  "not answer for this name; nothing was enqueued"), None))
        elif record.upstream_tarball is None:  # the gate keeps a URL for every admitted one
            judged.append((Result(name, version, Outcome.FAILED, "no public tarball URL"),
                           None))
        else:
            try:
                job = mirror_job(package, record, record.upstream_tarball, None,
                                 gated.time.get(version))
            except ValueError as error:
                judged.append((Result(name, version, Outcome.FAILED, str(error)), None))
                continue
            judged.append((Result(name, version, Outcome.ENQUEUED), job))
    return judged


async def _release_verdict(release: ReleaseJudge, job: MirrorJob,
                           result: Result) -> tuple[Result, MirrorJob | None]:
    """The job, or the refusal the release signals make of its version's bytes."""
    try:
        verdict = await release.verdict_for(parse_name(job.name), job.version,
                                            strongest_sri(job.artifact.digests))
    except Exception as error:  # an upstream failure, a packument too large: said, no job
        return replace(result, outcome=Outcome.FAILED,
                       detail=f"the release signals could not judge it: "
                              f"{type(error).__name__}: {error}"), None
    if isinstance(verdict, str):
        return replace(result, outcome=Outcome.REFUSED, detail=f"{UNSETTLED}: {verdict}"), None
    if verdict is not None and verdict.in_force(release.now()):
        return replace(result, outcome=Outcome.REFUSED,
                       detail=f"{verdict.rule}: {verdict.reason}"), None
    return result, job


async def _enqueue(queue: MirrorQueue, job: MirrorJob, result: Result) -> Result:
    try:
        taken = await queue.enqueue(job)
    except Exception as error:  # the queue promised not to raise; say so rather than crash
        return replace(result, outcome=Outcome.FAILED,
                       detail=f"the queue refused the job: {type(error).__name__}: {error}")
    if not taken:
        return replace(result, outcome=Outcome.FAILED, detail="the queue is full "
                       "(MIRROR_QUEUE_MAX_DEPTH); run prewarm again once it drains")
    return result


# --- following the jobs -------------------------------------------------------------------

class Mirroring(Protocol):
    """What prewarm asks of the worker side, handed in by the composition root (`process.py`):
    a worker run in this process, and the mirror target asked whether it holds a version."""

    async def run(self, queue: MirrorQueue, heard: Callable[[QueueMessage, str], None],
                  stop: asyncio.Event) -> None:
        """Run a worker on `queue` until `stop` is set, telling `heard` each outcome."""
        ...

    async def holds(self, job: MirrorJob) -> bool:
        """Whether the target holds `job`'s version with its bytes; raises RegistryError (a
        TargetConflict when it holds other bytes)."""
        ...


_WORKER_OUTCOMES = {
    "published": (Outcome.PUBLISHED, ""),
    "already_present": (Outcome.ALREADY_PRESENT, "published meanwhile"),
    "tampered": (Outcome.REFUSED, "the downloaded bytes did not match the admitted digest; "
                 "not published (the worker's mirror_digest_mismatch line)"),
    "retired": (Outcome.REFUSED, "the worker retired the job (its mirror_retired line says "
                "why)"),
}


async def follow_worker(jobs: Sequence[MirrorJob], queue: MirrorQueue, mirroring: Mirroring, *,
                        within: float, progress: Callable[[Result], None] | None = None,
                        ) -> list[Result]:
    """Run a worker in this process on `queue` until each job has its outcome.

    For the memory queue: no other process can receive what was enqueued, so prewarm is the
    worker. Outcomes are heard from the worker itself (`Mirroring.run`); a transient
    failure is retried as the worker always retries (its shelf), and what has no outcome when
    `within` seconds have passed is `pending`.
    """
    waiting = {job.label: job for job in jobs}
    results: list[Result] = []
    everything = asyncio.Event()
    if not waiting:
        return results

    def heard(message: QueueMessage, outcome: str) -> None:
        job = message.job
        if job is None or job.label not in waiting or outcome not in _WORKER_OUTCOMES:
            return  # "retried": the worker will try again
        del waiting[job.label]
        verdict, detail = _WORKER_OUTCOMES[outcome]
        result = Result(job.name, job.version, verdict, detail)
        results.append(result)
        if progress is not None:
            progress(result)
        if not waiting:
            everything.set()

    stop = asyncio.Event()
    running = asyncio.create_task(mirroring.run(queue, heard, stop))
    try:
        done = asyncio.create_task(everything.wait())
        await asyncio.wait({done, running}, timeout=within,
                           return_when=asyncio.FIRST_COMPLETED)
        done.cancel()
    finally:
        stop.set()
        await running
    return results + [Result(job.name, job.version, Outcome.PENDING, f"no outcome from the "
                             f"worker after {within:g} s") for job in waiting.values()]


async def follow_target(jobs: Sequence[MirrorJob], mirroring: Mirroring, *, within: float,
                        poll: float = 2.0, clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                        progress: Callable[[Result], None] | None = None) -> list[Result]:
    """Follow jobs a worker in another process runs (`--wait` with a network queue).

    That worker's outcomes are not visible from here; what is observable is the private
    registry gaining the version with the integrity it was admitted with, asked the way the
    worker asks before it downloads (`Mirroring.holds`: for a registry, the stored tarball
    is read back and hashed). One seen is `published`, one held with other bytes `refused` (a
    conflict), and one still absent after `within` seconds `pending`: refused by the worker
    (its `mirror_retired` line says why), or not reached yet.
    """

    async def settle(waiting: Sequence[Result]) -> list[Result]:
        settled: list[Result] = []
        for pulled in waiting:
            job = by_label[pulled.label]
            try:
                if await mirroring.holds(job):
                    settled.append(replace(pulled, outcome=Outcome.PUBLISHED, detail=""))
            except TargetConflict as conflict:
                settled.append(replace(pulled, outcome=Outcome.REFUSED, detail=str(conflict)))
            except RegistryError as error:
                if not error.transient:  # a transient one: asked again at the next poll
                    settled.append(replace(pulled, outcome=Outcome.FAILED, detail=str(error)))
        return settled

    by_label = {job.label: job for job in jobs}
    waiting = [Result(job.name, job.version, Outcome.ENQUEUED) for job in jobs]
    return await poll_until_settled(
        waiting, settle, within=within, poll=poll, clock=clock, sleep=sleep,
        progress=progress, pending=f"not in the private registry after {within:g} s: "
        "refused by the worker, or not reached yet")


async def poll_until_settled(waiting: Sequence[Result],
                             settle: Callable[[Sequence[Result]], Awaitable[list[Result]]], *,
                             within: float, poll: float, clock: Callable[[], float],
                             sleep: Callable[[float], Awaitable[None]],
                             progress: Callable[[Result], None] | None,
                             pending: str) -> list[Result]:
    """Ask `settle` about what is still waiting every `poll` seconds until nothing is, or
    `within` seconds have passed; what is left then is `pending`, with that detail."""
    left = {result.label: result for result in waiting}
    results: list[Result] = []
    deadline = clock() + within
    while left:
        for result in await settle(list(left.values())):
            del left[result.label]
            results.append(result)
            if progress is not None:
                progress(result)
        if not left or clock() >= deadline:
            break
        await sleep(min(poll, max(0.0, deadline - clock())))
    return results + [replace(result, outcome=Outcome.PENDING, detail=pending)
                      for result in left.values()]


def merge(planned: Planned, followed: list[Result]) -> list[Result]:
    """The plan's results with each enqueued one replaced by how it ended."""
    ended = {result.label: result for result in followed}
    return [ended.get(result.label, result) for result in planned.results]
