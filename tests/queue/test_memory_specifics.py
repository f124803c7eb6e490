"""What only the in-process queues promise: the bounded queue's cap, drop reports, long-poll
and cancellation; the test double's FIFO order and all-at-once hand-over."""

from __future__ import annotations

import asyncio
import time

import pytest

from mirrorgate.backends.memory import (
    MemoryQueueSettings,
    bounded_memory_queue,
    in_memory_double,
)
from mirrorgate.mirror import MirrorQueue, Seconds
from tests.builders import make_job


def bounded(max_depth: int = 10, poll_window: float = 0.05, **kw: object) -> MirrorQueue:
    return bounded_memory_queue(MemoryQueueSettings(max_depth, poll_window), **kw)  # type: ignore[arg-type]


async def test_the_bounded_queue_holds_at_most_its_cap_and_drops_the_newest() -> None:
    queue = bounded(max_depth=3)
    for i in range(5):
        await queue.enqueue(make_job(f"pkg-{i}"))
    got = await queue.receive()
    assert [m.job.name for m in got if m.job] == ["pkg-0", "pkg-1", "pkg-2"]
    assert queue.stats().dropped == 2


async def test_drops_are_reported_on_the_first_and_every_thousandth() -> None:
    reports: list[int] = []
    queue = bounded(max_depth=1, on_drop=reports.append)
    for i in range(3002):
        await queue.enqueue(make_job(f"pkg-{i}"))
    assert reports == [1, 1000, 2000, 3000]
    assert queue.stats().dropped == 3001


async def test_a_failing_drop_callback_never_reaches_the_caller() -> None:
    def explode(_total: int) -> None:
        raise RuntimeError("reporting is broken")

    queue = bounded(max_depth=1, on_drop=explode)
    await queue.enqueue(make_job("a"))
    await queue.enqueue(make_job("b"))
    assert queue.stats().dropped == 1


async def test_an_idle_receive_returns_empty_when_the_poll_window_lapses() -> None:
    queue = bounded(poll_window=0.2)
    started = time.monotonic()
    assert await queue.receive() == []
    waited = time.monotonic() - started
    assert 0.15 <= waited < 2


async def test_a_waiting_receive_returns_as_soon_as_a_job_arrives() -> None:
    queue = bounded(poll_window=10)
    waiting = asyncio.create_task(queue.receive())
    await asyncio.sleep(0)  # one turn: asyncio runs the receive until it blocks on its wait
    assert not waiting.done()
    started = time.monotonic()
    await queue.enqueue(make_job())
    got = await asyncio.wait_for(waiting, 2)
    assert len(got) == 1
    assert time.monotonic() - started < 1


async def test_a_receive_drains_at_most_ten_without_waiting_again() -> None:
    queue = bounded(max_depth=100, poll_window=10)
    for i in range(23):
        await queue.enqueue(make_job(f"pkg-{i}"))
    sizes = [len(await asyncio.wait_for(queue.receive(), 1)) for _ in range(3)]
    assert sizes == [10, 10, 3]


async def test_a_receive_cancelled_while_waiting_consumes_nothing() -> None:
    queue = bounded(poll_window=10)
    waiting = asyncio.create_task(queue.receive())
    await asyncio.sleep(0)  # one turn: asyncio runs the receive until it blocks on its wait
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await queue.enqueue(make_job())
    assert len(await queue.receive()) == 1


async def test_nothing_is_retained_after_delivery() -> None:
    queue = bounded()
    await queue.enqueue(make_job())
    [message] = await queue.receive()
    assert queue.stats().depth == 0
    await queue.extend_visibility(message.receipt, Seconds(30))
    await queue.ack(message.receipt)
    assert await queue.receive() == []


async def test_concurrent_producers_and_a_consumer_lose_nothing_below_the_cap() -> None:
    queue = bounded(max_depth=10_000, poll_window=0.2)
    received: list[str] = []

    async def consume() -> None:
        while len(received) < 2000:
            received.extend(m.job.name for m in await queue.receive() if m.job)

    async def produce(lane: int) -> None:
        for i in range(400):
            await queue.enqueue(make_job(f"lane{lane}-{i}"))
            if i % 7 == 0:
                await asyncio.sleep(0)

    consumer = asyncio.create_task(consume())
    await asyncio.gather(*(produce(lane) for lane in range(5)))
    await asyncio.wait_for(consumer, 10)
    assert len(set(received)) == 2000
    assert queue.stats().dropped == 0


async def test_the_double_hands_over_jobs_in_fifo_order_all_at_once() -> None:
    queue = in_memory_double()
    for i in range(15):
        await queue.enqueue(make_job(f"pkg-{i:02}"))
    got = await queue.receive()
    assert [m.job.name for m in got if m.job] == [f"pkg-{i:02}" for i in range(15)]


async def test_the_double_holds_an_extended_job_for_exactly_one_pass() -> None:
    queue = in_memory_double()
    await queue.enqueue(make_job())
    [message] = await queue.receive()
    await queue.extend_visibility(message.receipt, Seconds(30))
    assert await queue.receive() == []
    [again] = await queue.receive()
    assert again.deliveries == 2


async def test_a_stale_receipt_does_not_ack_the_redelivery() -> None:
    queue = in_memory_double()
    await queue.enqueue(make_job())
    [first] = await queue.receive()
    [second] = await queue.receive()
    await queue.ack(first.receipt)
    [third] = await queue.receive()
    assert third.deliveries == 3
    assert second.receipt != third.receipt
