"""The relay benches' load generator is forked once, not at every round.

The fault it guards: a child forked at each round shares the measuring process's memory
copy-on-write, and the proxy in that process then takes a page fault for each page it writes
after every fork (3,300 a round on its loop, 7,000 on its reading lanes): about 1 ms of CPU a
MB charged to the release signals, which `mirrorgate serve` never pays.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from bench.tarball_relay import LoadGenerator, one_round

BODY = os.urandom(300_000)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def tarball(_request: web.Request) -> web.Response:
        return web.Response(body=BODY)

    app = web.Application()
    app.router.add_get("/{name}", tarball)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/"
    await runner.cleanup()


async def test_rounds_fork_nothing_after_the_generator_started(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    load = LoadGenerator()
    forks: list[str] = []
    fork: Callable[[], int] = os.fork

    def counted() -> int:
        forks.append("fork")
        return fork()

    monkeypatch.setattr(os, "fork", counted)
    try:
        urls = [f"{server}p{index}" for index in range(6)]
        rounds = [await one_round(load, urls, 2) for _ in range(3)]
        received, _seconds = await load.run(urls, 3)
    finally:
        load.close()
    assert forks == []
    assert all(each.mbps > 0 for each in rounds)
    assert received == len(urls) * len(BODY)  # every URL fetched whole, by the one child
