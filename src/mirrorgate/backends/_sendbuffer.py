"""The bounded buffer between the serve path and a network queue's send call.

The serve path must not wait on a cloud round-trip nor fail a response because a queue is down:
a network backend's `enqueue` only appends the encoded job here (synchronously, never raising),
and one background task drains the buffer in batches, retrying failures with a jittered backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from mirrorgate.backends._shared import DropHook, describe, ignore_drop, report_drop

__all__ = ["SendBuffer", "SendOutcome"]

log = structlog.get_logger("mirrorgate.queue")


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """What a backend's batch send reports: the positions of entries to retry, and of entries
    the backend refused for good (logged by the backend, counted here as dropped)."""

    retry: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()


SendBatch = Callable[[list[bytes]], Awaitable[SendOutcome]]


class SendBuffer:
    def __init__(
        self,
        send: SendBatch,
        *,
        provider: str,
        max_depth: int,
        max_count: int = 10,
        max_bytes: int = 1024 * 1024,
        on_drop: DropHook | None = None,
        backoff: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self._on_drop = on_drop or ignore_drop
        self._send = send
        self._provider = provider
        self._max_depth = max_depth
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._backoff_base, self._backoff_cap = backoff  # seconds: the first retry's, the most
        self._bodies: deque[bytes] = deque()
        self._sending = 0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.dropped = 0
        self.sent = 0
        self.failures = 0

    @property
    def depth(self) -> int:
        return len(self._bodies) + self._sending

    def offer(self, body: bytes) -> bool:
        """Buffer one encoded job (True), or drop it when the buffer is full (False). Never
        raises."""
        # bounded and drop-newest, like the memory queue: the bound counts the jobs buffered *and*
        # the batch being sent, so the memory held is the cap's worth however long the endpoint
        # is down
        if self._closing or self.depth >= self._max_depth:
            self.dropped += 1
            if report_drop(self.dropped, self._on_drop):
                log.warning("mirror_queue_dropped", provider=self._provider, dropped=self.dropped,
                            depth=self.depth, cap=self._max_depth)
            return False
        self._bodies.append(body)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return True

    def _take_batch(self) -> list[bytes]:
        # at most `max_count` jobs and `max_bytes` of bodies (SQS: 10 and 1 MiB)
        batch: list[bytes] = []
        size = 0
        while self._bodies and len(batch) < self._max_count:
            body = self._bodies[0]
            if batch and size + len(body) > self._max_bytes:
                break
            batch.append(self._bodies.popleft())
            size += len(body)
        return batch

    async def _drain(self) -> None:
        attempt = 0
        while True:
            if not self._bodies:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = self._take_batch()
            self._sending = len(batch)
            try:
                outcome = await self._send(batch)
            except asyncio.CancelledError:
                self._bodies.extendleft(reversed(batch))
                self._sending = 0
                raise
            except Exception as error:  # the backend's call failed as a whole: retry it all
                outcome = SendOutcome(retry=tuple(range(len(batch))))
                log.warning("mirror_queue_send_failed", provider=self._provider,
                            jobs=len(batch), error=describe(error))
            # the entries to retry go back to the front, in order; those the backend refused for
            # good were logged by it and are counted as dropped, never retried
            retry = [batch[i] for i in sorted(set(outcome.retry)) if 0 <= i < len(batch)]
            refused = len({i for i in outcome.refused if 0 <= i < len(batch)} - set(outcome.retry))
            self.dropped += refused
            self.sent += len(batch) - len(retry) - refused
            self.failures += len(retry)
            self._bodies.extendleft(reversed(retry))
            self._sending = 0
            if retry:
                attempt += 1
                delay = min(self._backoff_cap, self._backoff_base * 2 ** min(attempt, 16))
                await asyncio.sleep(random.uniform(delay / 2, delay))
            else:
                attempt = 0

    async def close(self, within: float) -> int:
        """Stop accepting, send what is buffered within `within` seconds; returns what is left."""
        self._closing = True
        self._wakeup.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), within)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        left = self.depth
        if left:
            log.warning("mirror_queue_unsent_at_close", provider=self._provider, jobs=left)
        return left

