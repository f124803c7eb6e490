"""The two in-process queues: the test double and the bounded production queue.

`in_memory_double()` is the contract in its plainest form, shipped in the package so tests
(ours and a user's) can run the worker without a server: FIFO, every visible job handed over
at once, in-flight tracking, an unacked delivery returning on the next receive with its count
raised, and `extend_visibility` holding a delivery in flight across one such pass.

`bounded_memory_queue()` is `MIRROR_QUEUE_PROVIDER=memory`, shared by the proxy and its
in-process worker. It departs from the contract on purpose, because a lost job only means the
next pull is served from public and enqueued again:

- bounded, drop-newest: past the cap an enqueue drops the job, never raises and never blocks,
  and reports the running drop count on the first drop and then on every 1,000th;
- no redelivery: a receive removes jobs for good, so nothing is retained after delivery, and
  `ack` and `extend_visibility` are no-ops;
- `receive` is a bounded long-poll: it waits up to the poll window for a job, then drains up to
  10 without waiting again. A cancelled wait consumes nothing, because jobs are only taken
  after the wait and without a suspension point in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from mirrorgate.mirror import (
    MirrorJob,
    MirrorQueue,
    QueueMessage,
    QueueStats,
    ReceiptHandle,
    Seconds,
)

__all__ = [
    "BATCH_SIZE",
    "DROP_REPORT_EVERY",
    "MemoryQueueSettings",
    "bounded_memory_queue",
    "in_memory_double",
    "should_report_drop",
]

BATCH_SIZE = 10
"""At most this many jobs per receive: the SQS cap, so every production backend hands the
worker the same batch shape and a cold-cache burst cannot starve its heartbeat."""

DROP_REPORT_EVERY = 1000
"""Drops absorbed between reports: the first is reported, then every multiple of this."""


def should_report_drop(total: int) -> bool:
    return total == 1 or total % DROP_REPORT_EVERY == 0


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


def _noop_drop(_total: int) -> None:
    return None


def bounded_memory_queue(
    settings: MemoryQueueSettings,
    on_drop: Callable[[int], None] = _noop_drop,
) -> MirrorQueue:
    jobs: deque[MirrorJob] = deque()
    arrived = asyncio.Event()
    counters = {"dropped": 0, "taken": 0}
    receipts = itertools.count(1)

    async def enqueue(job: MirrorJob) -> None:
        if len(jobs) >= settings.max_depth:
            counters["dropped"] += 1
            if should_report_drop(counters["dropped"]):
                # a reporting hook must never fail the serve path
                with contextlib.suppress(Exception):
                    on_drop(counters["dropped"])
            return
        jobs.append(job)
        arrived.set()

    async def receive() -> list[QueueMessage]:
        if not jobs:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), timeout=settings.poll_window)
            except TimeoutError:
                return []
        batch: list[QueueMessage] = []
        while jobs and len(batch) < BATCH_SIZE:
            receipt = ReceiptHandle(f"memory-{next(receipts)}")
            batch.append(QueueMessage(jobs.popleft(), receipt, 1, message_id=receipt))
        counters["taken"] += len(batch)
        return batch

    async def ack(_receipt: ReceiptHandle) -> None:
        return None

    async def extend_visibility(_receipt: ReceiptHandle, _seconds: Seconds) -> None:
        return None

    async def close() -> None:
        jobs.clear()

    def stats() -> QueueStats:
        return QueueStats(depth=len(jobs), dropped=counters["dropped"], sent=counters["taken"])

    return MirrorQueue(
        provider="memory",
        enqueue=enqueue,
        receive=receive,
        ack=ack,
        extend_visibility=extend_visibility,
        close=close,
        stats=stats,
        crosses_processes=False,
        redelivers=False,
    )


@dataclass(slots=True)
class _Delivery:
    order: int
    job: MirrorJob
    deliveries: int
    held_passes: int = 0


def in_memory_double() -> MirrorQueue:
    visible: dict[int, _Delivery] = {}
    in_flight: dict[ReceiptHandle, _Delivery] = {}
    orders = itertools.count()
    receipts = itertools.count(1)

    async def enqueue(job: MirrorJob) -> None:
        order = next(orders)
        visible[order] = _Delivery(order, job, 0)

    async def receive() -> list[QueueMessage]:
        for receipt, delivery in list(in_flight.items()):
            if delivery.held_passes > 0:
                delivery.held_passes -= 1
                continue
            del in_flight[receipt]
            visible[delivery.order] = delivery
        batch: list[QueueMessage] = []
        for order in sorted(visible):
            delivery = visible.pop(order)
            delivery.deliveries += 1
            receipt = ReceiptHandle(f"double-{next(receipts)}")
            in_flight[receipt] = delivery
            batch.append(QueueMessage(delivery.job, receipt, delivery.deliveries,
                                      message_id=f"double-{delivery.order}"))
        return batch

    async def ack(receipt: ReceiptHandle) -> None:
        in_flight.pop(receipt, None)

    async def extend_visibility(receipt: ReceiptHandle, seconds: Seconds) -> None:
        delivery = in_flight.get(receipt)
        if delivery is None:
            return
        if seconds <= 0:
            del in_flight[receipt]
            visible[delivery.order] = delivery
        else:
            delivery.held_passes = 1

    async def close() -> None:
        return None

    def stats() -> QueueStats:
        return QueueStats(depth=len(visible) + len(in_flight))

    return MirrorQueue(
        provider="double",
        enqueue=enqueue,
        receive=receive,
        ack=ack,
        extend_visibility=extend_visibility,
        close=close,
        stats=stats,
        crosses_processes=False,
        redelivers=True,
    )
