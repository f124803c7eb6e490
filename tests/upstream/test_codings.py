"""Tarball reads yield the bytes as stored, whatever content coding the upstream answers in.

The upstream here is a hand-written aiohttp handler that codes a real tarball each way an
upstream might (gzip, x-gzip, zlib deflate, raw deflate, concatenated gzip members), or breaks
the coding; `Upstream.stream()` must hand over the stored bytes, or fail as a broken transfer,
never as other bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mirrorgate.metrics import Metrics
from mirrorgate.upstream.client import Upstream, UpstreamError
from mirrorgate.upstream.codings import CodingError
from tests.servers.packages import make_version

TARBALL = make_version("coded", "1.0.0", size=600_000).tarball
accept_encodings: list[str] = []


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


CODED: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", lambda data: gzip.compress(data, mtime=0)),
    "x-gzip": ("x-gzip", lambda data: gzip.compress(data, mtime=0)),
    "deflate": ("deflate", zlib.compress),
    "raw-deflate": ("deflate", raw_deflate),
    "members": ("gzip", lambda data: gzip.compress(data[:1000]) + gzip.compress(data[1000:])),
    "identity": ("identity", lambda data: data),
}


async def coded(request: web.Request) -> web.StreamResponse:
    accept_encodings.append(request.headers.get("Accept-Encoding", ""))
    coding, code = CODED[request.match_info["how"]]
    body = code(TARBALL)
    response = web.StreamResponse(headers={"Content-Encoding": coding})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for start in range(0, len(body), 7_000):  # odd pieces: member ends fall mid-chunk
        await response.write(body[start:start + 7_000])
    await response.write_eof()
    return response


async def broken(request: web.Request) -> web.Response:
    good = gzip.compress(TARBALL, mtime=0)
    bodies = {"corrupt": good[:5000] + bytes(200) + good[5200:],
              "cut": good[: len(good) // 2],
              "not-gzip": TARBALL[:0] + b"plain bytes that are not gzip at all" * 10}
    return web.Response(body=bodies[request.match_info["how"]],
                        headers={"Content-Encoding": "gzip"})


async def brotli(_request: web.Request) -> web.Response:
    return web.Response(body=b"\x8b\x02\x80hello\x03", headers={"Content-Encoding": "br"})


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    app = web.Application()
    app.router.add_get("/coded/{how}", coded)
    app.router.add_get("/broken/{how}", broken)
    app.router.add_get("/br", brotli)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = Upstream("public", str(server.make_url("/")), timeout=2, max_metadata_bytes=4096,
                      metrics=Metrics())
    await client.start()
    yield client
    await client.close()
    await server.close()


async def read(upstream: Upstream, path: str) -> tuple[bytes, int | None, str | None]:
    async with upstream.stream(upstream.url(path)) as download:
        assert download is not None
        body = b"".join([chunk async for chunk in download.chunks])
        return body, download.size, download.coding


@pytest.mark.parametrize("how", sorted(CODED))
async def test_a_coded_tarball_is_read_as_the_stored_bytes(upstream: Upstream, how: str) -> None:
    body, size, _coding = await read(upstream, f"coded/{how}")
    assert hashlib.sha512(body).digest() == hashlib.sha512(TARBALL).digest()
    assert size is None, "a coded answer's Content-Length is not the stored size"


async def test_every_tarball_read_asks_for_identity(upstream: Upstream) -> None:
    accept_encodings.clear()
    await read(upstream, "coded/identity")
    assert accept_encodings == ["identity"]


async def test_a_decoded_answer_is_counted_by_upstream_and_coding(upstream: Upstream) -> None:
    await read(upstream, "coded/gzip")
    metrics = upstream._metrics
    assert metrics is not None
    assert metrics.registry.get_sample_value(
        "mirrorgate_upstream_decoded_total", {"upstream": "public", "coding": "gzip"}) == 1


@pytest.mark.parametrize("how", ["corrupt", "cut", "not-gzip"])
async def test_a_body_that_does_not_decode_is_a_broken_transfer_not_other_bytes(
        upstream: Upstream, how: str) -> None:
    with pytest.raises(CodingError):
        await read(upstream, f"broken/{how}")


async def test_a_coding_that_cannot_be_decoded_is_refused_by_name(upstream: Upstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        await read(upstream, "br")
    assert caught.value.kind == "invalid"
    assert "'br'" in str(caught.value)
    assert not caught.value.transient
