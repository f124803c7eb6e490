"""The runtime under mirrorgate: uvloop where it is installed, asyncio's loop where it is not
(or where it is asked for), a collector tuned for a cache of many small objects."""

from __future__ import annotations

import gc
import gzip
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import compression_utils, web
from aiohttp.test_utils import TestServer
from isal import isal_zlib

from mirrorgate import runtime
from mirrorgate.config import ConfigError, load_settings
from mirrorgate.upstream.client import Upstream, UpstreamError
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import http_request, wait_for


def loaded_uvloop(pid: int) -> bool:
    return "uvloop/loop" in Path(f"/proc/{pid}/maps").read_text()


def test_auto_is_uvloop_when_it_is_installed() -> None:
    factory, name = runtime.loop_factory("auto")
    assert name == "uvloop"
    assert factory is not None


def test_asyncio_is_the_standard_loop() -> None:
    assert runtime.loop_factory("asyncio") == (None, "asyncio")


def test_auto_falls_back_to_asyncio_where_uvloop_cannot_be_imported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda _name: None)
    assert runtime.loop_factory("auto") == (None, "asyncio")


def test_asking_for_uvloop_where_it_is_missing_says_what_to_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda _name: None)
    with pytest.raises(ConfigError, match=r"MIRRORGATE_EVENT_LOOP.*pip install uvloop"):
        load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
                       "MIRRORGATE_EVENT_LOOP": "uvloop"})


def test_an_unknown_loop_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"'tokio' is not one of auto, uvloop, asyncio"):
        load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
                       "MIRRORGATE_EVENT_LOOP": "tokio"})


def test_the_collector_runs_rarely_and_the_allocator_keeps_two_arenas() -> None:
    before = gc.get_threshold()
    try:
        runtime.tune_collector()
        assert gc.get_threshold() == runtime.THRESHOLDS
    finally:
        gc.set_threshold(*before)
    assert runtime.tune_allocator()  # glibc here: mallopt took it


@pytest.mark.parametrize(("choice", "on_uvloop"), [(None, True), ("asyncio", False)])
def test_mirrorgate_serve_relays_and_mirrors_on_either_loop(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        choice: str | None, on_uvloop: bool) -> None:
    public_registry.add(make_package("either-loop", ["1.0.0"]))
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    if choice is not None:
        env["MIRRORGATE_EVENT_LOOP"] = choice
    proxy = mirrorgate("serve", env)

    reply = http_request("GET", proxy.registry_url + tarball_path("either-loop", "1.0.0")[1:])

    assert reply.status == 200
    wait_for(lambda: proxy.events("mirror_published"), timeout=30,
             message="the in-process worker to mirror the pull")
    assert loaded_uvloop(proxy.pid) is on_uvloop
    [line] = proxy.events("runtime")
    assert line["event_loop"] == ("uvloop" if on_uvloop else "asyncio")


@pytest.fixture
def isal_inflate() -> Iterator[None]:
    before = compression_utils.ZLibBackend._zlib_backend
    runtime.inflate_with_isal()
    yield
    compression_utils.set_zlib_backend(before)


async def test_a_gzipd_packument_is_inflated_by_isal_and_its_inflated_bytes_are_capped(
        isal_inflate: None) -> None:
    assert compression_utils.ZLibBackend._zlib_backend is isal_zlib
    # 3 MB of packument, 10 KB on the wire: read whole under a 4 MiB cap, refused under 1 MiB
    document = {"name": "padded", "versions": {}, "readme": "words " * 500_000}
    body = gzip.compress(orjson.dumps(document))

    async def packument(_request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": "application/json",
                                                "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/padded", packument)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        for cap, fits in ((4 * 1024 * 1024, True), (1024 * 1024, False)):
            upstream = Upstream("public", str(server.make_url("/")), timeout=5.0,
                                max_metadata_bytes=cap)
            await upstream.start()
            try:
                if fits:
                    assert (await upstream.get_json("padded")).document == document
                else:
                    with pytest.raises(UpstreamError, match="exceeds 1048576 bytes"):
                        await upstream.get_json("padded")
            finally:
                await upstream.close()
    finally:
        await server.close()
