"""The two in-process queues: `MIRROR_QUEUE_PROVIDER=memory`, and the contract's test double.

`bounded_memory_queue()` is shared by the proxy and its in-process worker; `in_memory_double()`
is the contract in its plainest form, shipped in the package so tests (ours and a user's) can
run the worker without a server.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirrorgate.backends._shared import BATCH_SIZE, ignore_drop, report_drop
from mirrorgate.mirror import MirrorQueue, QueueMessage, QueueStats, QueueTraits, ReceiptHandle

if TYPE_CHECKING:  # named in signatures only
    from mirrorgate.backends._shared import DropHook
    from mirrorgate.mirror import MirrorJob, Seconds

__all__ = [
    "BoundedMemoryQueue",
    "MemoryDouble",
    "MemoryQueueSettings",
    "bounded_memory_queue",
    "in_memory_double",
]


@dataclass(frozen=True, slots=True)
class MemoryQueueSettings:
    """The bounded queue's two knobs: the depth cap, and the idle poll window in seconds
    (20 in production, like the SQS long-poll; a field only so tests can shorten it)."""

    max_depth: int
    poll_window: float = 20.0

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {self.max_depth}")
        if self.poll_window < 0:
            raise ValueError(f"poll_window cannot be negative, got {self.poll_window}")


class BoundedMemoryQueue:
    """Departs from the contract on purpose (bounded, drop-newest, no redelivery): a lost job
    only means the next pull is served from public and enqueued again."""

    # a receive removes jobs for good: nothing is retained after delivery
    traits = QueueTraits("memory", crosses_processes=False, redelivers=False)

    def __init__(self, settings: MemoryQueueSettings, on_drop: DropHook = ignore_drop) -> None:
        self._settings = settings
        self._on_drop = on_drop
        self._jobs: deque[MirrorJob] = deque()
        self._arrived = asyncio.Event()
        self._receipts = itertools.count(1)
        self._dropped = 0
        self._taken = 0

    async def enqueue(self, job: MirrorJob) -> bool:
        # past the cap the job is dropped: never raises, never blocks the serve path
        if len(self._jobs) >= self._settings.max_depth:
            self._dropped += 1
            report_drop(self._dropped, self._on_drop)
            return False
        self._jobs.append(job)
        self._arrived.set()
        return True

    async def receive(self) -> list[QueueMessage]:
        # a bounded long-poll: wait up to the window for one job, then drain without waiting
        # again. Jobs are taken only after the wait, with no suspension point in between, so a
        # cancelled wait consumes nothing.
        if not self._jobs:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=self._settings.poll_window)
            except TimeoutError:
                return []
        batch: list[QueueMessage] = []
        while self._jobs and len(batch) < BATCH_SIZE:
            receipt = ReceiptHandle(f"memory-{next(self._receipts)}")
            batch.append(QueueMessage(self._jobs.popleft(), receipt, 1, message_id=receipt))
        self._taken += len(batch)
        return batch

    async def ack(self, _receipt: ReceiptHandle) -> None:
        return None

    async def extend_visibility(self, _receipt: ReceiptHandle, _seconds: Seconds) -> None:
        return None

    async def close(self) -> None:
        self._jobs.clear()

    def stats(self) -> QueueStats:
        return QueueStats(depth=len(self._jobs), dropped=self._dropped, sent=self._taken)

    def record(self) -> MirrorQueue:
        return MirrorQueue(self.traits, self.enqueue, self.receive, self.ack,
                           self.extend_visibility, self.close, self.stats)


def bounded_memory_queue(
    settings: MemoryQueueSettings, on_drop: DropHook = ignore_drop,
) -> MirrorQueue:
    return BoundedMemoryQueue(settings, on_drop).record()


@dataclass(slots=True)
class _Delivery:
    order: int
    job: MirrorJob
    deliveries: int
    held_passes: int = 0


class MemoryDouble:
    """FIFO, every visible job handed over at once, an unacked delivery back on the next
    receive with its count raised, and `extend_visibility` holding one across one such pass."""

    traits = QueueTraits("double", crosses_processes=False, redelivers=True)

    def __init__(self) -> None:
        self._visible: dict[int, _Delivery] = {}
        self._in_flight: dict[ReceiptHandle, _Delivery] = {}
        self._orders = itertools.count()
        self._receipts = itertools.count(1)

    async def enqueue(self, job: MirrorJob) -> bool:
        order = next(self._orders)
        self._visible[order] = _Delivery(order, job, 0)
        return True

    async def receive(self) -> list[QueueMessage]:
        for receipt, held in list(self._in_flight.items()):
            if held.held_passes > 0:
                held.held_passes -= 1
                continue
            del self._in_flight[receipt]
            self._visible[held.order] = held
        batch: list[QueueMessage] = []
        for order in sorted(self._visible):
            delivery = self._visible.pop(order)
            delivery.deliveries += 1
            receipt = ReceiptHandle(f"double-{next(self._receipts)}")
            self._in_flight[receipt] = delivery
            batch.append(QueueMessage(delivery.job, receipt, delivery.deliveries,
                                      message_id=f"double-{delivery.order}"))
        return batch

    async def ack(self, receipt: ReceiptHandle) -> None:
        self._in_flight.pop(receipt, None)

    async def extend_visibility(self, receipt: ReceiptHandle, seconds: Seconds) -> None:
        delivery = self._in_flight.get(receipt)
        if delivery is None:
            return
        if seconds <= 0:
            del self._in_flight[receipt]
            self._visible[delivery.order] = delivery
        else:
            delivery.held_passes = 1

    async def close(self) -> None:
        return None

    def stats(self) -> QueueStats:
        return QueueStats(depth=len(self._visible) + len(self._in_flight))

    def record(self) -> MirrorQueue:
        return MirrorQueue(self.traits, self.enqueue, self.receive, self.ack,
                           self.extend_visibility, self.close, self.stats)


def in_memory_double() -> MirrorQueue:
    return MemoryDouble().record()
