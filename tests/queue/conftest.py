"""The one fixture the conformance suite runs on: a fresh queue per test, per backend.

Adding a backend means adding one entry to `BACKENDS`: a factory that takes the pytest request
(to reach server fixtures such as moto's) and yields a `Harness`. A test marked
`@pytest.mark.departure("memory", reason=...)` states a documented departure: for that backend
it is expected to fail (strictly: if the departure ever stops holding, the suite says so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from mirrorgate.backends.memory import (
    MemoryQueueSettings,
    bounded_memory_queue,
    in_memory_double,
)
from tests.queue.harness import Harness
from tests.servers.pubsub_server import pubsub_harness
from tests.servers.sqs_server import sqs_harness

Factory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Harness]]


@asynccontextmanager
async def _double(_request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    queue = in_memory_double()
    yield Harness("double", queue)
    await queue.close()


@asynccontextmanager
async def _memory(_request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    queue = bounded_memory_queue(MemoryQueueSettings(max_depth=100, poll_window=0.05))
    yield Harness("memory", queue)
    await queue.close()


BACKENDS: dict[str, Factory] = {
    "double": _double,
    "memory": _memory,
    "pubsub": pubsub_harness,
    "sqs": sqs_harness,
}


@pytest.fixture(params=sorted(BACKENDS))
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with BACKENDS[request.param](request) as made:
        yield made


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "harness" not in callspec.params:
            continue
        kind = callspec.params["harness"]
        for mark in item.iter_markers("departure"):
            if kind in mark.args:
                reason = mark.kwargs.get("reason", "documented departure")
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"departure: {reason}"))
