"""Liveness, readiness and the metrics endpoint, shared by the proxy and the worker listener.

`/livez` says whether the process (and its worker loop, where one runs) still makes progress,
`/readyz` whether it should get traffic; `/metrics` is the process's Prometheus registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from mirrorgate.metrics import CONTENT_TYPE, Metrics
from mirrorgate.tasks import Tasks

__all__ = ["Health", "Heartbeat", "add_health_routes"]


@dataclass
class Heartbeat:
    """The worker beats when a receive returns (an empty poll is a healthy idle) and after each
    job, so a loop stuck on one job longer than `stale_after` is reported and Kubernetes
    restarts it. `clock` is injected so tests need not sleep for a beat to go stale."""

    stale_after: float
    clock: Callable[[], float] = time.monotonic
    last: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.last = self.clock()

    def beat(self) -> None:
        self.last = self.clock()

    def age(self) -> float:
        return max(0.0, self.clock() - self.last)

    def fresh(self) -> bool:
        return self.age() < self.stale_after


@dataclass
class Health:
    heartbeat: Heartbeat | None = None
    ready: bool = False
    draining: bool = False
    waiting_for: list[Callable[[], str | None]] = field(default_factory=list)
    """What must be there before the process is ready, each saying why it is not (None: it
    is): the state store's facts loaded (`gate.kept.facts`). /livez never asks."""
    tasks: Tasks = field(default_factory=Tasks)
    """The process's background tasks (`tasks`): not ready while one is down."""


def add_health_routes(app: web.Application, health: Health, metrics: Metrics) -> None:
    async def livez(_request: web.Request) -> web.Response:
        """200 while the process serves and any heartbeat is fresh; else 503 with its age."""
        beat = health.heartbeat
        if beat is not None and not beat.fresh():
            return web.json_response(
                {"status": "stale", "heartbeat_age_seconds": round(beat.age(), 3),
                 "stale_after_seconds": beat.stale_after,
                 "reason": "the mirror worker has not completed a poll or a job in time"},
                status=503)
        body: dict[str, object] = {"status": "ok"}
        if beat is not None:
            body["heartbeat_age_seconds"] = round(beat.age(), 3)
        return web.json_response(body)

    async def readyz(_request: web.Request) -> web.Response:
        """200 once start-up finished and until draining begins, so a Service stops routing
        to a pod the moment SIGTERM arrives."""
        if health.draining:
            return web.json_response({"status": "draining"}, status=503)
        if not health.ready:
            return web.json_response({"status": "starting"}, status=503)
        for waiting in (*health.waiting_for, health.tasks.problem):
            reason = waiting()
            if reason is not None:
                return web.json_response({"status": "unavailable", "reason": reason},
                                         status=503)
        return web.json_response({"status": "ready"})

    async def metrics_endpoint(_request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
