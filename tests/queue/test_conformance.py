"""The MirrorQueue contract, run against every backend in `BACKENDS`.

Departures of the bounded memory queue (no redelivery, no-op ack and extend) and of the test
double (it hands over every visible job at once, not ten) are marked where they apply.
"""

from __future__ import annotations

import asyncio

import pytest

from mirrorgate.mirror import Seconds
from tests.builders import make_job
from tests.queue.harness import Harness, after_a_visibility_window, receive_within

NO_REDELIVERY = ("the bounded memory queue never redelivers; "
                 "a lost job is enqueued again on the next pull")
ALL_AT_ONCE = "the test double hands over every visible job in one receive"


async def test_an_enqueued_job_is_received_with_every_field_intact(harness: Harness) -> None:
    job = make_job("@acme/widget", "2.0.0-beta.1")
    await harness.queue.enqueue(job)
    [message] = await receive_within(harness.queue, harness.patience)
    assert message.job == job
    assert message.job is not None
    assert message.job.manifest == job.manifest
    assert message.problem is None


async def test_the_first_delivery_reports_a_count_of_one(harness: Harness) -> None:
    await harness.queue.enqueue(make_job())
    [message] = await receive_within(harness.queue, harness.patience)
    assert message.deliveries == 1


async def test_an_empty_receive_returns_an_empty_list(harness: Harness) -> None:
    assert await harness.queue.receive() == []


async def test_every_enqueued_job_is_received_once_when_each_is_acked(harness: Harness) -> None:
    jobs = [make_job(f"pkg-{i}") for i in range(7)]
    for job in jobs:
        await harness.queue.enqueue(job)
    got = await receive_within(harness.queue, 3 * harness.patience, want=len(jobs))
    for message in got:
        await harness.queue.ack(message.receipt)
    assert sorted(m.job.name for m in got if m.job) == sorted(j.name for j in jobs)
    assert await after_a_visibility_window(harness.queue) == []


async def test_an_acked_job_is_not_delivered_again(harness: Harness) -> None:
    await harness.queue.enqueue(make_job())
    [message] = await receive_within(harness.queue, harness.patience)
    await harness.queue.ack(message.receipt)
    assert await after_a_visibility_window(harness.queue) == []


@pytest.mark.departure("memory", reason=NO_REDELIVERY)
async def test_an_unacked_job_is_redelivered_on_the_next_receive(harness: Harness) -> None:
    job = make_job()
    await harness.queue.enqueue(job)
    await receive_within(harness.queue, harness.patience)
    again = await receive_within(harness.queue, harness.window + harness.patience)
    assert [m.job for m in again] == [job]


@pytest.mark.departure("memory", reason=NO_REDELIVERY)
async def test_a_redelivery_reports_the_delivery_count_plus_one(harness: Harness) -> None:
    await harness.queue.enqueue(make_job())
    [first] = await receive_within(harness.queue, harness.patience)
    [second] = await receive_within(harness.queue, harness.window + harness.patience)
    assert first.deliveries is not None
    assert second.deliveries == first.deliveries + 1


@pytest.mark.departure("memory", reason=NO_REDELIVERY)
async def test_a_redelivery_carries_a_receipt_that_acks_it(harness: Harness) -> None:
    await harness.queue.enqueue(make_job())
    await receive_within(harness.queue, harness.patience)
    [again] = await receive_within(harness.queue, harness.window + harness.patience)
    await harness.queue.ack(again.receipt)
    assert await after_a_visibility_window(harness.queue) == []


@pytest.mark.departure("memory", reason=NO_REDELIVERY)
async def test_extend_visibility_holds_a_job_in_flight(harness: Harness) -> None:
    job = make_job()
    await harness.queue.enqueue(job)
    [message] = await receive_within(harness.queue, harness.patience)
    await harness.queue.extend_visibility(message.receipt, Seconds(harness.hold))
    assert await receive_within(harness.queue, harness.window * 0.5) == []
    back = await receive_within(harness.queue, harness.hold + harness.window + harness.patience)
    assert [m.job for m in back] == [job]


@pytest.mark.departure("memory", reason=NO_REDELIVERY)
async def test_extend_visibility_to_zero_releases_a_job_for_a_prompt_retry(
    harness: Harness,
) -> None:
    job = make_job()
    await harness.queue.enqueue(job)
    [message] = await receive_within(harness.queue, harness.patience)
    await harness.queue.extend_visibility(message.receipt, Seconds(0))
    back = await receive_within(harness.queue, harness.patience)
    assert [m.job for m in back] == [job]


async def test_ack_after_extend_ends_the_job(harness: Harness) -> None:
    await harness.queue.enqueue(make_job())
    [message] = await receive_within(harness.queue, harness.patience)
    await harness.queue.extend_visibility(message.receipt, Seconds(harness.hold))
    await harness.queue.ack(message.receipt)
    assert await receive_within(harness.queue, harness.hold + harness.window + harness.quiet) == []


@pytest.mark.departure("double", reason=ALL_AT_ONCE)
async def test_a_receive_returns_at_most_ten_jobs(harness: Harness) -> None:
    for i in range(25):
        await harness.queue.enqueue(make_job(f"pkg-{i}"))
    sizes: list[int] = []
    for _ in range(30):
        batch = await harness.queue.receive()
        sizes.append(len(batch))
        for message in batch:
            await harness.queue.ack(message.receipt)
        if sum(sizes) >= 25:
            break
    assert sum(sizes) == 25
    assert max(sizes) <= 10


async def test_concurrent_producers_lose_nothing_below_the_cap(harness: Harness) -> None:
    async def produce(lane: int) -> None:
        for i in range(10):
            await harness.queue.enqueue(make_job(f"lane{lane}-{i}"))
            await asyncio.sleep(0)

    await asyncio.gather(*(produce(lane) for lane in range(5)))
    got = await receive_within(harness.queue, 3 * harness.patience, want=50)
    for message in got:
        await harness.queue.ack(message.receipt)
    assert len({m.job.name for m in got if m.job}) == 50
