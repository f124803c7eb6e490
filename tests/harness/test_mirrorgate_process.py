"""The real `mirrorgate` command in a subprocess: ready on /readyz, observable through its
logs and metrics, and stopped by a real SIGTERM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.processes import (
    MirrorgateProcess,
    ProcessFailedError,
    wait_for,
    wait_for_async,
)


def test_mirrorgate_serve_becomes_ready_and_exits_zero_on_sigterm(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
) -> None:
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})

    assert proxy.get("readyz").status == 200
    assert proxy.get("livez").status == 200
    started = proxy.events("started")
    assert started
    assert started[0]["command"] == "serve"
    assert proxy.metric("mirrorgate_jobs_dropped_total", provider="memory") == 0.0
    assert any(key.startswith("mirrorgate_jobs_sent") for key in proxy.metrics())

    assert proxy.terminate() == 0
    assert proxy.events("stopped")


def test_mirrorgate_serve_answers_health_on_its_own_listener(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
) -> None:
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    assert proxy.health_url == proxy.url
    assert proxy.registry_url == proxy.url + "npm/"
    assert proxy.get("readyz").json() == {"status": "ready"}


def test_a_killed_mirrorgate_reports_sigkill(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
) -> None:
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    assert proxy.kill() == -9


def test_a_mirrorgate_that_cannot_start_fails_with_its_stderr(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
) -> None:
    with pytest.raises(ProcessFailedError, match="MIRROR_QUEUE_PROVIDER"):
        mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                             "MIRROR_QUEUE_PROVIDER": "carrier-pigeon"}, timeout=10)


def test_mirrorgate_starts_from_a_minimal_environment_with_json_logs(tmp_path: Path) -> None:
    process = MirrorgateProcess("worker", {"EXTRA": "1"}, workdir=tmp_path)
    assert set(process.env) >= {"PATH", "HOME", "MIRRORGATE_LOG_FORMAT", "MIRRORGATE_LISTEN",
                                "MIRRORGATE_WORKER_LISTEN", "EXTRA"}
    assert process.env["MIRRORGATE_LOG_FORMAT"] == "json"
    assert process.health_url == f"http://{process.env['MIRRORGATE_WORKER_LISTEN']}/"
    assert "VIRTUAL_ENV" not in process.env


def test_wait_for_returns_the_first_truthy_value_and_fails_after_its_timeout() -> None:
    answers = iter([0, None, "done"])
    assert wait_for(lambda: next(answers), timeout=1, interval=0.001) == "done"
    with pytest.raises(AssertionError, match=r"timed out after 0\.05s waiting for never"):
        wait_for(lambda: False, timeout=0.05, interval=0.01, message="never")


async def test_wait_for_async_polls_a_coroutine_predicate_until_it_holds() -> None:
    calls = 0

    async def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    assert await wait_for_async(third_time, timeout=1, interval=0.001) is True
