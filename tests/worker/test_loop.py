"""The receive loop: visibility while a job runs, heartbeats, concurrency, stopping and draining."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from structlog.testing import LogCapture

from mirrorgate.backends.memory import MemoryQueueSettings, bounded_memory_queue
from mirrorgate.mirror import QueueMessage, ReceiptHandle, Seconds
from tests.queue.harness import after_a_visibility_window, receive_within
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import until
from tests.servers.sqs_server import SqsServer
from tests.worker.rig import RigFactory, events, job_from, running


async def test_a_slow_job_keeps_its_message_invisible_until_it_is_acked(
        make_rig: RigFactory, public_registry: FixtureRegistry, sqs_server: SqsServer) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    size = len(package.version("1.3.0").tarball)
    # about 2.5 s of body against a 1 s visibility window
    public_registry.fault(tarball_path("left-pad", "1.3.0"),
                          Fault(chunk_size=max(1, size // 10), chunk_delay=0.25))
    created = await sqs_server.create_queue(visibility=1)
    queue = await sqs_server.open(created.url, poll_wait=1, visibility=1)
    other = await sqs_server.open(created.url, poll_wait=1, visibility=1)
    try:
        rig = await make_rig(queue=queue, visibility=1)
        await queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
        messages = await receive_within(queue, 10)
        job = asyncio.create_task(rig.worker.handle(messages[0]))

        stolen: list[QueueMessage] = []
        while not job.done():  # another worker polls while the job runs: it must get nothing
            stolen.extend(await other.receive())
        assert job.result() == "published"
        assert stolen == []
        assert await other.receive() == []  # acked: gone for good
        assert await after_a_visibility_window(other) == []  # not even once its window lapsed
    finally:
        await other.close()
        await queue.close()


async def test_a_stuck_job_stops_the_heartbeat_and_stop_releases_it_after_the_drain_timeout(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]), make_package("zeta", ["1.0.0"]))
    public_registry.fault("/left-pad/-/", Fault(delay=30))
    double = (await make_rig()).queue
    extended = asyncio.Event()

    async def extend_visibility(receipt: ReceiptHandle, seconds: Seconds) -> None:
        extended.set()
        await double.extend_visibility(receipt, seconds)

    rig = await make_rig(drain_timeout=0.3,
                         queue=dataclasses.replace(double, extend_visibility=extend_visibility))
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    await rig.queue.enqueue(job_from(public_registry, "zeta", "1.0.0"))

    async with running(rig.worker) as stop:
        await until(lambda: len(rig.tarball_gets()) == 1)
        rig.clock.advance(200)
        extended.clear()
        # the worker is busy after the clock moved (it extends the stuck job's window), and
        # still does not beat
        await asyncio.wait_for(extended.wait(), 5)
        assert rig.heartbeat.age() >= 200
        assert not rig.heartbeat.fresh()  # /livez would answer 503

        started = time.monotonic()
        stop.set()
    stopped_in = time.monotonic() - started

    assert 0.3 <= stopped_in < 1.5
    back = await rig.queue.receive()  # both handed back: the stuck one and the waiting one
    assert sorted((m.job.name, m.deliveries) for m in back if m.job) == [
        ("left-pad", 2), ("zeta", 2)]
    [stopped] = events(logs, "worker_stopped")
    assert stopped["released"] == 2
    assert rig.tarball_gets() == ["/left-pad/-/left-pad-1.3.0.tgz"]  # zeta never started


async def test_an_empty_poll_is_a_healthy_idle_that_advances_the_heartbeat(
        make_rig: RigFactory) -> None:
    rig = await make_rig()
    async with running(rig.worker):
        rig.clock.advance(500)
        await until(lambda: rig.heartbeat.age() == 0)
        assert rig.heartbeat.fresh()


async def test_jobs_run_in_parallel_up_to_the_configured_concurrency(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    names = ["alpha", "beta", "gamma", "delta"]
    public_registry.add(*(make_package(name, ["1.0.0"]) for name in names))
    for name in names:
        public_registry.fault(f"/{name}/-/", Fault(delay=1.0))
    queue = bounded_memory_queue(MemoryQueueSettings(max_depth=10, poll_window=0.05))
    rig = await make_rig(queue=queue, worker_concurrency=3)
    for name in names:
        await queue.enqueue(job_from(public_registry, name, "1.0.0"))

    started = time.monotonic()
    async with running(rig.worker):
        await until(lambda: len(rig.tarball_gets()) >= 3, timeout=0.8)
        assert len(rig.tarball_gets()) == 3  # three in flight at once, the fourth waits
        await until(lambda: rig.outcomes("published") == 4)
    assert time.monotonic() - started < 3.0  # two rounds of 1 s, not four


async def test_stop_during_an_idle_long_poll_returns_at_once(make_rig: RigFactory) -> None:
    queue = bounded_memory_queue(MemoryQueueSettings(max_depth=10, poll_window=20))
    polling = asyncio.Event()

    async def receive() -> list[QueueMessage]:
        polling.set()
        return await queue.receive()

    rig = await make_rig(queue=dataclasses.replace(queue, receive=receive))
    async with running(rig.worker) as stop:
        await polling.wait()  # the loop is inside its 20 s receive now
        started = time.monotonic()
        stop.set()
    assert time.monotonic() - started < 0.5


async def test_a_queue_whose_receive_fails_is_polled_again_and_the_job_still_runs(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    real_receive = rig.queue.receive
    failures = [ConnectionError("the queue endpoint is unreachable")]

    async def receive() -> list[QueueMessage]:
        if failures:
            raise failures.pop()
        return await real_receive()

    flaky = dataclasses.replace(rig.queue, receive=receive)
    rig = await make_rig(queue=flaky)
    await flaky.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    async with running(rig.worker):
        await until(lambda: rig.outcomes("published") == 1)

    assert events(logs, "worker_receive_failed")[0]["error"] == "the queue endpoint is unreachable"


async def test_two_jobs_for_one_version_run_one_after_the_other_and_download_once(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    public_registry.fault("/left-pad/-/", Fault(delay=0.3))
    queue = bounded_memory_queue(MemoryQueueSettings(max_depth=10, poll_window=0.05))
    rig = await make_rig(queue=queue, worker_concurrency=2)
    for _ in range(2):  # two pulls of the same version, two enqueues
        await queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    async with running(rig.worker):
        await until(lambda: rig.outcomes("already_present") == 1)

    assert rig.outcomes("published") == 1
    assert len(rig.tarball_gets()) == 1
