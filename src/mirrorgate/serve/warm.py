"""A warm packument's answer, the very bytes aiohttp writes for a `web.Response`, made cheaper.

A `web.Response` builds a header multidict, completes it (length, Date, Server, Connection) and
serialises it on every request; a rendering's answers differ only by their Date, so the status
line and headers are serialised once per rendering and request shape, kept beside it
(`Rendered.wire`), and written with the body at once. tests/serve/test_warm_answers.py holds
the bytes equal to aiohttp's own for every shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from email.utils import formatdate

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11
from multidict import CIMultiDict

from mirrorgate.gate import Rendered

__all__ = ["GZIPPED", "WarmAnswer"]

Head = tuple[bytes, bytes]
"""A head's bytes before the Date's value and after it."""
Shape = tuple[int, HttpVersion, bool, bool]
"""What a head depends on beside the rendering: its status (200 plain, 200 gzip'd as 201, 304),
the request's HTTP version, keep-alive, and whether the body is sent (a HEAD's is not)."""
GZIPPED = 201
"""`Shape`'s status of a gzip'd 200, whose headers are the rendering's `gzip_headers`."""
_KEPT_VERSIONS = (HttpVersion10, HttpVersion11)
"""The versions whose heads are kept; any other a client sends is serialised per request."""
_REASONS = {200: "OK", GZIPPED: "OK", 304: "Not Modified"}
_WRITELINES_FROM = 2048
"""A body smaller than this is joined to its head (one small write); a larger one goes out
beside it (`writelines`: no copy on uvloop, a join on asyncio's own loop, as aiohttp does)."""
_time = time.time
_dated: list[object] = [0, b""]
"""The second last dated and its Date value (aiohttp's `Date`, formatted once a second)."""


def _date() -> bytes:
    now = int(_time())
    if now != _dated[0]:
        _dated[:] = [now, formatdate(now, usegmt=True).encode("ascii")]
    date = _dated[1]
    assert isinstance(date, bytes)
    return date


def _head(rendered: Rendered, shape: Shape) -> Head:
    """What aiohttp's `Response.prepare` writes before the body: the status line, the
    rendering's headers in their order, Content-Length (not on a 304), Date, Server, and
    Connection where aiohttp adds it (keep-alive asked in HTTP/1.0, a close in 1.1)."""
    status, version, keep_alive, with_body = shape
    headers: Mapping[str, str]
    if status == 304:
        headers, length = rendered.not_modified_headers, None
    elif status == GZIPPED:
        headers, length = rendered.gzip_headers, len(rendered.gzipped)
    else:
        headers, length = rendered.headers, len(rendered.body)
    lines = [f"HTTP/{version[0]}.{version[1]} {200 if status == GZIPPED else status} "
             f"{_REASONS[status]}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    # aiohttp leaves an empty body's length out of a HEAD's answer (and every 304's)
    if length or (length is not None and with_body):
        lines.append(f"Content-Length: {length}")
    before = "\r\n".join(lines) + "\r\nDate: "
    after = [f"Server: {SERVER_SOFTWARE}"]
    if keep_alive and version == HttpVersion10:
        after.append("Connection: keep-alive")
    elif not keep_alive and version == HttpVersion11:
        after.append("Connection: close")
    text = before + "\r\n" + "\r\n".join(after) + "\r\n\r\n"
    if "\n" in text.replace("\r\n", "") or "\r" in text.replace("\r\n", ""):
        raise ValueError("a header of a rendering holds a line break")  # aiohttp refuses too
    head_end = len(before.encode())
    encoded = text.encode()
    return encoded[:head_end], encoded[head_end:]


class WarmAnswer(web.StreamResponse):
    """A rendering's answer (`status`: 200, `GZIPPED` or 304), written whole by `prepare`:
    aiohttp's server calls `prepare` then `write_eof` on what a handler returns, and reads
    `keep_alive` after; middlewares read `status` and the response's own mapping."""

    def __init__(self, rendered: Rendered, status: int) -> None:
        super().__init__(status=200 if status == GZIPPED else status, reason=_REASONS[status])
        self._rendered = rendered
        self._shape_status = status

    @property
    def headers(self) -> CIMultiDict[str]:  # type: ignore[override]
        """The rendering's headers this answer sends (not Length, Date, Server, Connection,
        which aiohttp adds as it writes: these are written by `prepare`)."""
        rendered, status = self._rendered, self._shape_status
        return CIMultiDict(rendered.not_modified_headers if status == 304 else
                           rendered.gzip_headers if status == GZIPPED else rendered.headers)

    async def prepare(self, request: web.BaseRequest) -> None:
        if self._eof_sent:
            return None
        rendered, status = self._rendered, self._shape_status
        version, keep_alive = request.version, request.keep_alive
        with_body = status != 304 and request.method != "HEAD"
        shape = (status, version, keep_alive, with_body)
        head = rendered.wire.get(shape)
        if head is None:
            head = _head(rendered, shape)
            if version in _KEPT_VERSIONS:
                rendered.wire[shape] = head
        self._keep_alive = keep_alive  # aiohttp's server keeps the connection open by it
        transport = request.transport
        if transport is None or transport.is_closing():
            # as aiohttp's writer: its server takes this for a client gone
            raise ConnectionResetError("Cannot write to closing transport")
        before, after = head
        whole = before + _date() + after
        body = (rendered.gzipped if status == GZIPPED else rendered.body) if with_body else b""
        if len(body) < _WRITELINES_FROM:
            transport.write(whole + body)
        else:
            transport.writelines((whole, body))
        self._eof_sent = True
        self._body_length = len(body)
        # what aiohttp's writer waits for after the last write: a client that stopped
        # reading holds the next request, not this process's memory
        await request.writer.drain()
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        assert not data and self._eof_sent, "a warm answer is written whole by prepare"
