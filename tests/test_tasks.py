"""The process's background tasks, watched (`mirrorgate.tasks`): a task that dies, by an error
or killed from outside, is logged, counted and started again after a backoff, `/readyz` says
so (503, naming it) until it is back, and one that returns or dies on the way out is not
started again. `/readyz` is asked over HTTP, on loopback, as a kubelet asks it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestServer

from mirrorgate.healthz import Health, add_health_routes
from mirrorgate.metrics import Metrics
from mirrorgate.tasks import Tasks
from tests.metric_samples import metric_value, registry_samples

BACKOFF = 0.4


class Rig:
    def __init__(self, server: TestServer, health: Health, metrics: Metrics) -> None:
        self.server = server
        self.health = health
        self.metrics = metrics

    async def readyz(self) -> tuple[int, dict[str, object]]:
        async with aiohttp.ClientSession() as session, \
                session.get(self.server.make_url("/readyz")) as reply:
            return reply.status, await reply.json()

    def restarts(self, task: str) -> float:
        return metric_value(registry_samples(self.metrics.registry),
                            "mirrorgate_task_restarts_total", task=task)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    metrics = Metrics()
    health = Health(ready=True, tasks=Tasks(metrics, first=BACKOFF, longest=4 * BACKOFF))
    app = web.Application()
    add_health_routes(app, health, metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield Rig(server, health, metrics)
    await health.tasks.cancel()
    await server.close()


async def until(check: object, seconds: float = 5.0) -> None:
    assert callable(check)
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not within the time allowed")


async def test_a_task_that_raises_is_logged_counted_and_started_again_and_readyz_says_so(
        rig: Rig) -> None:
    runs: list[int] = []

    async def writer() -> None:  # dies at its first run, as the pull log's writer did
        runs.append(len(runs))
        if len(runs) == 1:
            raise ValueError("invalid byte sequence for encoding \"UTF8\": 0x00")
        await asyncio.Event().wait()

    with structlog.testing.capture_logs() as logs:
        rig.health.tasks.keep("pull-log", writer)
        await until(lambda: runs)
        status, body = await rig.readyz()
        assert status == 503
        assert "the background task pull-log stopped (ValueError: invalid byte sequence" \
            in str(body["reason"])
        await until(lambda: len(runs) == 2)
    assert await rig.readyz() == (200, {"status": "ready"})
    assert rig.restarts("pull-log") == 1
    [died] = [line for line in logs if line["event"] == "task_died"]
    assert (died["task"], died["restarts"], died["retry_in"]) == ("pull-log", 1, BACKOFF)


async def test_a_task_killed_from_outside_is_started_again(rig: Rig) -> None:
    started = asyncio.Queue[asyncio.Task[None] | None]()

    async def poll() -> None:
        started.put_nowait(asyncio.current_task())
        await asyncio.Event().wait()

    rig.health.tasks.keep("state-store", poll)
    first = await started.get()
    assert first is not None
    first.cancel()  # killed: not by its keeper, not by the process's stop
    second = await asyncio.wait_for(started.get(), 5)
    assert second is not None
    assert second is not first
    assert rig.restarts("state-store") == 1
    assert (await rig.readyz())[0] == 200


async def test_the_backoff_doubles_while_a_task_keeps_dying(rig: Rig) -> None:
    with structlog.testing.capture_logs() as logs:
        async def broken() -> None:
            raise RuntimeError("broken at every start")
        rig.health.tasks.keep("rules-watcher", broken)
        await until(lambda: rig.restarts("rules-watcher") >= 3, 10)
    waits = [line["retry_in"] for line in logs if line["event"] == "task_died"][:3]
    assert waits == [BACKOFF, 2 * BACKOFF, 4 * BACKOFF]


async def test_a_task_that_returns_is_done_and_not_started_again(rig: Rig) -> None:
    runs: list[int] = []

    async def nothing_to_do() -> None:  # the pull log's writer with no store
        runs.append(1)

    keeper = rig.health.tasks.keep("pull-log", nothing_to_do)
    await asyncio.wait_for(keeper, 5)
    await asyncio.sleep(2 * BACKOFF)
    assert runs == [1]
    assert rig.restarts("pull-log") == 0


async def test_the_stop_cuts_a_backoff_short_and_a_death_after_it_is_not_restarted() -> None:
    stop = asyncio.Event()
    tasks = Tasks(stop=stop, first=60.0)
    runs: list[bool] = []

    async def facts_poll() -> None:
        runs.append(stop.is_set())
        raise RuntimeError("dies whether stopping or not")

    tasks.keep("state-store", facts_poll)
    await until(lambda: tasks.problem() is not None)
    stop.set()  # mid-backoff: started once more at once, to do what it does on the way out
    await asyncio.wait_for(tasks.join(), 5)
    assert runs == [False, True]
    assert tasks.restarts["state-store"] == 1


async def test_a_task_kept_again_under_its_name_replaces_the_old_one() -> None:
    tasks = Tasks()
    seen: list[str] = []

    async def feed(label: str) -> None:
        seen.append(label)
        await asyncio.Event().wait()

    old = tasks.keep("advisory-feed", lambda: feed("old"))
    await until(lambda: seen == ["old"])
    tasks.keep("advisory-feed", lambda: feed("new"))
    await until(lambda: seen == ["old", "new"])
    await asyncio.sleep(0)
    assert old.cancelled()
    await tasks.cancel()
    assert tasks.restarts["advisory-feed"] == 0
