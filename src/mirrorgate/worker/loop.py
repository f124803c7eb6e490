"""The mirror worker: receive a job, fetch its tarball from public, verify it, publish it.

One message, one outcome, one log line with a stable event name and one count in
`mirrorgate_jobs{outcome}`:

- `published`: the target took the verified bytes. Acked.
- `already_present`: the target lists the version with the job's integrity (asked before any
  download), or answered "already exists" and reading it back shows that integrity. Acked.
- `retried`: the public upstream or the target failed in a way that may pass (connection,
  timeout, 5xx, 408, 429), or the job crashed unexpectedly. Not acked: released for another
  delivery after `retry_delay` (held on the worker's own shelf when the queue never
  redelivers).
- `tampered`: the bytes do not match the admitted digest or size. Never published, logged as a
  security event, counted in `mirrorgate_tampered`, acked (retired, never retried).
- `retired`: the job can never succeed (undecodable, too many deliveries, off-origin URL,
  oversized, gone from public, not what public and the rules admit, refused by the target, the
  target holds other bytes, the name is first-party: `first-party`, so `latest` of the
  organisation's own name never moves). Acked, with the reason in
  `mirrorgate_jobs_retired{reason}`.

Decisions:

- The queue is not trusted (anyone with send rights can write a job). With a job key set, a
  job whose signature does not verify (`jobsign`) is retired as it is received, before any
  request leaves for it. Then, before anything else, the job is re-gated against the public
  packument with the current rules (`regate`), and a job that does not match what public
  publishes and the rules admit is refused (`mirror_job_refused`, a security line naming what
  did not match, then retired with the reason). What is verified and published from there on
  is public's description of the version, never the job's.
- Then a cheap question: a target that already holds the version with that integrity costs a
  metadata read, never a download.
- The tarball is fetched only from the public upstream's origin (checked before anything is
  sent), never through a redirect, and never past `MIRRORGATE_MAX_TARBALL_BYTES`; it is hashed
  chunk by chunk as it arrives (`verify.StreamVerifier`).
- Bytes of the wrong size are tampering as much as bytes with the wrong digest, and the
  security line names both digests either way: once the size is known to be wrong, the rest
  of the answer is hashed but no longer kept (still never past the cap), so the line can say
  what was actually sent. A download that breaks off during that read leaves `actual` null;
  it never turns the refusal into a retry.
- Retry is "do not ack". A transient failure releases the message (`retry_delay`: at once the
  first time, then after the visibility window, doubling), so the backend hands it out again;
  `MIRRORGATE_MAX_DELIVERIES` bounds how often. A queue that never redelivers (the bounded
  memory queue) would lose the job instead, and the serve path enqueues a version at most once
  per window, so the next pull would not make it good for minutes: the worker keeps such a job
  on a shelf of its own (bounded by `MIRROR_QUEUE_MAX_DEPTH`, lost on exit like the memory
  queue itself) and hands it back to itself after the same delay, its delivery count raised,
  so a private upstream that is down for a while costs the memory shape no mirrored version.
- While a message is held (waiting for a slot or running), its visibility is extended every
  third of the window, so a slow publish is not handed to another worker mid-flight.
- `MIRRORGATE_WORKER_CONCURRENCY` jobs run at once; the loop receives again only when a slot is
  free, so it never holds more than one batch beyond what it can run. Two jobs for the same
  version (two pulls, two enqueues) never run at once here: the second waits for the first and
  then finds the version present, instead of downloading it again and racing its publish.
- The heartbeat advances when a receive returns (an empty poll is a healthy idle) and after each
  job, so a job stuck with every slot taken shows as a stale `/livez`.
- Stopping: the waiting receive is cancelled (the backends are safe to cancel), messages not
  yet started are released at once, running jobs get `MIRRORGATE_DRAIN_TIMEOUT` to finish and
  are then cancelled and released.
- Every log line a job causes carries its package, version and message id (structlog
  contextvars). Nothing raised by one message ends the loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import enum
import hashlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import structlog

from mirrorgate.config import Settings
from mirrorgate.healthz import Heartbeat
from mirrorgate.integrity import (
    Digest,
    DigestMismatch,
    SizeMismatch,
    StreamVerifier,
    TarballDigests,
    TooLarge,
    Unverifiable,
    Verified,
    dist_digests,
    strongest_of,
)
from mirrorgate.logs import loggable_url
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue, QueueMessage, Seconds
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.npm.versions import is_version_string
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules import DEFAULT_RULES, Rules
from mirrorgate.upstream.client import WORKER, Upstream, UpstreamError
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.upstream.origins import OriginRefusal, check_on_origin
from mirrorgate.worker.regate import JobRefused, check_digest_floor, regate
from mirrorgate.worker.target import (
    MirrorTarget,
    PublishResult,
    TargetConflict,
    TargetError,
)

__all__ = ["Outcome", "Worker", "WorkerDeps"]

log = structlog.get_logger("mirrorgate.worker")

RELEASE_TIMEOUT = 5.0
"""Longest a release (`extend_visibility(0)`) may take while stopping; the backend redelivers
after the visibility window anyway."""
_T = TypeVar("_T")


class Outcome(enum.StrEnum):
    PUBLISHED = "published"
    ALREADY_PRESENT = "already_present"
    TAMPERED = "tampered"
    RETRIED = "retried"
    RETIRED = "retired"


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerDeps:
    """`rules` and `now` re-gate each job as the serve path gates (`regate`)."""

    settings: Settings
    queue: MirrorQueue
    public: Upstream
    target: MirrorTarget
    metrics: Metrics
    heartbeat: Heartbeat
    rules: Rules = DEFAULT_RULES
    now: Callable[[], datetime] = _utcnow


class _Retire(Exception):  # noqa: N818 - control flow inside one job, never escapes it
    def __init__(self, reason: str, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.reason = reason
        self.fields = fields


class _Retry(Exception):  # noqa: N818 - control flow inside one job, never escapes it
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _WrongSize(Exception):  # noqa: N818 - tampering, logged as such, never escapes a job
    """Bytes that are not the size the job declares, and what hashing all of them showed:
    `actual` is None when the answer ran past the cap or broke off before its end."""

    def __init__(self, mismatch: SizeMismatch, expected: Digest, actual: Digest | None,
                 actual_size: int, complete: bool) -> None:
        super().__init__(str(mismatch))
        self.expected = expected
        self.expected_size = mismatch.expected
        self.actual = actual
        self.actual_size = actual_size
        self.complete = complete


@dataclass
class _VersionLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


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
        self._versions: dict[tuple[str, str], _VersionLock] = {}
        self._shelf = _RetryShelf(max(1, deps.settings.queue.max_depth))
        # The registry's keys, for the signature rule: fetched only when it is on.
        self._keys = RegistryKeys(deps.public, clock=time.monotonic, metrics=deps.metrics)

    # --- the loop ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Receive and process until `stop` is set, then drain and return."""
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
        with structlog.contextvars.bound_contextvars(**_context(message)):
            try:
                outcome = await self._process(message)
            except Exception:  # one message never ends the loop: log it, retry it later
                log.exception("mirror_job_crashed")
                await self._release(message, "crashed")
                outcome = Outcome.RETRIED
            self.metrics.jobs.labels(outcome.value).inc()
            self.metrics.events.job(_subject(message), outcome.value)
            self.heartbeat.beat()
            return outcome.value

    async def _process(self, message: QueueMessage) -> Outcome:
        job = message.job
        if job is None:
            problem = message.problem or "the message is not a mirror job"
            if message.refusal != "undecodable":  # a signature the keys do not vouch for
                log.critical("mirror_job_refused", security=True, reason=message.refusal,
                             detail=problem)
            return await self._retire(message, message.refusal, problem)
        limit = self.settings.max_deliveries
        if message.deliveries is not None and message.deliveries > limit:
            return await self._retire(message, "max-deliveries",
                                      f"delivered {message.deliveries} times; the limit is "
                                      f"{limit} (MIRRORGATE_MAX_DELIVERIES)")
        try:
            async with self._one_at_a_time(job):
                result = await self._mirror(job)
        except JobRefused as refused:
            # what anyone who can write to the queue could send: a security event, named
            log.critical("mirror_job_refused", security=True, reason=refused.reason,
                         detail=str(refused), **refused.fields)
            return await self._retire(message, refused.reason, str(refused))
        except _Retire as retire:
            return await self._retire(message, retire.reason, str(retire), **retire.fields)
        except _Retry as retry:
            log.warning("mirror_retry", reason=retry.reason, detail=str(retry))
            await self._release(message, retry.reason)
            return Outcome.RETRIED
        except DigestMismatch as mismatch:
            log.critical("mirror_digest_mismatch", security=True,
                         expected=mismatch.expected.sri(), actual=mismatch.actual.sri(),
                         algorithm=mismatch.expected.algorithm,
                         url=loggable_url(job.artifact.tarball_url))
            return await self._tampered(message)
        except _WrongSize as wrong:
            log.critical("mirror_size_mismatch", security=True, expected=wrong.expected.sri(),
                         actual=wrong.actual.sri() if wrong.actual is not None else None,
                         algorithm=wrong.expected.algorithm, expected_size=wrong.expected_size,
                         actual_size=wrong.actual_size, complete=wrong.complete,
                         url=loggable_url(job.artifact.tarball_url))
            return await self._tampered(message)
        except SizeMismatch as mismatch:  # a target that checked the bytes itself
            log.critical("mirror_size_mismatch", security=True, expected_size=mismatch.expected,
                         actual_size=mismatch.actual, complete=mismatch.complete,
                         url=loggable_url(job.artifact.tarball_url))
            return await self._tampered(message)
        except TargetConflict as conflict:
            log.critical("mirror_target_conflict", security=True, target=self.deps.target.label,
                         expected=conflict.expected.sri(),
                         stored=conflict.stored.sri() if conflict.stored else None)
            return await self._retire(message, "target-conflict", str(conflict))
        await self._ack(message)
        return Outcome(result.value)

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, job: MirrorJob) -> AsyncIterator[None]:
        """Serialise jobs for the same version: the second waits, then finds it present."""
        key = (job.name, job.version)
        entry = self._versions.get(key)
        if entry is None:
            entry = self._versions[key] = _VersionLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._versions[key]

    async def _mirror(self, job: MirrorJob) -> PublishResult:
        """Re-gate, fetch, verify and publish; raises JobRefused, _Retire, _Retry or a
        verify/target error."""
        try:
            name = parse_name(job.name)
        except InvalidNameError as error:
            raise _Retire("invalid-name", f"{job.name!r}: {error}") from None
        if not is_version_string(job.version):
            raise _Retire("invalid-version", f"{job.version!r} is not a version string")
        try:
            check_on_origin(job.artifact.tarball_url, self.deps.public.origin)
        except OriginRefusal as refusal:
            raise _Retire("off-origin", str(refusal), url=loggable_url(job.artifact.tarball_url),
                          kind=refusal.kind) from None
        try:
            strongest_of(job.artifact.digests)
        except Unverifiable as error:
            raise _Retire("unverifiable", str(error)) from None
        check_digest_floor(job, self.deps.rules)
        # dependency confusion: never publish a public version into the organisation's name
        # ([private].names, or a name the target holds unmarked versions of)
        if self.deps.rules.private_alone(job.name) or await self._target_call(
                self.deps.target.first_party(job)):
            raise _Retire("first-party", f"{job.name} is first-party: a public version is "
                          f"never published into it")
        job = await self._regate(job, name)
        url = job.artifact.tarball_url
        # public's digests: the gate denies a version without one this worker can compute
        verifier = StreamVerifier(job.artifact.digests, expected_size=job.artifact.size,
                                  limit=self.settings.max_tarball_bytes)
        target = self.deps.target
        if await self._target_call(target.holds(job)):
            log.info("mirror_already_present", target=target.label, fetched=False)
            return PublishResult.ALREADY_PRESENT
        tarball, verified = await self._fetch(url, verifier)
        digests: TarballDigests = await in_thread_if_large(
            len(tarball), dist_digests, tarball, verified, job.artifact.digests)
        result = await self._target_call(target.publish(job, tarball, digests))
        event = ("mirror_published" if result is PublishResult.PUBLISHED
                 else "mirror_already_present")
        log.info(event, target=target.label, fetched=True, size=verified.size,
                 integrity=digests.integrity)
        return result

    async def _regate(self, job: MirrorJob, name: PackageName) -> MirrorJob:
        """The job as the public packument describes it now (`regate`); raises JobRefused."""
        try:
            answer = await self.deps.public.get_json(name.url_path(), pool=WORKER)
        except UpstreamError as error:
            if error.transient:
                raise _Retry("public-failed", str(error)) from None
            raise _Retire("public-refused", str(error), status=error.status) from None
        signatures = self.deps.rules.signatures
        keys = await self._keys.current() if signatures.verify else None
        if signatures.verify and keys is None and signatures.missing == "deny":
            # Refusing now would retire a job only a passing outage stands in the way of.
            raise _Retry("public-failed", "the public registry's signing keys are unavailable")
        return await regate(job, name, answer.document, answer.size, public=self.deps.public,
                            rules=self.deps.rules, now=self.deps.now(), keys=keys)

    async def _target_call(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except TargetConflict:
            raise
        except TargetError as error:
            if error.transient:
                raise _Retry(error.reason, str(error)) from None
            raise _Retire(error.reason, str(error)) from None

    async def _fetch(self, url: str, verifier: StreamVerifier) -> tuple[bytes, Verified]:
        chunks: list[bytes] = []
        shown = loggable_url(url)
        try:
            async with self.deps.public.stream(url, pool=WORKER) as response:
                if response is None:
                    raise _Retire("public-missing", "the public upstream answered 404", url=shown)
                try:
                    verifier.declared_length(response.size)
                    async for chunk in response.chunks:
                        chunks.append(chunk)
                        verifier.update(chunk)
                    verified = verifier.finish()
                except SizeMismatch as mismatch:
                    raise await self._wrong_size(mismatch, verifier.expected, chunks,
                                                 response.chunks) from None
        except UpstreamError as error:
            if error.kind == "refused":
                raise _Retire("off-origin", str(error), url=shown) from None
            if error.transient:
                raise _Retry("public-failed", str(error)) from None
            if error.kind == "invalid":  # a content coding mirrorgate cannot decode: not tampering
                raise _Retire("public-coding", str(error), url=shown) from None
            raise _Retire("public-refused", str(error), url=shown, status=error.status) from None
        except TooLarge as error:
            raise _Retire("oversized", str(error), url=shown, size=error.size) from None
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as error:
            raise _Retry("public-failed", "the download broke off "
                         f"({type(error).__name__})") from None
        return b"".join(chunks), verified

    async def _wrong_size(self, mismatch: SizeMismatch, expected: Digest, chunks: list[bytes],
                          rest: AsyncIterator[bytes]) -> _WrongSize:
        """Hash everything the upstream sends for a tarball of the wrong size (what was read
        already, then the rest as it arrives, keeping none of it), up to the cap."""
        hasher = hashlib.new(expected.algorithm)
        size = 0
        for chunk in chunks:
            hasher.update(chunk)
            size += len(chunk)
        chunks.clear()
        limit = self.settings.max_tarball_bytes
        try:
            async for chunk in rest:
                size += len(chunk)
                if size > limit:
                    return _WrongSize(mismatch, expected, None, size, complete=False)
                hasher.update(chunk)
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return _WrongSize(mismatch, expected, None, size, complete=False)
        actual = Digest(expected.algorithm, base64.b64encode(hasher.digest()).decode("ascii"))
        return _WrongSize(mismatch, expected, actual, size, complete=True)

    # --- acknowledgements --------------------------------------------------------------

    async def _retire(self, message: QueueMessage, reason: str, detail: str,
                      **fields: Any) -> Outcome:
        log.warning("mirror_retired", reason=reason, detail=detail, **fields)
        self.metrics.retired.labels(reason).inc()
        await self._ack(message)
        return Outcome.RETIRED

    async def _tampered(self, message: QueueMessage) -> Outcome:
        self.metrics.tampered.inc()
        self.metrics.events.tampered(_subject(message), "the downloaded bytes did not match "
                                     "the admitted digest or size; not published")
        await self._ack(message)
        return Outcome.TAMPERED

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
        """Keep a job the queue will not redeliver, for another try after `retry_delay`."""
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


def _subject(message: QueueMessage) -> str:
    job = message.job
    return f"{job.name}@{job.version}" if job is not None else f"message {message.message_id}"


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
