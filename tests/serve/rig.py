"""The serve suite's rig: an in-process proxy on 127.0.0.1, and the private Verdaccio it shares.

`open_proxy(...)` builds a `Proxy` the way `mirrorgate serve` does (a started public `Upstream`,
a private source, rules, metrics) but with the in-memory test double as its queue, so a test
can receive the jobs the proxy enqueued, and with an injected clock, so the cache's TTL is
crossed by moving time rather than by sleeping. The private upstream is, unless a test says
otherwise, one real Verdaccio for the whole session (`SharedPrivate`): each test publishes
under names of its own, which `SharedPrivate` enforces. `FILE_STORE` asks for the embedded
file store instead; any other URL is used as given (a port nobody listens on, say).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from mirrorgate.access.tokens import ClientTokens, new_token, token_line
from mirrorgate.backends.memory import in_memory_double
from mirrorgate.config import Settings, load_settings
from mirrorgate.gate.assembled import Gate
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.packuments.service import PINS
from mirrorgate.handoff import Handoff
from mirrorgate.healthz import Health
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import DEFAULT_RULES, LiveRules, Rules
from mirrorgate.serve.app import SERVER, Proxy, ProxyServer, answer_warm_first, build_proxy_app
from mirrorgate.store import open_store
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.registry import HttpRegistry, PrivateRegistry, StoreRegistry
from tests.clock import ManualClock
from tests.metric_samples import metric_value, registry_samples
from tests.servers.packages import FixturePackage, FixtureVersion
from tests.servers.ports import free_port
from tests.servers.processes import OFFLINE, Reply
from tests.servers.verdaccio import Verdaccio

NPM_ACCEPT = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
"""The Accept header npm sends for packuments."""

FILE_STORE: Final = "file-store"
"""`start_proxy(..., private=FILE_STORE)`: an empty embedded file store of the proxy's own."""


@dataclass
class WallClock:
    """Wall time for the release-age rule: real time plus an offset the test can move."""

    offset_seconds: float = 0.0

    def __call__(self) -> datetime:
        moment = datetime.now(UTC)
        return moment if not self.offset_seconds else moment.fromtimestamp(
            moment.timestamp() + self.offset_seconds, UTC)


class SharedPrivate:
    """The session's Verdaccio as one test sees it. A package name belongs to the first test
    function that publishes it (its parametrized cases share it); another test publishing it,
    or asking the proxy for it as a public package, fails with both names (`claims` is shared
    by every view)."""

    def __init__(self, server: Verdaccio, claims: dict[str, str], test: str) -> None:
        self.server = server
        self._claims = claims
        self._test = test

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    def publish(self, version: FixtureVersion, *, tags: dict[str, str] | None = None) -> Reply:
        self._claim(version.name)
        return self.server.publish(version, tags=tags)

    def publish_package(self, package: FixturePackage) -> None:
        self._claim(package.name)
        self.server.publish_package(package)

    def check_unclaimed(self, names: Iterable[str]) -> None:
        """Fail if another test published any of `names` here (asked for as public ones)."""
        for name in names:
            owner = self._claims.get(name, self._test)
            assert owner == self._test, (
                f"{name!r} is published in the shared private Verdaccio by {owner}; "
                f"{self._test} must use a package name of its own")

    def _claim(self, name: str) -> None:
        owner = self._claims.setdefault(name, self._test)
        assert owner == self._test, (f"{name!r} is already published in the shared private "
                                     f"Verdaccio by {owner}; use a package name of your own")


async def publish_private(proxy: RunningProxy, shared: SharedPrivate,
                          version: FixtureVersion) -> None:
    """Put `version` in `proxy`'s private upstream: its file store, or the shared Verdaccio."""
    if proxy.store is not None:
        await proxy.store.put(parse_name(version.name), version.version, version.filename,
                              version.document("http://127.0.0.1:9/"), version.tarball)
    else:
        shared.publish(version)


def requested_names(paths: Iterable[str]) -> set[str]:
    """The package names in registry request paths (`/name`, `/@scope%2fname/-/x.tgz`...)."""
    names: set[str] = set()
    for path in paths:
        parts = unquote(path).lstrip("/").split("/")
        if parts[0].startswith("@") and len(parts) > 1:
            names.add("/".join(parts[:2]))
        elif parts[0] and parts[0] != "-":
            names.add(parts[0])
    return names


@dataclass
class RunningProxy:
    url: str
    proxy: Proxy
    server: ProxyServer
    clock: ManualClock
    wall: WallClock
    session: aiohttp.ClientSession
    settings: Settings
    """The whole settings the proxy's slice was cut from (a worker beside it takes its own)."""
    store: FileStore | None = None
    """The embedded file store, when that is the private upstream."""
    received: list[MirrorJob] = field(default_factory=list)

    async def written(self) -> None:
        """Until what this proxy learned is in its state store (the background writer)."""
        facts = self.proxy.gate.facts
        for _ in range(200):
            if facts.pending == 0:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{facts.pending} facts not written within 2 s: {facts.problem}")

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
                      decompress: bool = True, body: bytes | None = None) -> Reply:
        # encoded=True: the path goes out exactly as written (yarl would otherwise resolve
        # `%2e%2e` and re-case `%2f`), which is what a hostile client does.
        async with self.session.request(method, URL(self.url + path.lstrip("/"), encoded=True),
                                        headers=dict(headers or {}), data=body,
                                        auto_decompress=decompress) as response:
            return Reply(response.status, CIMultiDict(response.headers), await response.read())

    async def get(self, path: str, **headers: str) -> Reply:
        """GET with headers given as keywords (`Accept=...`, `If_None_Match=...`)."""
        sent = {key.replace("_", "-"): value for key, value in headers.items()}
        return await self.request("GET", path, headers=sent)

    async def jobs(self) -> list[MirrorJob]:
        """Every job enqueued so far (received from the double and acked), once the enqueues
        under way (and the hand-overs before them) are done."""
        await asyncio.sleep(0)
        await self.server.tarballs.drain()
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
                       rules: Rules | LiveRules = DEFAULT_RULES, queue: MirrorQueue | None = None,
                       data_dir: Path | None = None, **settings: Any) -> RunningProxy: ...


