"""A warm packument's answer: the very bytes aiohttp writes for a `web.Response`, made cheaper.

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
from typing import Any, Literal

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11
from aiohttp.http_parser import RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy

from mirrorgate.gate import Rendered
from mirrorgate.npm.negotiation import etag_matches

__all__ = ["GZIPPED", "NOT_MODIFIED", "PLAIN", "Kind", "WarmAnswer", "kind_of", "raw_message"]

Kind = Literal["plain", "gzip", "not modified"]
"""Which of a rendering's answers: its plain bytes, its gzip'd bytes, or a 304."""
PLAIN: Kind = "plain"
GZIPPED: Kind = "gzip"
NOT_MODIFIED: Kind = "not modified"
_STATUS_LINES = {PLAIN: "200 OK", GZIPPED: "200 OK", NOT_MODIFIED: "304 Not Modified"}
Shape = tuple[Kind, HttpVersion, bool, bool]
"""What a head depends on beside the rendering: the kind of answer, the request's HTTP
version, keep-alive, and whether the body is sent (a HEAD's is not)."""
Head = tuple[bytes, bytes]
"""A head's bytes before the Date's value and after it."""
_WRITELINES_FROM = 2048
"""A body smaller than this is joined to its head (one small write), a larger one written
beside it (`writelines`: no copy of it on uvloop; asyncio's own loop joins them, as aiohttp's
writer always does on Python 3.11)."""
_time = time.time


class _Date:
    """aiohttp's `Date` value, formatted once a second (the second is read by a C call)."""

    second = 0
    value = b""


def _head(rendered: Rendered, shape: Shape) -> Head:
    """What aiohttp's `Response.prepare` writes before the body: the status line, the
    rendering's headers in their order, Content-Length (never on a 304, nor for an empty
    body on a HEAD), Date, Server, and Connection where aiohttp adds it (keep-alive asked in
    HTTP/1.0, a close in HTTP/1.1)."""
    kind, version, keep_alive, with_body = shape
    headers: Mapping[str, str]
    length: int | None
    if kind == NOT_MODIFIED:
        headers, length = rendered.not_modified_headers, None
    elif kind == GZIPPED:
        headers, length = rendered.gzip_headers, len(rendered.gzipped)
    else:
        headers, length = rendered.headers, len(rendered.body)
    lines = [f"HTTP/{version[0]}.{version[1]} {_STATUS_LINES[kind]}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    if length or (length is not None and with_body):
        lines.append(f"Content-Length: {length}")
    lines.append("Date: ")
    after = [f"Server: {SERVER_SOFTWARE}"]
    if keep_alive and version == HttpVersion10:
        after.append("Connection: keep-alive")
    elif not keep_alive and version == HttpVersion11:
        after.append("Connection: close")
    if any("\r" in line or "\n" in line for line in lines + after):
        raise ValueError("a rendering's header holds a line break")  # as aiohttp refuses
    return "\r\n".join(lines).encode(), ("\r\n" + "\r\n".join(after) + "\r\n\r\n").encode()


def kind_of(headers: CIMultiDictProxy[str], rendered: Rendered, gzip: bool) -> Kind:
    """Which answer a request with these headers gets: a 304 when its If-None-Match matches,
    gzip'd when `gzip` says the client takes it (and a gzip was made), else plain."""
    wanted = headers.get("If-None-Match")
    if wanted is not None and rendered.etag and etag_matches(wanted, rendered.etag):
        return NOT_MODIFIED
    return GZIPPED if gzip and rendered.gzipped else PLAIN


def raw_message(request: web.BaseRequest) -> RawRequestMessage:
    """The request line and headers as aiohttp parsed them (a `clone()` replaces them), read
    without the Python frame each of `method`, `headers`, `raw_path`, `version` and
    `keep_alive` runs on a new request; tests/serve/test_warm_answers.py holds them equal."""
    return request._message


class WarmAnswer(web.StreamResponse):
    """One of a rendering's answers, written whole by `prepare`: aiohttp's server calls
    `prepare` then `write_eof` on what a handler returns, and reads `keep_alive` after;
    middlewares read `status` and the response's own mapping."""

    def __init__(self, rendered: Rendered, kind: Kind) -> None:
        # not StreamResponse.__init__: its header multidict and status lookup are most of what
        # this answer saves; what its properties read is set here (`headers` is this class's)
        self._state: dict[Any, Any] = {}
        self._status = 304 if kind == NOT_MODIFIED else 200
        self._reason = "Not Modified" if kind == NOT_MODIFIED else "OK"
        self._rendered = rendered
        self._kind = kind

    @property
    def headers(self) -> CIMultiDict[str]:
        """The rendering's headers this answer sends; Content-Length, Date, Server and
        Connection are completed as it is written, as aiohttp completes a response's."""
        rendered, kind = self._rendered, self._kind
        return CIMultiDict(rendered.not_modified_headers if kind == NOT_MODIFIED else
                           rendered.gzip_headers if kind == GZIPPED else rendered.headers)

    async def prepare(self, request: web.BaseRequest) -> None:
        if self._eof_sent:
            return
        rendered, kind = self._rendered, self._kind
        message = raw_message(request)
        version, keep_alive = message.version, not message.should_close
        with_body = kind != NOT_MODIFIED and message.method != "HEAD"
        shape = (kind, version, keep_alive, with_body)
        head = rendered.wire.get(shape)
        if head is None:
            head = _head(rendered, shape)
            # kept for what clients send, HTTP/1.1 kept alive: at most five heads a rendering
            # (its size counts them); any other shape is serialised per request, so a client
            # varying its version and Connection cannot grow what the cache holds
            if keep_alive and version == HttpVersion11:
                rendered.wire[shape] = head
        self._keep_alive = keep_alive  # aiohttp's server keeps the connection open by it
        transport = request.transport
        if transport is None or transport.is_closing():
            # what aiohttp's writer raises: its server takes it for a client gone
            raise ConnectionResetError("Cannot write to closing transport")
        second = int(_time())
        if second != _Date.second:
            _Date.second, _Date.value = second, formatdate(second, usegmt=True).encode()
        before, after = head
        whole = before + _Date.value + after
        body = (rendered.gzipped if kind == GZIPPED else rendered.body) if with_body else b""
        if len(body) < _WRITELINES_FROM:
            transport.write(whole + body)
        else:
            transport.writelines((whole, body))
        self._eof_sent = True
        self._body_length = len(body)
        if transport.get_write_buffer_size():
            # what aiohttp's writer waits for after a response's last write (it is paused
            # only while bytes wait): a client that stops reading holds its next request,
            # not this process's memory
            await request.writer.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        assert not data, "a warm answer is written whole by prepare"
