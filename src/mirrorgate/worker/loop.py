"""The worker's loop: receive mirror jobs, hold each until a slot runs it, then ack or release.

What happens to one job is `worker.job`; this module owns the queue side: how many jobs run at
once, keeping a held message invisible, retry as "do not ack" (with a shelf of its own for a
queue that never redelivers), the heartbeat `/livez` reads, and draining on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from mirrorgate import tracing
from mirrorgate.mirror import QueueMessage, Seconds
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.worker.job import JobRunner, Outcome, WorkerDeps, subject

__all__ = ["MAX_RETRY_DELAY", "Worker", "retry_delay"]

log = structlog.get_logger("mirrorgate.worker")

RELEASE_TIMEOUT = 5.0
"""Longest a release (`extend_visibility(0)`) may take while stopping; the backend redelivers
after the visibility window anyway."""
_T = TypeVar("_T")


SHELF_BATCH = 10
"""At most this many shelved jobs come back at once: the receive batch cap."""
_EARLY = 0.01
"""A shelved job this close to due counts as due (a timer may fire a clock tick early)."""


@dataclass(order=True)
class _Shelved:
    due: float
    order: int
    message: QueueMessage = field(compare=False)


class _RetryShelf:
    """Jobs waiting for another try, for a queue that never redelivers: due times on the
    event loop's clock, earliest first, at most `capacity` of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._heap: list[_Shelved] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, message: QueueMessage, delay: float) -> bool:
        """Keep `message` until `delay` seconds from now; False when the shelf is full."""
        if len(self._heap) >= self.capacity:
            return False
        due = asyncio.get_running_loop().time() + delay
        heapq.heappush(self._heap, _Shelved(due, next(self._order), message))
        return True

    def wait(self) -> float | None:
        """Seconds until the earliest job is due (0 when one is), None when the shelf is empty."""
        if not self._heap:
            return None
        return max(0.0, self._heap[0].due - asyncio.get_running_loop().time())

    def take_due(self) -> list[QueueMessage]:
        now = asyncio.get_running_loop().time() + _EARLY
        due: list[QueueMessage] = []
        while self._heap and self._heap[0].due <= now and len(due) < SHELF_BATCH:
            due.append(heapq.heappop(self._heap).message)
        return due


