"""One upstream client, three bounded pools: tarball streams cannot starve fills or the worker.

The attack stopped: clients that read tarballs very slowly hold every connection their streams
opened; with one shared pool, packument fills and the worker then waited for a connection until
they timed out. Here each use has its own pool, so holding every tarball connection leaves the
fills and the worker untouched, and only a further tarball waits (and times out) for its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mirrorgate.upstream.client import FILLS, TARBALLS, WORKER, PoolSizes, Upstream, UpstreamError

HELD = 3


@pytest.fixture
async def release() -> asyncio.Event:
    return asyncio.Event()


@pytest.fixture
async def server(release: asyncio.Event) -> AsyncIterator[TestServer]:
    async def held_tarball(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = 2
        await response.prepare(request)
        await response.write(b"x")
        await release.wait()  # a slow body: the connection stays held until the test is done
        await response.write(b"y")
        return response

    async def packument(_request: web.Request) -> web.Response:
        return web.json_response({"name": "left-pad"})

    app = web.Application()
    app.router.add_get("/left-pad", packument)
    app.router.add_get("/left-pad/-/left-pad-1.0.0.tgz", held_tarball)
    running = TestServer(app, host="127.0.0.1")
    await running.start_server()
    yield running
    release.set()
    await running.close()


@pytest.fixture
async def upstream(server: TestServer) -> AsyncIterator[Upstream]:
    client = Upstream("public", str(server.make_url("/")), timeout=0.5, max_metadata_bytes=4096,
                      pools=PoolSizes(fills=2, tarballs=HELD, worker=1))
    await client.start()
    yield client
    await client.close()


async def test_with_every_tarball_connection_held_a_fill_and_the_worker_still_get_through(
        upstream: Upstream) -> None:
    url = upstream.url("left-pad/-/left-pad-1.0.0.tgz")
    async with AsyncExitStack() as held:
        for _ in range(HELD):
            response = await held.enter_async_context(upstream.stream(url, pool=TARBALLS))
            assert response is not None
            assert (await anext(response.chunks))[:1] == b"x"
        assert upstream.in_flight(TARBALLS) == HELD

        answer = await asyncio.wait_for(upstream.get_json("left-pad", pool=FILLS), 2)
        assert answer.document == {"name": "left-pad"}
        assert (await upstream.get_json("left-pad", pool=WORKER)).status == 200

        # the tarball pool itself is full: one more stream waits for a connection, and the
        # wait counts against the connect timeout
        with pytest.raises(UpstreamError) as caught:
            async with upstream.stream(url, pool=TARBALLS):
                pass
        assert caught.value.kind == "timeout"
    assert upstream.in_flight(TARBALLS) == 0
    assert upstream.in_flight(FILLS) == 0


async def test_a_stream_given_up_half_read_frees_its_connection_for_the_next(
        upstream: Upstream) -> None:
    url = upstream.url("left-pad/-/left-pad-1.0.0.tgz")
    for _ in range(HELD * 2):  # more streams than the pool holds, one after another
        async with upstream.stream(url) as response:
            assert response is not None
            assert (await anext(response.chunks))[:1] == b"x"
    assert upstream.in_flight(TARBALLS) == 0
