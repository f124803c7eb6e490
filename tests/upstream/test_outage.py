"""An upstream that takes no connection is not asked again until a connection is made
(`upstream.outage`).

The failure this stops: a public registry behind a firewall that drops packets fails each call
only when the upstream timeout runs out, and every name of an offline install asks it. The dark
registry here is a loopback port whose listener's queue is held full, so the kernel drops every
other SYN as such a firewall does; the others are small aiohttp servers that hang or answer on
cue, counting what reaches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mirrorgate.metrics import Metrics
from mirrorgate.upstream import client as client_module
from mirrorgate.upstream.client import PoolSizes, Upstream, UpstreamError
from mirrorgate.upstream.outage import DOWN_AFTER, Outage
from tests.servers.ports import DarkPort

TIMEOUT = 0.3
RETRY = 0.1
"""Seconds between the connections tried while down, here (a second in use)."""


@dataclass
class Registry:
    """Answers `/left-pad` as told: `hang` (never), else with `status`; counts every request."""

    hang: bool = True
    status: int = 200
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.path)
        if self.hang:
            await asyncio.sleep(30)
        return web.json_response({"name": "left-pad"}, status=self.status)


@pytest.fixture
def dark() -> Iterator[DarkPort]:
    with DarkPort() as port:
        yield port


@pytest.fixture
async def registry() -> AsyncIterator[tuple[Registry, TestServer]]:
    state = Registry()
    app = web.Application()
    app.router.add_get("/{name}", state.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield state, server
    await server.close()


@contextlib.asynccontextmanager
async def client_of(url: str, metrics: Metrics | None = None,
                    pools: PoolSizes | None = None) -> AsyncIterator[Upstream]:
    """A started client of `url`, trying connections every RETRY seconds while down."""
    client = Upstream("public", url, timeout=TIMEOUT, max_metadata_bytes=4096, metrics=metrics,
                      pools=pools)
    client.outage = Outage("public", client.connect_once, waited=client.outage.waited,
                           retry_every=RETRY)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def failure_of(call: Callable[[], object]) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        await call()  # type: ignore[misc]
    return caught.value


async def test_an_upstream_that_takes_no_connection_is_not_asked_again_until_it_does(
        dark: DarkPort) -> None:
    metrics = Metrics()
    loop = asyncio.get_running_loop()
    async with client_of(dark.url, metrics) as client:
        for _ in range(DOWN_AFTER):  # each waits out the timeout: nothing yet says it is down
            started = loop.time()
            error = await failure_of(lambda: client.get_json("left-pad"))
            assert error.kind == "timeout"
            assert loop.time() - started >= TIMEOUT * 0.9
        assert client.outage.down
        started = loop.time()
        skipped = [await failure_of(lambda: client.get_json("left-pad")) for _ in range(20)]
        # answered at once, as the failure the upstream is down with (a 504, as a timeout)
        assert loop.time() - started < TIMEOUT
        assert {error.kind for error in skipped} == {"timeout"}
        assert all("not asked" in str(error) for error in skipped)
        assert skipped[0].client_status == 504
        assert metrics.upstream_failures.labels("public", "down")._value.get() == 20
        assert metrics.upstream_failures.labels("public", "timeout")._value.get() == DOWN_AFTER

        # while it stays dark, connections are tried beside the calls, and no call waits
        await asyncio.sleep(3 * RETRY + 2 * TIMEOUT)  # a try takes RETRY, then TIMEOUT
        started = loop.time()
        assert "not asked" in str(await failure_of(lambda: client.get_json("left-pad")))
        assert loop.time() - started < TIMEOUT / 2
        assert client.outage.connections_failed >= 1


async def test_an_upstream_that_takes_connections_again_is_asked_again(dark: DarkPort) -> None:
    async with client_of(dark.url) as client:
        for _ in range(DOWN_AFTER):
            await failure_of(lambda: client.get_json("left-pad"))
        # the control: still dark, still answered without asking
        assert "not asked" in str(await failure_of(lambda: client.get_json("left-pad")))
        dark.close()
        state = Registry(hang=False)
        app = web.Application()
        app.router.add_get("/{name}", state.handle)
        server = TestServer(app, host="127.0.0.1", port=dark.port)
        await server.start_server()
        try:
            for _ in range(50):  # a connection is tried every RETRY seconds
                if not client.outage.down:
                    break
                await asyncio.sleep(RETRY / 2)
            assert not client.outage.down
            answers = await asyncio.gather(*(client.get_json("left-pad") for _ in range(5)))
            assert {answer.status for answer in answers} == {200}
            assert len(state.seen) == 5  # the connection tried sent no request
        finally:
            await server.close()


async def test_an_upstream_that_takes_the_connection_and_hangs_is_asked_every_time(
        registry: tuple[Registry, TestServer]) -> None:
    """The control: a registry that takes the connection and sends no status line in time
    is slow on that call, which may be one document's (faults row 2): its other calls go."""
    state, server = registry
    async with client_of(str(server.make_url("/"))) as client:
        for _ in range(2 * DOWN_AFTER):
            assert (await failure_of(lambda: client.get_json("left-pad"))).kind == "timeout"
        assert (client.outage.failures, client.outage.down) == (0, False)
        assert len(state.seen) == 2 * DOWN_AFTER


