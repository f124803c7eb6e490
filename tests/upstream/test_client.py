"""The upstream client against a small hand-written aiohttp upstream that misbehaves on cue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mirrorgate.config import Secret
from mirrorgate.upstream.client import Upstream, UpstreamError

seen_headers: list[dict[str, str]] = []


async def packument(request: web.Request) -> web.StreamResponse:
    seen_headers.append(dict(request.headers))
    if request.headers.get("If-None-Match") == '"v1"':
        return web.Response(status=304, headers={"ETag": '"v1"'})
    return web.json_response({"name": "left-pad"}, headers={"ETag": '"v1"'})


async def huge_declared(_request: web.Request) -> web.Response:
    return web.Response(body=b"{" + b" " * 5000 + b"}", content_type="application/json")


async def huge_streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    for _ in range(10):
        await response.write(b" " * 1000)
    return response


async def deep(_request: web.Request) -> web.Response:
    return web.Response(body=b"[" * 1100 + b"]" * 1100, content_type="application/json")


def _values(count: int) -> bytes:
    """A dense array of `count` JSON values in all (itself and `count - 1` zeros), long enough
    that every byte of it is counted."""
    return b"[" + b",".join([b"0"] * (count - 1)) + b"]"


async def dense(request: web.Request) -> web.Response:
    return web.Response(body=_values(int(request.match_info["count"])),
                        content_type="application/json")


async def hang(_request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.Response()


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.Response(status=code, headers={"Retry-After": "7"} if code == 429 else None)


async def redirect(_request: web.Request) -> web.Response:
    raise web.HTTPFound("/left-pad")


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_get("/left-pad", packument)
    app.router.add_get("/huge-declared", huge_declared)
    app.router.add_get("/huge-streamed", huge_streamed)
    app.router.add_get("/deep", deep)
    app.router.add_get("/dense/{count}", dense)
    app.router.add_get("/hang", hang)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/redirect", redirect)
    running = TestServer(app, host="127.0.0.1")
    await running.start_server()
    yield running
    await running.close()


@pytest.fixture
async def upstream(server: TestServer) -> AsyncIterator[Upstream]:
    client = Upstream("public", str(server.make_url("/")), timeout=0.5,
                      max_metadata_bytes=4096, token=Secret("tok-123456"))
    await client.start()
    yield client
    await client.close()


async def test_a_packument_is_fetched_with_its_etag_and_revalidated_with_304(
        upstream: Upstream) -> None:
    answer = await upstream.get_json("left-pad")
    assert answer.status == 200
    assert answer.document == {"name": "left-pad"}
    assert answer.etag == '"v1"'
    again = await upstream.get_json("left-pad", etag='"v1"')
    assert again.status == 304


async def test_the_token_goes_only_to_the_upstreams_own_origin(upstream: Upstream) -> None:
    seen_headers.clear()
    await upstream.get_json("left-pad")
    assert seen_headers[-1]["Authorization"] == "Bearer tok-123456"


async def test_an_unknown_package_is_a_404_answer_not_an_error(upstream: Upstream) -> None:
    assert (await upstream.get_json("nothing-here")).status == 404


async def test_one_json_value_past_the_bound_refuses_a_document_and_one_fewer_does_not(
        server: TestServer) -> None:
    # 4 MiB allows 262,144 values: dense arrays of exactly that many and one more, half a
    # million bytes each, counted across windows
    client = Upstream("public", str(server.make_url("/")), timeout=5.0,
                      max_metadata_bytes=4 * 1024 * 1024)
    await client.start()
    try:
        bound = 4 * 1024 * 1024 // 16
        assert len(_values(bound)) > bound
        answer = await client.get_json(f"dense/{bound}", parse=False)
        assert answer.status == 200
        with pytest.raises(UpstreamError) as caught:
            await client.get_json(f"dense/{bound + 1}", parse=False)
        assert caught.value.kind == "too-large"
        assert f"holds up to {bound + 1} JSON values; the limit is {bound}" in str(caught.value)
    finally:
        await client.close()


@pytest.mark.parametrize("path", ["huge-declared", "huge-streamed"])
async def test_a_document_past_the_byte_cap_is_refused_while_reading(
        upstream: Upstream, path: str) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json(path)
    assert caught.value.kind == "too-large"
    assert caught.value.client_status == 502


async def test_json_nested_too_deep_is_refused_as_invalid(upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json("deep")
    assert caught.value.kind == "invalid"


@pytest.mark.parametrize(
    ("code", "client_status", "retry_after"),
    [(500, 502, None), (429, 503, "7"), (503, 503, None), (401, 502, None)],
)
async def test_an_unexpected_status_maps_to_the_clients_status(
        upstream: Upstream, code: int, client_status: int, retry_after: str | None) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json(f"status/{code}")
    assert caught.value.client_status == client_status
    assert caught.value.retry_after == retry_after


async def test_a_hanging_upstream_times_out_as_504(upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json("hang")
    assert caught.value.kind == "timeout"
    assert caught.value.client_status == 504
    assert caught.value.transient


async def test_redirects_are_never_followed(upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json("redirect")
    assert caught.value.status == 302


async def test_an_unreachable_upstream_is_a_transient_502() -> None:
    client = Upstream("public", "http://127.0.0.1:9/", timeout=0.5, max_metadata_bytes=2048)
    await client.start()
    try:
        with pytest.raises(UpstreamError) as caught:
            await client.get_json("left-pad")
    finally:
        await client.close()
    assert caught.value.kind == "unreachable"
    assert caught.value.client_status == 502
    assert caught.value.transient


async def test_a_url_off_the_upstream_origin_is_refused_before_any_connection(
        upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        async with upstream.stream("http://169.254.169.254/latest/meta-data/"):
            pass
    assert caught.value.kind == "refused"
    assert "internal address" in str(caught.value)


async def test_errors_never_carry_the_token(upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        await upstream.get_json("status/500")
    assert "tok-123456" not in str(caught.value)
    assert "tok-123456" not in orjson.dumps(vars(caught.value)).decode()
