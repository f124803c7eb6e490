"""The sidecar shape for the end-to-end suites: `mirrorgate serve --no-worker` and `mirrorgate
worker` as two processes over one cloud queue, as a pod with a worker sidecar runs them.

The SQS and Pub/Sub runs differ only in the queue's variables; what they start, what they kill
and what they check is here, with the fixtures both suites that run the pod take (the end-to-end
suite and row 14 of the faults suite import them into their conftest): `gate`, and
`queue_backend` with `queue_environment`, a fresh queue on each backend in turn. Decisions:

- Both processes get the same environment (a pod's containers usually share one), except the
  mirror target: the worker publishes through a `PublishGate` in front of Verdaccio, while the
  proxy reads Verdaccio directly. The gate counts every publish that reached Verdaccio, so
  "published exactly once" is a count of PUTs, not an inference from what Verdaccio lists
  (Verdaccio refuses a second copy of a version whatever happens).
- A worker is killed mid-job at one of two moments, each made long by a slow server rather
  than by a sleep: mid-fetch (the public fixture registry sends the tarball one small chunk at
  a time, once) and mid-publish (the gate forwards the PUT to Verdaccio, which stores it, then
  holds the answer, so the worker dies before it can ack). Either way the test waits for the
  moment to be observed (the tarball request arrived, the PUT was stored) before the SIGKILL.
- A fresh queue has the shortest visibility window each backend allows (10 s), so a killed
  worker's job comes back soon; the Pub/Sub subscription has a dead-letter policy, the only way
  Pub/Sub reports the delivery count a redelivery is recognised by. Without the emulator the
  Pub/Sub cases are skipped with the `pubsub_emulator` fixture's reason.
- The gate is a `ThreadedApp`, like the fixture registry, so it keeps answering while the test
  blocks. It forwards bytes as they are (no decompression) and never follows redirects, through
  a client session its application owns (`cleanup_ctx`). Held answers wait on an event;
  `stop()` cancels them.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.e2e.mirroring import public_manifest
from tests.servers.availability import serving
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import FixturePackage, make_package, tarball_filename, tarball_path
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.pubsub_server import PubSubNames, pubsub_environment
from tests.servers.sqs_server import SqsServer, sqs_environment
from tests.servers.threaded import ThreadedApp
from tests.servers.verdaccio import Verdaccio

__all__ = [
    "KillPoint",
    "PublishGate",
    "Sidecar",
    "assert_exits_0_on_sigterm",
    "assert_health_on_its_own_listener",
    "assert_verdaccio_holds_once",
    "enqueue_one",
    "gate",
    "kill_a_worker_mid_job",
    "queue_backend",
    "queue_environment",
    "redelivery_lines",
    "registry_environment",
    "slow_package",
    "start_sidecar",
]

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                         "te", "trailer", "transfer-encoding", "upgrade", "host",
                         "content-length"})
SLOW_CHUNK = Fault(chunk_size=512, chunk_delay=0.5, times=1)
"""The tarball sent 512 bytes every half second, once: minutes for `slow_package`'s tarball,
so a worker is still fetching when it is killed, and the next fetch runs at full speed."""


class KillPoint(StrEnum):
    MID_FETCH = "mid-fetch"
    MID_PUBLISH = "mid-publish"


# -- the gate in front of Verdaccio -------------------------------------------------------

_SESSION = web.AppKey("session", aiohttp.ClientSession)


class PublishGate(ThreadedApp):
    """A reverse proxy on 127.0.0.1 in front of `upstream` (Verdaccio) that forwards every
    request and records each PUT's answer; after `hold_publish_answers()` a PUT is still
    forwarded (and stored), but its answer is held until `release()` or `stop()`."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        super().__init__(self._build, host=host, name="publish-gate")
        self.upstream = upstream.rstrip("/")
        self._lock = threading.Lock()
        self._publishes: list[tuple[str, int]] = []
        self._seen: list[tuple[str, str, str]] = []
        self._holding = False
        self._released: asyncio.Event | None = None

    @property
    def publishes(self) -> list[tuple[str, int]]:
        """(path, Verdaccio's status) of every PUT forwarded so far, oldest first."""
        with self._lock:
            return list(self._publishes)

    @property
    def seen(self) -> list[tuple[str, str, str]]:
        """(method, path, Accept) of every request forwarded so far, oldest first."""
        with self._lock:
            return list(self._seen)

    def stored_publishes(self) -> int:
        """PUTs Verdaccio accepted (2xx): each one stored a version."""
        return sum(1 for _path, status in self.publishes if 200 <= status < 300)

    def hold_publish_answers(self) -> None:
        with self._lock:
            self._holding = True

    def release(self) -> None:
        """Stop holding; answers already held are sent (to whoever is still listening)."""
        with self._lock:
            self._holding = False
        released = self._released
        if self.running and released is not None:
            self.loop.call_soon_threadsafe(released.set)

    def _build(self) -> web.Application:
        self._released = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.cleanup_ctx.append(_client_session)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self._seen.append((request.method, request.raw_path,
                               request.headers.get("Accept", "")))
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with request.app[_SESSION].request(
                request.method, self.upstream + request.raw_path, data=body or None,
                headers=headers, allow_redirects=False) as answer:
            payload = await answer.read()
            status = answer.status
            answered = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        if request.method == "PUT":
            with self._lock:
                self._publishes.append((request.raw_path, status))
                holding = self._holding
            if holding and self._released is not None:
                await self._released.wait()
        return web.Response(status=status, headers=answered, body=payload)


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    async with aiohttp.ClientSession(auto_decompress=False,
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:
        app[_SESSION] = session
        yield


@pytest.fixture
def gate(verdaccio: Verdaccio) -> Iterator[PublishGate]:
    """A started gate forwarding to the test's Verdaccio, stopped at teardown; a gate that
    cannot listen fails the test under CI and skips it elsewhere, like every helper server."""
    with serving(PublishGate(verdaccio.url), "the publish gate") as started:
        yield started


# -- the queue between them ---------------------------------------------------------------

@pytest.fixture(params=["sqs", "pubsub"])
def queue_backend(request: pytest.FixtureRequest) -> str:
    """Each cloud backend in turn; the test ids gain `[sqs]` and `[pubsub]`."""
    backend: str = request.param
    return backend


@pytest.fixture
async def queue_environment(queue_backend: str,
                            request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables that put both processes on a fresh queue of `queue_backend`."""
    if queue_backend == "sqs":
        server: SqsServer = request.getfixturevalue("sqs_server")
        queue = await server.create_queue(visibility=10)
        return sqs_environment(server, queue.url)
    emulator: str = request.getfixturevalue("pubsub_emulator")
    make: Callable[..., Awaitable[PubSubNames]] = request.getfixturevalue("make_pubsub_names")
    names = await make(dead_letter_attempts=5, ack_deadline=10)
    return pubsub_environment(emulator, names)


# -- the two processes ------------------------------------------------------------------

def registry_environment(public: FixtureRegistry, verdaccio: Verdaccio,
                         gate: PublishGate | None = None) -> dict[str, str]:
    """The upstream variables: public fixture registry, Verdaccio as the private upstream and
    (through `gate`, when given) the mirror target."""
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
           "MIRROR_VISIBILITY_SECONDS": "10"}
    if gate is not None:
        env["MIRRORGATE_MIRROR_TARGET"] = gate.url
    return env


@dataclass
class Sidecar:
    """The pod: the proxy without a worker, and the worker on its own listener."""

    proxy: MirrorgateProcess
    worker: MirrorgateProcess


def start_sidecar(mirrorgate: MirrorgateFactory, env: Mapping[str, str]) -> Sidecar:
    """Start both containers together, as the kubelet does, and wait until both are ready."""
    proxy = mirrorgate("serve --no-worker", env, ready=False)
    worker = mirrorgate("worker", env, ready=False)
    proxy.wait_ready()
    worker.wait_ready()
    [started] = proxy.events("started")
    assert started["worker"] is False
    return Sidecar(proxy, worker)


def assert_health_on_its_own_listener(worker: MirrorgateProcess,
                                      proxy: MirrorgateProcess) -> None:
    assert worker.health_url != proxy.url
    for probe in ("livez", "readyz"):
        reply = worker.get(probe)
        assert reply.status == 200, f"the worker's /{probe} answered {reply.status}"


def assert_exits_0_on_sigterm(*processes: MirrorgateProcess) -> None:
    for process in processes:
        process.signal(signal.SIGTERM)
    for process in processes:
        code = process.wait(40)
        assert code == 0, f"mirrorgate {process.command} exited {code}:\n{process.stderr()}"


# -- one job, and a worker killed in the middle of it --------------------------------------

def slow_package(name: str) -> FixturePackage:
    """One version whose tarball holds 40 KB of incompressible bytes: slow to send."""
    blob = random.Random(name).randbytes(40_000)
    return make_package(name, ["1.0.0"], files={"index.js": b"module.exports = 1;\n",
                                                "blob.bin": blob})


def assert_verdaccio_holds_once(verdaccio: Verdaccio, public: FixtureRegistry,
                                gate: PublishGate, name: str, version: str) -> None:
    """The version is in Verdaccio, stored by exactly one PUT, with the public integrity and
    the public bytes."""
    assert verdaccio.versions(name) == [version]
    assert gate.stored_publishes() == 1, gate.publishes
    stored = verdaccio.packument(name)
    assert stored is not None
    original = public_manifest(public, name, version)
    assert stored["versions"][version]["dist"]["integrity"] == original["dist"]["integrity"]
    assert (verdaccio.tarball(name, tarball_filename(name, version))
            == public.package(name).versions[version].tarball)
    assert (verdaccio.download(name, tarball_filename(name, version))  # what a client gets
            == public.package(name).versions[version].tarball)


def redelivery_lines(worker: MirrorgateProcess, name: str,
                     deliveries: int) -> list[dict[str, Any]]:
    """The worker's log lines about `name` that carry this delivery count."""
    return [line for line in worker.logs()
            if line.get("package") == name and line.get("deliveries") == deliveries]


def enqueue_one(proxy: MirrorgateProcess, public: FixtureRegistry, name: str,
                version: str) -> None:
    """Pull one tarball through the proxy (a miss on Verdaccio, admitted from public), and
    wait until its job has left the proxy for the queue."""
    reply = http_request("GET", proxy.registry_url.rstrip("/") + tarball_path(name, version))
    assert reply.status == 200, reply.body[:300]
    assert reply.body == public.package(name).versions[version].tarball
    wait_for(lambda: proxy.metric("mirrorgate_jobs_sent_total") >= 1, timeout=10,
             message="the job to be sent to the queue")
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1


def kill_a_worker_mid_job(mirrorgate: MirrorgateFactory, env: Mapping[str, str],
                          public: FixtureRegistry, gate: PublishGate, name: str,
                          at: KillPoint) -> tuple[Sidecar, MirrorgateProcess]:
    """Enqueue `name`@1.0.0 through a running proxy, start a worker, SIGKILL it at `at`, and
    start a second worker. Returns the pod (with the second worker) and the killed one."""
    public.add(slow_package(name))
    proxy = mirrorgate("serve --no-worker", env)
    enqueue_one(proxy, public, name, "1.0.0")
    path = tarball_path(name, "1.0.0")
    public.clear_requests()
    if at is KillPoint.MID_FETCH:
        public.fault(path, SLOW_CHUNK, exact=True)
    else:
        gate.hold_publish_answers()

    doomed = mirrorgate("worker", env)
    if at is KillPoint.MID_FETCH:
        wait_for(lambda: any(seen.path == path for seen in public.requests), timeout=20,
                 message="the first worker to start fetching the tarball")
    else:
        wait_for(lambda: gate.stored_publishes() == 1, timeout=20,
                 message="the first worker's publish to reach Verdaccio")
    assert doomed.kill() == -signal.SIGKILL
    assert gate.stored_publishes() == (1 if at is KillPoint.MID_PUBLISH else 0)
    assert [line for line in doomed.logs() if str(line.get("event")).startswith("mirror_")
            and line.get("package") == name] == [], "the first worker finished the job"
    gate.release()

    worker = mirrorgate("worker", env)
    return Sidecar(proxy, worker), doomed
