"""The worker suite's rig: a real worker wired to real parts, built per test with overrides.

A `Rig` holds a `Worker` whose public upstream is the fixture registry (over mirrorgate's own
`Upstream` client), whose target is a real Verdaccio or a real `FileStore` directory, and whose
queue is the in-memory double (it redelivers what is not acked) unless a test passes another.
The heartbeat runs on a `ManualClock`, so a test can make time pass without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from structlog.testing import LogCapture

from mirrorgate.backends.memory import in_memory_double
from mirrorgate.config import Settings, load_settings
from mirrorgate.gate.packuments.public import CachedPublic, ServedPublic
from mirrorgate.handoff import Handoff
from mirrorgate.healthz import Heartbeat
from mirrorgate.integrity import digests_from_dist
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorArtifact, MirrorJob, MirrorQueue
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import Rules
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.worker.job import WorkerDeps
from mirrorgate.worker.loop import Worker
from mirrorgate.worker.target import MirrorTarget, open_target
from tests.clock import ManualClock
from tests.metric_samples import metric_value, registry_samples
from tests.serve.rig import RunningProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import tarball_filename
from tests.servers.processes import OFFLINE
from tests.servers.verdaccio import Verdaccio


@dataclass
class Rig:
    worker: Worker
    deps: WorkerDeps
    public: FixtureRegistry
    clock: ManualClock
    upstreams: list[Upstream] = field(default_factory=list)

    @property
    def queue(self) -> MirrorQueue:
        return self.deps.queue

    @property
    def metrics(self) -> Metrics:
        return self.deps.metrics

    @property
    def heartbeat(self) -> Heartbeat:
        return self.deps.heartbeat

    def metric(self, name: str, **labels: str) -> float:
        """See `metric_value`: 0.0 before the first increment, a failure for a wrong name."""
        return metric_value(registry_samples(self.metrics.registry), name, **labels)

    def outcomes(self, outcome: str) -> float:
        return self.metric("mirrorgate_jobs_total", outcome=outcome)

    def retired(self, reason: str) -> float:
        return self.metric("mirrorgate_jobs_retired_total", reason=reason)

    def tampered(self) -> float:
        return self.metric("mirrorgate_tampered_total")

    def tarball_gets(self) -> list[str]:
        return [seen.path for seen in self.public.requests if "/-/" in seen.path]

    async def handle_next(self) -> str:
        """Receive exactly one message from the queue and hand it to the worker."""
        messages = await self.queue.receive()
        assert len(messages) == 1, messages
        return await self.worker.handle(messages[0])


class RigFactory(Protocol):
    async def __call__(self, *, target: Verdaccio | Path | str | None = None,
                       queue: MirrorQueue | None = None, token: str | None = None,
                       idle_pause: float = 0.01, rules: Rules = ...,
                       **settings: Any) -> Rig: ...


def rig_settings(public_url: str, target_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """Settings as the environment would give them, then test-sized windows: a 1 s visibility
    (below the 10 s an operator may set), the rest as given (`visibility`, `poll_wait` go to the
    queue settings)."""
    base = load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": public_url,
                          "MIRRORGATE_MIRROR_TARGET": target_url,
                          "MIRRORGATE_DATA_DIR": str(data_dir), **OFFLINE},
                         npm_registry=lambda: None)
    queue_fields = {name: overrides.pop(name) for name in ("visibility", "poll_wait")
                    if name in overrides}
    queue = dataclasses.replace(base.queue, **{"visibility": 1, **queue_fields})
    return dataclasses.replace(base, queue=queue,
                               **{"drain_timeout": 2.0, "upstream_timeout": 5.0, **overrides})


def with_target(rig: Rig, target: MirrorTarget) -> Worker:
    """Another worker on the same queue, public client, metrics and heartbeat."""
    return Worker(dataclasses.replace(rig.deps, target=target), idle_pause=0.01)


def job_from(public: FixtureRegistry, name: str, version: str, **artifact: Any) -> MirrorJob:
    """The job the serve path would enqueue for `name@version` as `public` describes it."""
    document = public.packument(name)["versions"][version]
    dist = document["dist"]
    fields: dict[str, Any] = {
        "tarball_url": dist["tarball"],
        "filename": tarball_filename(name, version),
        "size": None,
        "digests": digests_from_dist(dist),
    }
    fields.update(artifact)
    manifest = {key: value for key, value in document.items() if key != "readme"}
    return MirrorJob(name=name, version=version, artifact=MirrorArtifact(**fields),
                     manifest=manifest)


def events(capture: LogCapture, name: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in capture.entries if entry.get("event") == name]


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Event]:
    """Run `worker.run(stop)` in the background; on exit set `stop` and expect it to return
    within 5 s. Yields the stop event (a test may set it itself)."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def assert_refused(rig: Rig, logs: LogCapture, store: Path, reason: str,
                         name: str) -> dict[str, Any]:
    """The job was retired for `reason`, logged as a security event, and nothing was fetched
    or written; returns the security line."""
    assert await rig.handle_next() == "retired"
    assert rig.retired(reason) == 1
    assert rig.tarball_gets() == []
    assert await FileStore(store).packument(parse_name(name)) is None
    (line,) = events(logs, "mirror_job_refused")
    assert line["security"] is True
    assert line["reason"] == reason
    assert line["log_level"] == "critical"
    return dict(line)


def in_process_worker(proxy: RunningProxy, store: Path, *,
                      handoff: Handoff | None = None, alone: bool = False) -> Worker:
    """A worker as `mirrorgate serve` wires it: the proxy's public client, metrics and rules,
    judging jobs by the proxy's records (`ServedPublic`) and release verdicts, taking what
    `handoff` holds. `alone`: as `mirrorgate worker` reads public, through a cache of its own
    (`CachedPublic`), the gate's release verdicts still its process's own."""
    settings = proxy.settings
    cached = CachedPublic(proxy.proxy.public, settings.worker)
    return Worker(WorkerDeps(
        settings=settings.worker, queue=in_memory_double(), public=proxy.proxy.public,
        target=open_target(f"file://{store}", None, max_tarball_bytes=settings.max_tarball_bytes),
        metrics=proxy.metrics, heartbeat=Heartbeat(120, clock=ManualClock()),
        rules=proxy.proxy.rules,
        packuments=cached if alone else ServedPublic(proxy.server.packuments, cached),
        withdrawals=proxy.server.gate.withdrawals, release=proxy.server.gate.release,
        handoff=handoff), idle_pause=0.01)


async def handled(worker: Worker, job: MirrorJob) -> str:
    """Enqueue `job` on the worker's own queue and handle it: its outcome."""
    await worker.deps.queue.enqueue(job)
    (message,) = await worker.deps.queue.receive()
    return await worker.handle(message)
