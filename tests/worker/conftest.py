"""Fixtures of the worker suite: `make_rig` (see rig.py) and `logs`, the captured log lines
with the context the worker binds (package, version, message id) merged in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import LogCapture

from mirrorgate.backends.memory import in_memory_double
from mirrorgate.config import Secret
from mirrorgate.healthz import Heartbeat
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorQueue
from mirrorgate.rules import DEFAULT_RULES, Rules
from mirrorgate.upstream.client import Upstream
from mirrorgate.worker.job import WorkerDeps
from mirrorgate.worker.loop import Worker
from mirrorgate.worker.target import open_target
from tests.clock import ManualClock
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.verdaccio import Verdaccio
from tests.worker.rig import Rig, RigFactory, rig_settings


@pytest.fixture
async def make_rig(public_registry: FixtureRegistry,
                   tmp_path: Path) -> AsyncIterator[RigFactory]:
    """Build a Rig: `await make_rig(target=verdaccio)` (or a directory, or a URL)."""
    built: list[Rig] = []

    async def build(*, target: Verdaccio | Path | str | None = None,
                    queue: MirrorQueue | None = None, token: str | None = None,
                    idle_pause: float = 0.01, rules: Rules = DEFAULT_RULES,
                    **overrides: Any) -> Rig:
        if target is None:
            target = tmp_path / "store"
        if isinstance(target, Verdaccio):
            token = token if token is not None else target.token
            target_url = target.url
        elif isinstance(target, Path):
            target_url = f"file://{target}"
        else:
            target_url = target
        settings = rig_settings(public_registry.url, target_url, tmp_path / "data",
                                 **overrides)
        metrics = Metrics()
        public = Upstream("public", settings.public_upstream, timeout=settings.upstream_timeout,
                          max_metadata_bytes=settings.max_metadata_bytes, metrics=metrics)
        upstreams = [public]
        target_client: Upstream | None = None
        if not target_url.startswith("file://"):
            target_client = Upstream("target", target_url, timeout=settings.upstream_timeout,
                                     max_metadata_bytes=settings.max_metadata_bytes,
                                     token=Secret(token) if token else None, metrics=metrics)
            upstreams.append(target_client)
        for client in upstreams:
            await client.start()
        clock = ManualClock()
        deps = WorkerDeps(settings=settings.worker, queue=queue or in_memory_double(),
                          public=public,
                          target=open_target(settings.mirror_target, target_client,
                                              max_tarball_bytes=settings.max_tarball_bytes),
                          metrics=metrics,
                          heartbeat=Heartbeat(settings.heartbeat_stale_after, clock=clock),
                          rules=rules)
        rig = Rig(Worker(deps, idle_pause=idle_pause), deps, public_registry, clock, upstreams)
        built.append(rig)
        return rig

    yield build
    for rig in built:
        for client in rig.upstreams:
            await client.close()


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    """Every structlog line the test causes, as dicts, with bound context merged in."""
    capture = LogCapture()
    previous = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars,
                                    structlog.processors.add_log_level, capture],
                        cache_logger_on_first_use=False)
    try:
        yield capture
    finally:
        structlog.configure(**previous)


