"""A background task that dies says so: `Metrics.watch_task` counts and logs a task that ended
with an error (`mirrorgate_background_task_failures_total{task}`, `background_task_failed`).

The failure it stops: a loop the process relies on (the state store's writer, the rules
watcher, the advisory feed) raising once and stopping for good while the listener still
answers, with nothing on /metrics to alert on.
"""

from __future__ import annotations

import asyncio

import structlog

from mirrorgate.metrics import Metrics
from tests.metric_samples import metric_value, registry_samples

FAILURES = "mirrorgate_background_task_failures_total"


async def _broken() -> None:
    await asyncio.sleep(0)
    raise OSError("the disk went away")


async def _forever() -> None:
    await asyncio.Event().wait()


async def _done() -> None:
    await asyncio.sleep(0)


def test_a_task_that_ends_with_an_error_is_counted_and_logged_by_its_name() -> None:
    metrics = Metrics()

    async def run() -> None:
        broken = metrics.watch_task(asyncio.create_task(_broken(), name="state-store"))
        finished = metrics.watch_task(asyncio.create_task(_done(), name="pull-log"))
        stopped = metrics.watch_task(asyncio.create_task(_forever(), name="rules-watcher"))
        # every watched task's series is there at 0 before anything happens: an alert's
        # increase() sees the first failure as one
        assert metric_value(registry_samples(metrics.registry), FAILURES,
                            task="rules-watcher") == 0
        await asyncio.sleep(0.01)
        stopped.cancel()
        await asyncio.gather(broken, finished, stopped, return_exceptions=True)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(run())

    samples = registry_samples(metrics.registry)
    assert metric_value(samples, FAILURES, task="state-store") == 1
    # the controls: a task that finished, and one cancelled at a stop, are no failure
    assert metric_value(samples, FAILURES, task="pull-log") == 0
    assert metric_value(samples, FAILURES, task="rules-watcher") == 0
    [line] = [entry for entry in logs if entry["event"] == "background_task_failed"]
    assert line["task"] == "state-store"
    assert line["error"] == "OSError: the disk went away"