async def test_an_upstream_answering_errors_is_up_and_asked_every_time(
        registry: tuple[Registry, TestServer]) -> None:
    state, server = registry
    state.hang, state.status = False, 500
    async with client_of(str(server.make_url("/"))) as client:
        for _ in range(10):
            error = await failure_of(lambda: client.get_json("left-pad"))
            assert (error.kind, error.status) == ("status", 500)
        assert not client.outage.down
        assert len(state.seen) == 10


async def test_a_call_that_waited_for_its_pools_connection_says_nothing_of_the_upstream(
        dark: DarkPort) -> None:
    """A full pool times a call out too (the wait counts against the connect timeout); that
    is mirrorgate's own queue, not the upstream failing."""
    async with client_of(dark.url, pools=PoolSizes(fills=1)) as client:
        outcomes = await asyncio.gather(*(client.get_json("left-pad") for _ in range(5)),
                                        return_exceptions=True)
        assert all(isinstance(outcome, UpstreamError) for outcome in outcomes)
        assert client.outage.failures == 1  # one call had the pool's connection to try
        assert not client.outage.down


async def test_a_refused_connection_makes_nobody_wait_and_is_asked_every_time() -> None:
    """The control: a registry whose port refuses connections fails each call at once, so
    nothing is held down and it is asked again at every call (it may be back at the next)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        async with client_of(f"http://127.0.0.1:{port}/") as client:
            for _ in range(3 * DOWN_AFTER):
                error = await failure_of(lambda: client.get_json("left-pad"))
                assert (error.kind, "not asked" in str(error)) == ("unreachable", False)
            assert (client.outage.failures, client.outage.down) == (0, False)


async def test_a_dark_upstream_answers_the_tarball_streams_at_once_too(dark: DarkPort) -> None:
    """One outage a client: the fills' timeouts answer its tarball streams at once as well."""
    async with client_of(dark.url) as client:
        for _ in range(DOWN_AFTER):
            await failure_of(lambda: client.get_json("left-pad"))
        with pytest.raises(UpstreamError) as caught:
            async with client.stream(f"{dark.url}left-pad/-/left-pad-1.0.0.tgz"):
                pass
        assert "not asked" in str(caught.value)
        assert caught.value.client_status == 504


async def test_any_answer_brings_it_back_and_a_lone_failure_does_not_take_it_down() -> None:
    tried: list[None] = []

    async def dark() -> None:
        tried.append(None)
        raise ConnectionRefusedError

    outage = Outage("private", dark, waited=0.0, retry_every=RETRY)

    def fail() -> None:
        assert outage.allows()
        outage.failed("timeout", "no answer within 30 s", waited=30.0)

    for _ in range(DOWN_AFTER - 1):
        fail()
    assert outage.allows()
    outage.answered()
    for _ in range(DOWN_AFTER - 1):  # the count starts over after an answer
        fail()
    assert not outage.down
    fail()
    assert outage.down
    assert not outage.allows()
    assert outage.skipped == 1
    for _ in range(40):  # tried on its own while down, every RETRY seconds, no call made
        if len(tried) >= 2:
            break
        await asyncio.sleep(RETRY / 2)
    assert len(tried) >= 2
    assert outage.down
    await outage.close()


async def test_a_new_connection_gets_its_own_bound_and_an_answer_the_whole_timeout(
        dark: DarkPort, registry: tuple[Registry, TestServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A dark upstream costs a call `CONNECT_WITHIN` (10 s in use), not the whole upstream
    timeout; a registry that took the connection is given the whole timeout to answer."""
    monkeypatch.setattr(client_module, "CONNECT_WITHIN", 0.2)
    _state, server = registry
    loop = asyncio.get_running_loop()
    for url, least, most in ((dark.url, 0.18, 0.6), (str(server.make_url("/")), 0.9, 2.0)):
        client = Upstream("public", url, timeout=1.0, max_metadata_bytes=4096)
        await client.start()
        try:
            started = loop.time()
            error = await failure_of(lambda: client.get_json("left-pad"))  # noqa: B023
            assert least <= loop.time() - started <= most, str(error)
            assert error.kind == "timeout"
            assert ("no connection within 0.2 s" in str(error)) == (url == dark.url)
        finally:
            await client.close()
