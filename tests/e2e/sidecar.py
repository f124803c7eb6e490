"""The sidecar shape for the end-to-end suites: `mirrorgate serve --no-worker` and `mirrorgate
worker` as two processes over one cloud queue, as a pod with a worker sidecar runs them.

The SQS and Pub/Sub files differ only in the queue's variables; what they start, what they kill
and what they check is here. Decisions:

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
- The gate is an aiohttp server on its own loop in a thread, like the fixture registry, so it
  keeps answering while the test blocks. It forwards bytes as they are (no decompression) and
  never follows redirects. Held answers wait on an event; `stop()` cancels them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import aiohttp
from aiohttp import web

from tests.e2e.mirroring import public_manifest
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory, unavailable
from tests.servers.packages import FixturePackage, make_package, tarball_filename, tarball_path
from tests.servers.ports import free_port
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

__all__ = [
    "KillPoint",
    "PublishGate",
    "Sidecar",
    "assert_exits_0_on_sigterm",
    "assert_health_on_its_own_listener",
    "assert_verdaccio_holds_once",
    "enqueue_one",
    "gate_in_front_of",
    "kill_a_worker_mid_job",
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

class PublishGate:
    """A reverse proxy on 127.0.0.1 in front of `upstream` (Verdaccio) that forwards every
    request and records each PUT's answer; after `hold_publish_answers()` a PUT is still
    forwarded (and stored), but its answer is held until `release()` or `stop()`."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.port = free_port(host)
        self._lock = threading.Lock()
        self._publishes: list[tuple[str, int]] = []
        self._holding = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._released: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    @property
    def publishes(self) -> list[tuple[str, int]]:
        """(path, Verdaccio's status) of every PUT forwarded so far, oldest first."""
        with self._lock:
            return list(self._publishes)

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
        loop, released = self._loop, self._released
        if loop is not None and released is not None:
            loop.call_soon_threadsafe(released.set)

    def start(self) -> PublishGate:
        ready: concurrent.futures.Future[asyncio.AbstractEventLoop] = concurrent.futures.Future()
        thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                  name=f"publish-gate-{self.port}")
        thread.start()
        self._loop = ready.result(timeout=10)
        self._thread = thread
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None

    def _serve(self, ready: concurrent.futures.Future[asyncio.AbstractEventLoop]) -> None:
        loop = asyncio.new_event_loop()
        session = loop.run_until_complete(_client())
        self._released = asyncio.Event()

        async def forward(request: web.Request) -> web.StreamResponse:
            return await self._forward(session, request)

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            loop.run_until_complete(site.start())
        except BaseException as error:
            loop.run_until_complete(runner.cleanup())
            loop.run_until_complete(session.close())
            loop.close()
            ready.set_exception(error)
            return
        ready.set_result(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_shut_down(runner, session))
            loop.close()

    async def _forward(self, session: aiohttp.ClientSession,
                       request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with session.request(request.method, self.upstream + request.raw_path,
                                   data=body or None, headers=headers,
                                   allow_redirects=False) as answer:
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


async def _client() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60))


async def _shut_down(runner: web.AppRunner, session: aiohttp.ClientSession) -> None:
    await runner.cleanup()
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)
    await session.close()
    await asyncio.get_running_loop().shutdown_asyncgens()


@contextlib.contextmanager
def gate_in_front_of(verdaccio: Verdaccio) -> Iterator[PublishGate]:
    """A started gate forwarding to `verdaccio`, stopped on exit; a gate that cannot listen
    fails the test under CI and skips it elsewhere, like every helper server."""
    gate = PublishGate(verdaccio.url)
    try:
        gate.start()
    except OSError as error:
        unavailable(f"the publish gate could not listen on 127.0.0.1: {error}")
    try:
        yield gate
    finally:
        gate.stop()


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
