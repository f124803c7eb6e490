"""The proxy under test, assembled in process and served on 127.0.0.1 by aiohttp's runner.

`start_proxy(...)` builds a `Proxy` the way `mirrorgate serve` does (a started public
`Upstream`, a private source, rules, metrics) but with the in-memory test double as its queue,
so a test can receive the jobs the proxy enqueued, and with an injected clock, so the cache's
TTL is crossed by moving time rather than by sleeping. The private upstream is a real Verdaccio
(one per test module, each test using its own package names) or the embedded file store.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from mirrorgate.backends.memory import in_memory_double
from mirrorgate.clients import ClientTokens
from mirrorgate.config import Settings, load_settings
from mirrorgate.healthz import Health
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue
from mirrorgate.registry.filestore import FileStore
from mirrorgate.registry.private import HttpPrivate, PrivateSource, StorePrivate
from mirrorgate.registry.upstream import Upstream
from mirrorgate.rules import DEFAULT_RULES, Rules
from mirrorgate.serve import SERVER, Proxy, ProxyServer, build_proxy_app
from tests.clock import ManualClock
from tests.metric_samples import metric_value, registry_samples
from tests.servers.availability import serving
from tests.servers.ports import free_port
from tests.servers.processes import Reply
from tests.servers.verdaccio import Verdaccio

NPM_ACCEPT = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
"""The Accept header npm sends for packuments."""


@dataclass
class WallClock:
    """Wall time for the release-age rule: real time plus an offset the test can move."""

    offset_seconds: float = 0.0

    def __call__(self) -> datetime:
        moment = datetime.now(UTC)
        return moment if not self.offset_seconds else moment.fromtimestamp(
            moment.timestamp() + self.offset_seconds, UTC)


@dataclass
class RunningProxy:
    url: str
    proxy: Proxy
    server: ProxyServer
    clock: ManualClock
    wall: WallClock
    session: aiohttp.ClientSession
    received: list[MirrorJob] = field(default_factory=list)

    @property
    def registry(self) -> str:
        """What an npm client is pointed at."""
        return self.url + "npm/"

    @property
    def queue(self) -> MirrorQueue:
        return self.proxy.queue

    @property
    def metrics(self) -> Metrics:
        return self.proxy.metrics

    async def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None,
                      decompress: bool = True) -> Reply:
        # encoded=True: the path goes out exactly as written (yarl would otherwise resolve
        # `%2e%2e` and re-case `%2f`), which is what a hostile client does.
        async with self.session.request(method, URL(self.url + path.lstrip("/"), encoded=True),
                                        headers=dict(headers or {}),
                                        auto_decompress=decompress) as response:
            return Reply(response.status, CIMultiDict(response.headers), await response.read())

    async def get(self, path: str, **headers: str) -> Reply:
        """GET with headers given as keywords (`Accept=...`, `If_None_Match=...`)."""
        sent = {key.replace("_", "-"): value for key, value in headers.items()}
        return await self.request("GET", path, headers=sent)

    async def jobs(self) -> list[MirrorJob]:
        """Every job enqueued so far (received from the double and acked)."""
        await asyncio.sleep(0)
        for message in await self.queue.receive():
            assert message.job is not None
            self.received.append(message.job)
            await self.queue.ack(message.receipt)
        return list(self.received)

    def metric(self, name: str, **labels: str) -> float:
        """See `metric_value`: 0.0 before the first increment, a failure for a wrong name."""
        return metric_value(registry_samples(self.metrics.registry), name, **labels)


class StartProxy(Protocol):
    async def __call__(self, public: str, *, private: str | None = None,
                       rules: Rules = DEFAULT_RULES, queue: MirrorQueue | None = None,
                       **settings: Any) -> RunningProxy: ...


def make_settings(public: str, private: str, data_dir: Path, **overrides: Any) -> Settings:
    settings = load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": public,
                              "MIRRORGATE_PRIVATE_UPSTREAM": private,
                              "MIRRORGATE_DATA_DIR": str(data_dir)},
                             npm_registry=lambda: None)
    return dataclasses.replace(settings, **{"upstream_timeout": 5.0, **overrides})


@pytest.fixture
async def start_proxy(tmp_path: Path) -> AsyncIterator[StartProxy]:
    """Start proxies for this test: `await start_proxy(public_registry.url,
    private=verdaccio_url, rules=..., cache_ttl=...)`; the private upstream defaults to an
    empty file store. Everything started is stopped at teardown."""
    cleanups: list[Any] = []

    async def start(public: str, *, private: str | None = None, rules: Rules = DEFAULT_RULES,
                    queue: MirrorQueue | None = None, **overrides: Any) -> RunningProxy:
        index = len(cleanups)
        store = tmp_path / f"store-{index}"
        private_url = private or f"file://{store}"
        settings = make_settings(public, private_url, tmp_path / f"data-{index}", **overrides)
        metrics = Metrics()
        upstream = Upstream("public", settings.public_upstream,
                            timeout=settings.upstream_timeout,
                            max_metadata_bytes=settings.max_metadata_bytes, metrics=metrics)
        await upstream.start()
        private_upstream: Upstream | None = None
        source: PrivateSource
        if private_url.startswith("file://"):
            source = StorePrivate(FileStore(store))
        else:
            private_upstream = Upstream("private", private_url,
                                        timeout=settings.upstream_timeout,
                                        max_metadata_bytes=settings.max_metadata_bytes,
                                        token=settings.private_token, metrics=metrics)
            await private_upstream.start()
            source = HttpPrivate(private_upstream)
        clients = (ClientTokens(settings.client_tokens_file)
                   if settings.client_tokens_file is not None else None)
        proxy = Proxy(settings=settings, public=upstream, private=source,
                      queue=queue or in_memory_double(), rules=rules, metrics=metrics,
                      health=Health(ready=True), clients=clients)
        clock, wall = ManualClock(), WallClock()
        app = build_proxy_app(proxy, clock=clock, now=wall)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        session = aiohttp.ClientSession()
        running = RunningProxy(f"http://127.0.0.1:{port}/", proxy, app[SERVER], clock, wall,
                               session)

        async def stop() -> None:
            await session.close()
            await runner.cleanup()
            await upstream.close()
            if private_upstream is not None:
                await private_upstream.close()

        cleanups.append(stop)
        return running

    yield start
    for stop in reversed(cleanups):
        await stop()


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Verdaccio]:
    """One Verdaccio for the module, the private upstream; tests use their own names."""
    with serving(Verdaccio(tmp_path_factory.mktemp("verdaccio")), "Verdaccio") as server:
        yield server
