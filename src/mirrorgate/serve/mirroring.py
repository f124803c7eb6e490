"""A public tarball that reached a client whole, enqueued for the worker to mirror: at most once
per version in a window, in a background task the response never waits on, with the verified
bytes handed to a worker beside the proxy (`handoff`). Used by the tarball route.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

import structlog

from mirrorgate import tracing
from mirrorgate.gate import VersionRecord, mirror_job
from mirrorgate.handoff import Handoff
from mirrorgate.integrity import Verified
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue
from mirrorgate.npm.names import PackageName
from mirrorgate.offload import in_thread_if_large
from mirrorgate.serve.relay import Relay, remember

__all__ = ["ENQUEUE_WINDOW", "MirrorJobs"]

log = structlog.get_logger("mirrorgate.serve")

# A version is enqueued at most once per window: parallel CI jobs and npm's own retry after an
# integrity failure pull the same tarball several times in a row, and one job mirrors it. A pull
# after the window enqueues again, so a job the queue lost (the bounded memory queue drops when
# full) is made good by the next pull.
ENQUEUE_WINDOW = 300.0


class MirrorJobs:
    """The jobs the proxy sends: `on_enqueued` is told of each (the worker beside pins the
    record it judges it by); `mirrored`, whether the default rules admit `name@version`: a
    version pulled under a policy set is mirrored only then, as the worker re-gates every job
    with the default rules."""

    def __init__(self, *, queue: MirrorQueue, metrics: Metrics, relay: Relay,
                 handoff: Handoff | None = None,
                 on_enqueued: Callable[[PackageName, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 mirrored: Callable[[PackageName, str], Awaitable[bool]] | None = None,
                 ) -> None:
        self.queue = queue
        self.metrics = metrics
        self.relay = relay
        self.handoff = handoff
        self.on_enqueued = on_enqueued
        self.clock = clock
        self.mirrored = mirrored
        self._tasks: set[asyncio.Task[None]] = set()
        self._enqueued: OrderedDict[str, float] = OrderedDict()

    async def hand_over(self, key: Hashable, url: str,
                         verified: Verified, license_read: bool = False) -> None:
        """The worker beside the proxy gets the bytes just verified with the job, from the
        spool they were relayed through (a tarball that streamed unspooled is downloaded by
        the worker as before). A large one is copied in a thread, the spool held open as a
        reader's would be."""
        handoff = self.handoff
        if handoff is None:
            return
        spool = self.relay.spools.find(key)
        place = (handoff.reserve(url, spool.size, verified.digest, license_read=license_read)
                 if spool is not None and spool.verified == verified else None)
        if spool is None or place is None:
            self.metrics.handoffs.labels("not_offered").inc()
            return
        self.relay.spools.join(spool)
        try:
            written = await in_thread_if_large(spool.size, handoff.write, place, spool.contents)
        finally:
            self.relay.spools.leave(spool)
        kept = handoff.commit(url, place, written)
        self.metrics.handoffs.labels("offered" if kept else "not_offered").inc()

    def _first_in_window(self, label: str) -> bool:
        now = self.clock()
        last = self._enqueued.get(label)
        if last is not None and now - last < ENQUEUE_WINDOW:
            return False
        remember(self._enqueued, label, now)
        return True

    def enqueue(self, name: PackageName, record: VersionRecord, url: str, size: int,
                 published: str | None, *,
                 hand_over: Callable[[], Awaitable[None]] | None = None,
                 policy: str | None = None) -> bool:
        """Enqueue the version's job (`mirror_job`, with the size relayed) in a background task:
        the response never waits on the queue and never fails because of it. `hand_over` runs
        in that task before the job is sent, so the worker finds the bytes when the job comes.
        A pull under a policy set (`policy`) sends one only if the default rules admit the
        version too. False when no job is sent (one was sent in the window, or none can be
        made)."""
        if not self._first_in_window(f"{name.full}@{record.version}"):  # MirrorJob.label
            log.debug("job_recently_enqueued", package=name.full, version=record.version)
            return False
        try:
            job = mirror_job(name, record, url, size, published)
        except ValueError as error:
            log.warning("job_not_enqueued", package=name.full, version=record.version,
                        reason=str(error))
            return False
        task = asyncio.get_running_loop().create_task(self._send(
            job, hand_over, name if policy is not None else None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.on_enqueued is not None:
            self.on_enqueued(name, record.version)
        return True

    async def _send(self, job: MirrorJob,
                    hand_over: Callable[[], Awaitable[None]] | None = None,
                    judged: PackageName | None = None) -> None:
        if judged is not None and self.mirrored is not None \
                and not await self._default_admits(judged, job):
            return
        if hand_over is not None:
            try:
                await hand_over()
            except Exception as error:  # a bug: the worker downloads instead, the job goes out
                log.error("handoff_failed", package=job.name, version=job.version,
                          reason=f"{type(error).__name__}: {error}")
        # a task of the request, so its span is the request's child even after the answer
        with tracing.span("mirrorgate.enqueue", {
                "mirrorgate.package": job.name, "mirrorgate.version": job.version,
                "messaging.system": self.queue.provider,
                "messaging.operation.type": "send"}, kind="producer") as span:
            parent = tracing.traceparent()
            if parent is not None:  # what the worker's span continues from
                job = dataclasses.replace(job, traceparent=parent)
            taken = await self._enqueue_now(job)
            span.set("mirrorgate.taken", taken)

    async def _default_admits(self, name: PackageName, job: MirrorJob) -> bool:
        """Whether a version pulled under a policy set may be mirrored: the worker re-gates a
        job with the default rules, and a version only a laxer set admits would reach it as a
        job the rules deny, which reads as a forged one. Such a version is served from public
        to its set's clients, and mirrored at a pull once the default rules admit it."""
        assert self.mirrored is not None
        try:
            admitted = await self.mirrored(name, job.version)
        except Exception as error:  # an upstream failed: the next pull enqueues it again
            admitted, why = False, f"{type(error).__name__}: {error}"
        else:
            why = "the default rules do not admit it (pulled under a policy set)"
        if not admitted:
            log.info("job_not_enqueued", package=job.name, version=job.version, reason=why)
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
        return admitted

    async def _enqueue_now(self, job: MirrorJob) -> bool:
        try:
            taken = await self.queue.enqueue(job)
        except Exception as error:  # the queue promised not to raise; a bug is logged
            log.error("enqueue_failed", package=job.name, version=job.version,
                      reason=f"{type(error).__name__}: {error}")
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
            return False
        if not taken:
            # The queue was full: it counts the drop and reports it at its own cadence
            # (mirror_queue_dropped: the first, then every 1,000th), so a burst is not one line
            # per request; nor is it counted as enqueued. The next pull of this version may
            # enqueue it again.
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
            return False
        self.metrics.enqueued.inc()
        log.info("job_enqueued", package=job.name, version=job.version,
                 queue=self.queue.provider)
        return True

    def _withdraw_handoff(self, job: MirrorJob) -> None:
        # no job will take these bytes: their room goes to the next offer
        if self.handoff is not None:
            self.handoff.discard(job.artifact.tarball_url)

    async def drain(self) -> None:
        """Wait for the enqueues still running (at application cleanup)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
