"""The listener's slow-client bounds, against raw sockets on loopback.

The attacks stopped: a client that sends half a request head (or nothing) and waits, which
aiohttp alone keeps for its keep-alive timeout (an hour by default); and a client that stops
reading a response, which aiohttp alone waits on forever, holding the handler and whatever it
holds (for a tarball, an upstream connection).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from mirrorgate.serve.listener import ClientBounds, GuardedSite
from tests.servers.ports import free_port

HEAD_TIMEOUT = 0.5
STALL = 0.5
KEEPALIVE = 3.0


@dataclass
class Listening:
    port: int
    cuts: list[str] = field(default_factory=list)
    stream_outcomes: list[str] = field(default_factory=list)
    stream_ended: asyncio.Event = field(default_factory=asyncio.Event)


async def endless(request: web.Request, state: Listening) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    chunk = b"x" * 65536
    try:
        for _ in range(10_000):  # 655 MB at most: far more than any socket buffers
            await response.write(chunk)
    except ConnectionError:
        state.stream_outcomes.append("client_gone")
        return response
    finally:
        state.stream_ended.set()
    state.stream_outcomes.append("finished")
    return response


@pytest.fixture
async def listening() -> AsyncIterator[Listening]:
    state = Listening(free_port())
    app = web.Application()

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/ok", ok)

    async def stream(request: web.Request) -> web.StreamResponse:
        return await endless(request, state)

    app.router.add_get("/endless", stream)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE)
    await runner.setup()
    bounds = ClientBounds(head_timeout=HEAD_TIMEOUT, write_stall_timeout=STALL,
                          on_cut=state.cuts.append)
    await GuardedSite(runner, "127.0.0.1", state.port, bounds=bounds).start()
    yield state
    await runner.cleanup()


async def connect(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed `sock` (reads everything it sends meanwhile)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    async with asyncio.timeout(seconds):
        while True:
            try:
                data = await loop.sock_recv(sock, 65536)
            except ConnectionResetError:
                break
            if not data:
                break
    return time.monotonic() - started


async def test_a_half_sent_request_head_is_cut_after_the_head_timeout(
        listening: Listening) -> None:
    sock = await connect(listening.port)
    await asyncio.get_running_loop().sock_sendall(sock, b"GET /ok HTTP/1.1\r\nHost: x\r\n")
    waited = await closed_within(sock, HEAD_TIMEOUT + 3)
    sock.close()
    assert HEAD_TIMEOUT - 0.1 < waited < HEAD_TIMEOUT + 2
    assert listening.cuts == ["head_timeout"]


async def test_a_connection_that_never_sends_a_byte_is_cut_after_the_head_timeout(
        listening: Listening) -> None:
    sock = await connect(listening.port)
    waited = await closed_within(sock, HEAD_TIMEOUT + 3)
    sock.close()
    assert waited < HEAD_TIMEOUT + 2
    assert listening.cuts == ["head_timeout"]


async def test_a_head_trickled_byte_by_byte_is_cut_at_the_timeout_from_its_first_byte(
        listening: Listening) -> None:
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    started = time.monotonic()
    head = b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    with pytest.raises((BrokenPipeError, ConnectionResetError)):  # noqa: PT012 - the loop is cut
        for byte in head:
            await loop.sock_sendall(sock, bytes([byte]))
            await asyncio.sleep(0.05)
    sock.close()
    assert time.monotonic() - started < HEAD_TIMEOUT + 2
    assert listening.cuts == ["head_timeout"]


async def test_a_keep_alive_connection_serves_again_then_times_out_a_later_half_head(
        listening: Listening) -> None:
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    for _ in range(3):  # requests spaced wider than the head timeout, each head whole
        await loop.sock_sendall(sock, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = await loop.sock_recv(sock, 65536)
        assert reply.startswith(b"HTTP/1.1 200")
        await asyncio.sleep(HEAD_TIMEOUT * 1.5)
    assert listening.cuts == []
    await loop.sock_sendall(sock, b"GET /ok HTTP/1.1\r\n")
    waited = await closed_within(sock, HEAD_TIMEOUT + 3)
    sock.close()
    assert waited < HEAD_TIMEOUT + 2
    assert listening.cuts == ["head_timeout"]


async def test_a_half_head_after_quick_requests_gets_the_whole_timeout_from_its_first_byte(
        listening: Listening) -> None:
    # The head timer is armed once per connection and outlives the heads that end before it
    # fires: one armed by the first quick request fires while the half head below is young,
    # and must wait for that head's own timeout rather than cut it early (or never).
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    for _ in range(2):  # quicker than the head timeout, each head whole
        await loop.sock_sendall(sock, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await loop.sock_recv(sock, 65536)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(HEAD_TIMEOUT / 4)
    await loop.sock_sendall(sock, b"GET /ok HTTP/1.1\r\n")
    waited = await closed_within(sock, HEAD_TIMEOUT + 3)
    sock.close()
    assert HEAD_TIMEOUT - 0.1 < waited < HEAD_TIMEOUT + 2
    assert listening.cuts == ["head_timeout"]


async def test_an_idle_keep_alive_connection_is_closed_after_the_keepalive_timeout(
        listening: Listening) -> None:
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    await loop.sock_sendall(sock, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await loop.sock_recv(sock, 65536)).startswith(b"HTTP/1.1 200")
    waited = await closed_within(sock, KEEPALIVE + 5)
    sock.close()
    assert KEEPALIVE - 0.5 < waited < KEEPALIVE + 3
    assert listening.cuts == []


async def test_a_client_that_stops_reading_is_cut_after_the_stall_timeout(
        listening: Listening) -> None:
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    await loop.sock_sendall(sock, b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
    started = time.monotonic()
    async with asyncio.timeout(STALL + 10):
        await listening.stream_ended.wait()
    sock.close()
    assert listening.stream_outcomes == ["client_gone"]
    assert listening.cuts == ["write_stall"]
    assert time.monotonic() - started < STALL + 5


async def test_a_client_reading_steadily_is_never_cut(listening: Listening) -> None:
    loop = asyncio.get_running_loop()
    sock = await connect(listening.port)
    await loop.sock_sendall(sock, b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
    received = 0
    async with asyncio.timeout(20):
        while received < 64 * 1024 * 1024:  # slower than the server writes, never stalled
            data = await loop.sock_recv(sock, 1 << 20)
            assert data
            received += len(data)
    sock.close()
    assert listening.cuts == []
