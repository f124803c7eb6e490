"""The process's HTTP clients: one `Upstream` per upstream origin, started and closed together.

Every process shape and every command that talks to the registries builds them here, from the
settings, so each origin has one client with its bounded pools (fills, tarballs, the worker).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirrorgate.config import UpstreamSettings
from mirrorgate.metrics import Metrics
from mirrorgate.upstream.client import FILLS, TARBALLS, WORKER, PoolSizes, Upstream

__all__ = ["Upstreams"]


@dataclass
class Upstreams:
    """The process's HTTP clients, one per upstream origin, started and closed together."""

    public: Upstream
    private: Upstream | None
    target: Upstream | None
    all: list[Upstream] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: UpstreamSettings, metrics: Metrics) -> Upstreams:
        def client(label: str, url: str, token: bool) -> Upstream:
            return Upstream(label, url, timeout=settings.upstream_timeout,
                            max_metadata_bytes=settings.max_metadata_bytes,
                            token=settings.private_token if token else None, metrics=metrics,
                            pools=PoolSizes(fills=settings.pool_fills,
                                            tarballs=settings.pool_tarballs,
                                            worker=settings.pool_worker))

        public = client("public", settings.public_upstream, token=False)
        private = (client("private", settings.private_upstream, token=True)
                   if not settings.private_upstream.startswith("file://") else None)
        # one Upstream per origin: a target that is the private upstream is published to
        # through the proxy's private client, on that client's worker pool
        if settings.mirror_target == settings.private_upstream:
            target = private
        elif settings.mirror_target.startswith("file://"):
            target = None
        else:
            target = client("target", settings.mirror_target, token=True)
        clients = list(dict.fromkeys(c for c in (public, private, target) if c is not None))
        metrics.watch_upstreams(lambda: [(c.label, pool, c.in_flight(pool))
                                         for c in clients for pool in (FILLS, TARBALLS, WORKER)])
        return cls(public, private, target, clients)

    async def start(self) -> None:
        for upstream in self.all:
            await upstream.start()

    async def close(self) -> None:
        for upstream in self.all:
            await upstream.close()