def policy_tokens(path: Path, **policies: str | None) -> dict[str, str]:
    """A client tokens file at `path`: a client `NAME-ci` for each keyword, its line naming the
    policy set given (None: the default rules); returns each one's `Authorization` header."""
    tokens = {name: new_token() for name in policies}
    path.write_text("".join(f"{token_line(f'{name}-ci', tokens[name])}"
                            f"{f' policy:{policy}' if policy else ''}\n"
                            for name, policy in policies.items()), encoding="utf-8")
    return {name: f"Bearer {token}" for name, token in tokens.items()}


def make_settings(public: str, private: str, data_dir: Path, *, token: str | None = None,
                  **overrides: Any) -> Settings:
    environ = {"MIRRORGATE_PUBLIC_UPSTREAM": public, "MIRRORGATE_PRIVATE_UPSTREAM": private,
               "MIRRORGATE_DATA_DIR": str(data_dir), **OFFLINE}
    if token is not None:
        environ["MIRRORGATE_PRIVATE_TOKEN"] = token
    settings = load_settings(environ, npm_registry=lambda: None)
    return dataclasses.replace(settings, **{"upstream_timeout": 5.0, **overrides})


@dataclass
class ProxyStack:
    """What `open_proxy` started, in the order `close` stops it."""

    running: RunningProxy
    runner: web.AppRunner
    upstreams: list[Upstream]
    facts: KeptFacts | None = None
    gate: Gate | None = None
    keeping: asyncio.Task[None] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def close(self) -> None:
        await self.running.session.close()
        await self.runner.cleanup()
        if self.gate is not None:
            await self.gate.close()
        for upstream in self.upstreams:
            await upstream.close()
        self.stop.set()
        if self.keeping is not None:
            await self.keeping  # the last write of what was learned, as at a SIGTERM
        if self.facts is not None:
            await self.facts.close()


async def open_proxy(settings: Settings, *, store: Path | None, rules: Rules | LiveRules,
                     queue: MirrorQueue | None, worker_beside: bool = False,
                     handoff: Handoff | None = None) -> ProxyStack:
    """Start a proxy on a free loopback port: its private source is the file store at `store`
    when given, else an HTTP upstream at `settings.private_upstream`. `worker_beside` and
    `handoff`: as `mirrorgate serve` with its worker, which judges jobs by the proxy's records
    and takes the tarballs handed over."""
    metrics = Metrics()
    upstream = Upstream("public", settings.public_upstream, timeout=settings.upstream_timeout,
                        max_metadata_bytes=settings.max_metadata_bytes, metrics=metrics)
    upstreams = [upstream]
    source: PrivateRegistry
    files = FileStore(store) if store is not None else None
    if files is not None:
        source = StoreRegistry(files)
    else:
        private_upstream = Upstream("private", settings.private_upstream,
                                    timeout=settings.upstream_timeout,
                                    max_metadata_bytes=settings.max_metadata_bytes,
                                    token=settings.private_token, metrics=metrics)
        upstreams.append(private_upstream)
        source = HttpRegistry(private_upstream)
    for client in upstreams:
        await client.start()
    clients = (ClientTokens(settings.client_tokens_file)
               if settings.client_tokens_file is not None else None)
    # the state store in the data directory, as `mirrorgate serve` keeps it (`process`)
    facts = KeptFacts(lambda: open_store(settings.store), metrics=metrics)
    await facts.open()
    clock, wall = ManualClock(), WallClock()
    gate = Gate(settings=settings.gate, public=upstream, private=source, rules=rules,
                metrics=metrics, facts=facts, clock=clock, now=wall,
                pins=PINS if worker_beside else 0)
    proxy = Proxy(settings=settings.serve, public=upstream, private=source,
                  queue=queue or in_memory_double(), rules=rules, metrics=metrics,
                  health=Health(ready=True), gate=gate, clients=clients,
                  worker_beside=worker_beside, handoff=handoff)
    app = build_proxy_app(proxy, clock=clock)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    answer_warm_first(runner)  # as `mirrorgate serve` listens (`process`)
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    running = RunningProxy(f"http://127.0.0.1:{port}/", proxy, app[SERVER], clock, wall,
                           aiohttp.ClientSession(), settings, files)
    stack = ProxyStack(running, runner, upstreams, facts, gate=gate)
    stack.keeping = asyncio.create_task(facts.run(stack.stop))
    return stack