class Worker:
    def __init__(self, deps: WorkerDeps, *, idle_pause: float = 1.0) -> None:
        """`idle_pause`: the least time between two receives that brought nothing (empty or
        failed), so a backend whose receive returns at once when idle (the in-memory double)
        or fails at once (a queue that is down) is not polled in a spin."""
        self.deps = deps
        self.settings = deps.settings
        self.queue = deps.queue
        self.metrics = deps.metrics
        self.heartbeat = deps.heartbeat
        self.idle_pause = idle_pause
        self._running: set[asyncio.Task[None]] = set()
        self._shelf = _RetryShelf(max(1, deps.settings.queue.max_depth))
        # The registry's keys, for the signature rule: fetched only when it is on.
        self._keys = RegistryKeys(deps.public, clock=time.monotonic, metrics=deps.metrics)
        self._jobs = JobRunner(deps, self._keys)

    # --- the loop ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Receive and process until `stop` is set, then drain and return."""
        # MIRRORGATE_WORKER_CONCURRENCY jobs run at once, and the loop receives again only when
        # a slot is free: it never holds more than one batch beyond what it can run.
        concurrency = max(1, self.settings.worker_concurrency)
        slots = asyncio.Semaphore(concurrency)
        held: set[asyncio.Task[None]] = set()
        log.info("worker_started", concurrency=concurrency, queue=self.queue.provider,
                 target=self.deps.target.label)
        try:
            while not stop.is_set():
                if len(held) >= concurrency:
                    await _first_of(stop, held)
                    continue
                started = time.monotonic()
                messages = await self._receive(stop)
                if messages is None:
                    break
                for message in messages:
                    task = asyncio.create_task(self._hold(message, slots))
                    held.add(task)
                    task.add_done_callback(held.discard)
                if not messages:
                    idle = self.idle_pause - (time.monotonic() - started)
                    if idle > 0:
                        await _first_of(stop, set(), timeout=idle)
            await self._drain(held)
        finally:
            for task in held:
                task.cancel()
            if held:
                await asyncio.wait(held)
            await self._keys.close()

    async def _receive(self, stop: asyncio.Event) -> list[QueueMessage] | None:
        """The next batch ([] when idle or failed), or None once `stop` is set. Shelved jobs
        that are due come first; a receive is cut short when the next one falls due."""
        shelved = self._shelf.take_due()
        if shelved:
            return shelved
        receiving = asyncio.ensure_future(self.queue.receive())
        stopping = asyncio.ensure_future(stop.wait())
        waits: set[asyncio.Future[Any]] = {receiving, stopping}
        wake = self._shelf.wait()
        if wake is not None:
            waits.add(asyncio.ensure_future(asyncio.sleep(wake)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits - {receiving}:
                waiting.cancel()
            if not receiving.done():
                receiving.cancel()
            await asyncio.wait(waits)
        if receiving.cancelled():
            # stopped, or a shelved job fell due first (cancelling a receive takes nothing)
            return None if stop.is_set() else self._shelf.take_due()
        error = receiving.exception()
        if error is not None:  # paused like an empty poll, so a queue that is down is not hammered
            log.warning("worker_receive_failed", error=str(error) or type(error).__name__)
            return []
        messages = receiving.result()
        # An empty poll is a healthy idle. The heartbeat also beats after each job, so a job
        # stuck with every slot taken shows as a stale /livez.
        self.heartbeat.beat()
        if stop.is_set():
            # the batch arrived as the stop did: hand it straight back
            for message in messages:
                await self._release(message, "stopping")
            return None
        return messages

    async def _hold(self, message: QueueMessage, slots: asyncio.Semaphore) -> None:
        """Hold one message from receipt to outcome: keep it invisible, wait for a slot, run."""
        current = asyncio.current_task()
        try:
            async with self._keepalive(message), slots:
                if current is not None:
                    self._running.add(current)
                await self._handle_held(message)
        except asyncio.CancelledError:
            with structlog.contextvars.bound_contextvars(**_context(message)):
                await self._release(message, "stopping")
            raise
        finally:
            if current is not None:
                self._running.discard(current)

    async def _drain(self, held: set[asyncio.Task[None]]) -> None:
        """Stop: messages not yet started are released at once; running jobs get
        MIRRORGATE_DRAIN_TIMEOUT to finish, then are cancelled and released. (The waiting
        receive was cancelled already: the backends are safe to cancel.)"""
        waiting = [task for task in held if task not in self._running]
        running = [task for task in held if task in self._running]
        log.info("worker_stopping", running=len(running), waiting=len(waiting),
                 drain_timeout=self.settings.drain_timeout)
        for task in waiting:
            task.cancel()  # not started: released at once for another worker
        unfinished: set[asyncio.Task[None]] = set()
        if running:
            _done, unfinished = await asyncio.wait(running, timeout=self.settings.drain_timeout)
        for task in unfinished:
            task.cancel()
        if waiting or unfinished:
            await asyncio.wait([*waiting, *unfinished])
        log.info("worker_stopped", released=len(waiting) + len(unfinished),
                 finished=len(running) - len(unfinished), shelved=len(self._shelf))

    @contextlib.asynccontextmanager
    async def _keepalive(self, message: QueueMessage) -> AsyncIterator[None]:
        # While a message is held (waiting for a slot or running), its visibility is extended
        # every third of the window, so a slow publish is not handed to another worker.
        if not self.queue.redelivers:
            yield
            return
        extender = asyncio.create_task(self._extend_periodically(message))
        try:
            yield
        finally:
            extender.cancel()
            await asyncio.wait({extender})

    async def _extend_periodically(self, message: QueueMessage) -> None:
        window = max(1, int(self.settings.queue.visibility))
        with structlog.contextvars.bound_contextvars(**_context(message)):
            while True:
                await asyncio.sleep(window / 3)
                try:
                    await self.queue.extend_visibility(message.receipt, Seconds(window))
                except Exception as error:  # a failed extension must not fail the job
                    log.warning("mirror_visibility_extend_failed",
                                error=str(error) or type(error).__name__)

    # --- one message -------------------------------------------------------------------

    async def handle(self, message: QueueMessage) -> str:
        """Process one message to its outcome (acked or released); returns the outcome name."""
        async with self._keepalive(message):
            return await self._handle_held(message)

    async def _handle_held(self, message: QueueMessage) -> str:
        # Every log line a job causes carries its package, version and message id, and, with
        # tracing on, the ids of the job's span: a child of the enqueue that wrote the job.
        job = message.job
        with structlog.contextvars.bound_contextvars(**_context(message)), tracing.consume(
                "mirrorgate.job", job.traceparent if job is not None else None, {
                    "mirrorgate.package": job.name if job is not None else None,
                    "mirrorgate.version": job.version if job is not None else None,
                    "messaging.system": self.queue.provider,
                    "messaging.operation.type": "process",
                    "messaging.message.id": message.message_id or None,
                    "mirrorgate.deliveries": message.deliveries}) as span:
            try:
                outcome, why = await self._jobs.decide(message)
            except Exception:  # one message never ends the loop: log it, retry it later
                log.exception("mirror_job_crashed")
                outcome, why = Outcome.RETRIED, "crashed"
            span.set("mirrorgate.outcome", outcome.value)
            if why:
                span.set("mirrorgate.reason", why)
            if outcome in (Outcome.TAMPERED, Outcome.RETIRED, Outcome.RETRIED):
                span.fail(why or outcome.value)
            if outcome is Outcome.RETRIED:  # retry is "do not ack"
                await self._release(message, why)
            else:
                await self._ack(message)
            self.metrics.jobs.labels(outcome.value).inc()
            self.metrics.events.job(subject(message), outcome.value)
            self.heartbeat.beat()
            if self.deps.on_outcome is not None:
                self.deps.on_outcome(message, outcome.value)
            return outcome.value

    # --- acknowledgements --------------------------------------------------------------

    async def _ack(self, message: QueueMessage) -> None:
        try:
            await self.queue.ack(message.receipt)
        except Exception as error:  # redelivered later, and then acked cheaply
            log.warning("mirror_ack_failed", error=str(error) or type(error).__name__)

    async def _release(self, message: QueueMessage, why: str) -> None:
        if not self.queue.redelivers:
            if why != "stopping":
                self._shelve(message, why)
            return
        delay = Seconds(0) if why == "stopping" else retry_delay(
            message.deliveries, self.settings.queue.visibility)
        try:
            await asyncio.wait_for(self.queue.extend_visibility(message.receipt, delay),
                                   timeout=RELEASE_TIMEOUT)
        except Exception as error:  # it comes back when its window lapses anyway
            log.warning("mirror_release_failed", why=why,
                        error=str(error) or type(error).__name__)
        else:
            if why == "stopping":
                log.info("mirror_released", why=why)


    def _shelve(self, message: QueueMessage, why: str) -> None:
        """Keep a job the queue will not redeliver, for another try after `retry_delay`.

        The bounded memory queue never redelivers, and the serve path enqueues a version at
        most once per window, so a released job would be lost for minutes. The shelf (bounded
        by MIRROR_QUEUE_MAX_DEPTH, lost on exit like the memory queue itself) hands it back
        after the same delay, its delivery count raised, so a private upstream that is down
        for a while costs the memory shape no mirrored version.
        """
        delay = retry_delay(message.deliveries, self.settings.queue.visibility)
        again = dataclasses.replace(message, deliveries=(message.deliveries or 1) + 1)
        if self._shelf.put(again, delay):
            log.info("mirror_retry_held", why=why, delay=delay, shelved=len(self._shelf))
        else:
            log.warning("mirror_retry_dropped", why=why, shelved=len(self._shelf),
                        reason="the worker's retry shelf is full (MIRROR_QUEUE_MAX_DEPTH); "
                        "the next pull of this version after the enqueue window mirrors it")


MAX_RETRY_DELAY = 600
"""The longest a failed job waits before its next delivery: Pub/Sub's ack-deadline ceiling."""


def retry_delay(deliveries: int | None, visibility: int) -> Seconds:
    """How long a job that failed transiently stays invisible before it is delivered again.

    The first failure is released at once (a blip costs nothing); later ones wait the
    visibility window, doubling each time up to ten minutes, so an outage of the private
    registry or the public upstream lasting a few minutes does not use up every delivery
    (MIRRORGATE_MAX_DELIVERIES) in seconds. A backend that cannot count deliveries (Pub/Sub
    without a dead-letter policy) gets the prompt release.
    """
    if deliveries is None or deliveries <= 1:
        return Seconds(0)
    return Seconds(min(MAX_RETRY_DELAY, visibility * 2 ** (deliveries - 2)))


def _context(message: QueueMessage) -> dict[str, Any]:
    context: dict[str, Any] = {"message_id": message.message_id,
                               "deliveries": message.deliveries}
    if message.job is not None:
        context["package"] = message.job.name
        context["version"] = message.job.version
    return context


async def _first_of(stop: asyncio.Event, tasks: set[asyncio.Task[None]],
                    timeout: float | None = None) -> None:  # noqa: ASYNC109 - a bound, not a deadline
    """Wait until `stop` is set, one of `tasks` finishes, or `timeout` passes."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopping, *tasks}, timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        await asyncio.wait({stopping})
