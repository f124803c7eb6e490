"""Row 32 of the faults table: a background task of `mirrorgate serve` killed.

> | 32 | each background task of `mirrorgate serve` killed in turn (the store's poll, the pull
> log's writer, the exposure warnings, the rules' and the client tokens' watchers, the
> notifier) | `task_died` logged, `mirrorgate_task_restarts_total{task}` counted, `/readyz`
> 503 naming the task until it is started again (1 s later), then 200; the pull log writes
> the pulls after its writer's restart |

The process's own composition root (`process._run`, as `mirrorgate serve` runs it) in this
test's event loop, so the test can reach its tasks: each is found by its name and cancelled
from outside, as a bug's exception or a library's stray cancel ends a task. Before the
supervisor, the pull log's writer died this way on one row PostgreSQL refused, unseen, and
nothing was logged again. The process is stopped with a real SIGTERM to itself, as Kubernetes
stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import structlog

from mirrorgate.access.tokens import new_token
from mirrorgate.config import load_settings
from mirrorgate.process import Shape, _run
from mirrorgate.store.sqlite import FILENAME, open_sqlite
from tests.access.rig import bearer, tokens_file
from tests.metric_samples import metric_value, text_samples
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package
from tests.servers.ports import free_port
from tests.servers.webhook import SECRET, WebhookReceiver

TASKS = ("state-store", "pull-log", "exposure-warnings", "rules-watcher", "client-tokens",
         "notifier")


async def test_each_background_task_killed_is_started_again_and_readyz_says_so_meanwhile(
        public_registry: FixtureRegistry, webhook: WebhookReceiver, tmp_path: Path) -> None:
    public_registry.add(make_package("fine-pkg", ["1.0.0"]))
    token = new_token()
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    settings = load_settings({
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_DATA_DIR": str(tmp_path / "data"), "MIRRORGATE_LISTEN": f"127.0.0.1:{port}",
        "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens_file(tmp_path, ci=token)),
        "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET,
    }, npm_registry=lambda: None)
    running = asyncio.create_task(_run(settings, Shape.SINGLE))
    async with aiohttp.ClientSession() as session:
        async def readyz() -> tuple[int, str]:
            try:
                async with session.get(base + "readyz") as reply:
                    return reply.status, str((await reply.json()).get("reason", ""))
            except aiohttp.ClientConnectorError:  # not listening yet
                return 0, "not listening"

        async def ready_within(seconds: float) -> None:
            for _ in range(int(seconds / 0.05)):
                assert not running.done(), running
                if (await readyz())[0] == 200:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"/readyz still says {await readyz()}")

        await ready_within(20)
        with structlog.testing.capture_logs() as logs:
            for name in TASKS:
                [task] = [t for t in asyncio.all_tasks() if t.get_name() == name]
                task.cancel()  # killed from outside: not by the process's stop
                await asyncio.sleep(0.1)
                status, reason = await readyz()
                assert status == 503, (name, reason)
                assert f"the background task {name} stopped" in reason
                await ready_within(3)
                [again] = [t for t in asyncio.all_tasks() if t.get_name() == name]
                assert again is not task

            async with session.get(base + "npm/fine-pkg/-/fine-pkg-1.0.0.tgz",
                                   headers={**bearer(token), "X-Request-Id": "after"}) as reply:
                assert reply.status == 200
                await reply.read()  # a client gone before the end has pulled nothing
            async with session.get(base + "metrics") as reply:
                samples = text_samples(await reply.text())
        for name in TASKS:
            assert metric_value(samples, "mirrorgate_task_restarts_total", task=name) == 1
        died = [line["task"] for line in logs if line["event"] == "task_died"]
        assert died == list(TASKS)

    os.kill(os.getpid(), signal.SIGTERM)  # the handler on the loop sets the process's stop
    assert await asyncio.wait_for(running, 30) == 0
    # the pull after the writer's restart was written (at the latest by the way out)
    store = await open_sqlite(tmp_path / "data" / FILENAME)
    try:
        assert [p.client for p in await store.pulls(name="fine-pkg")] == ["ci"]
    finally:
        await store.close()
