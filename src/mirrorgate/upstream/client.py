"""The HTTP client for one upstream registry: bounded connection pools, origin-locked.

Each upstream (public, private, mirror target) gets one `Upstream` for the life of the process,
holding one bounded connection pool per use (`Pool`: packument fills, tarball streams, the
worker), so a slow client holding every tarball connection never delays a fill or the worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
import orjson
import structlog

from mirrorgate import tracing
from mirrorgate.config import Secret
from mirrorgate.errors import MirrorgateError
from mirrorgate.logs import loggable_url
from mirrorgate.metrics import Metrics
from mirrorgate.npm.lazydoc import lazy_packument
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.origins import Origin, OriginRefusal, check_on_origin
from mirrorgate.npm.packument import not_a_packument
from mirrorgate.offload import in_thread_if_large
from mirrorgate.upstream.codings import IDENTITY, UnsupportedCodingError, coding_of, decode
from mirrorgate.upstream.outage import WAITED, Outage

__all__ = ["ABBREVIATED", "FILLS", "TARBALLS", "WORKER", "BodyStopped", "Download", "JsonAnswer",
           "Pool", "PoolSizes", "StreamedBody", "Upstream", "UpstreamError"]

log = structlog.get_logger("mirrorgate.serve")

ABBREVIATED = "application/vnd.npm.install-v1+json"
CHUNK = 64 * 1024
BYTES_PER_VALUE = 16
"""A metadata document may hold one JSON value per this many bytes of
MIRRORGATE_MAX_METADATA_BYTES (2 million at the 32 MiB default; real packuments hold one
value every 22 bytes or so of their own size, well under that at any size up to the cap).

The byte cap alone does not bound the parse: a packument costs about 4.5 times its bytes once
parsed, but 32 MiB of `[{},{},...]` would cost 24 times (768 MiB). Bounding the values keeps
any accepted document's parse near the five copies of the cap the deployment sizing budgets."""
CONNECT_WITHIN = 10.0
"""Seconds a new connection (TCP and TLS) may take, whatever MIRRORGATE_UPSTREAM_TIMEOUT says
(a shorter timeout is the bound): a registry reachable at all connects in well under a second,
and one behind a firewall that drops packets otherwise costs every call under way when it went
dark the whole timeout (`outage`)."""
MIN_VALUES = 65_536
"""The bound never goes below this (a few MiB parsed at worst), so a small byte cap does not
turn a malformed document into a size refusal."""


Pool = Literal["fills", "tarballs", "worker"]
FILLS: Pool = "fills"
"""Serve-path metadata: packument fills (private and public)."""
TARBALLS: Pool = "tarballs"
"""Serve-path tarball streams, held as long as the client takes to read."""
WORKER: Pool = "worker"
"""The mirror worker: its target reads, tarball downloads and publishes."""


@dataclass(frozen=True, slots=True)
class PoolSizes:
    """Connections each use may hold at once to one upstream (MIRRORGATE_POOL_*)."""

    fills: int = 32
    tarballs: int = 64
    worker: int = 8

    def of(self, pool: Pool) -> int:
        return int(getattr(self, pool))


_STRUCTURAL = b",{["
_COUNTED = 64 * 1024
"""Bytes counted at once: the deletion below is fastest on a window that stays in cache."""


def _json_values(body: bytes, limit: int) -> int:
    """An upper bound on the values a JSON text holds: every value but the first follows a
    comma or opens a container (commas and brackets inside strings count too), counted before
    parsing. A text of fewer than `limit` bytes cannot hold more than `limit` values whatever
    it holds: its length plus one is bound enough, and nothing is counted (a packument under
    2 MiB at the default cap: half the bytes of a cold install's). A longer one is counted
    by deleting those three bytes a window at a time (one pass in C, 0.9 ms a MiB, where
    three `bytes.count` passes took 1.5)."""
    if len(body) < limit:
        return len(body) + 1
    deleted = 0
    for start in range(0, len(body), _COUNTED):
        window = body[start:start + _COUNTED]
        deleted += len(window) - len(window.translate(None, _STRUCTURAL))
    return 1 + deleted


class StreamedBody(Protocol):
    """A request body sent in chunks; its total size, when known before the first, is
    declared (Content-Length), else it goes chunked."""

    @property
    def size(self) -> int | None: ...

    def chunks(self) -> AsyncIterator[bytes]: ...


class BodyStopped(MirrorgateError):  # noqa: N818 - the sender's own verdict, carried out of aiohttp
    """Raised by a `StreamedBody`'s chunks to abandon the request mid-body: the connection is
    closed without the body's end, so the upstream never sees a complete request.
    `send_json` re-raises `reason` (it is not an upstream failure)."""

    def __init__(self, reason: Exception) -> None:
        super().__init__(str(reason))
        self.reason = reason


class UpstreamError(MirrorgateError):
    """An upstream call that did not produce a usable answer.

    `kind`: unreachable, timeout, status (an unexpected HTTP status), too-large, invalid (not
    the JSON object promised), not-packument (a 200 whose object is not the packument asked
    for: `npm.packument.not_a_packument`), refused (a URL off the upstream's origin).
    """

    def __init__(self, label: str, kind: str, detail: str, *, status: int | None = None,
                 retry_after: str | None = None) -> None:
        super().__init__(f"{label} upstream: {detail}")
        self.label = label
        self.detail = detail
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    @property
    def client_status(self) -> int:
        """The status a client of the proxy should see for this failure: 502 for unreachable
        and bad answers, 504 for a timeout, 503 for 429 and 503 (with `retry_after`)."""
        if self.kind == "timeout":
            return 504
        if self.kind == "status" and self.status in (429, 503):
            return 503
        return 502

    @property
    def transient(self) -> bool:
        """Worth retrying later: the upstream may answer differently in a minute."""
        if self.kind in ("unreachable", "timeout", "not-packument"):
            return True  # a rate limiter's or a broken cache's answer passes like an outage
        return self.kind == "status" and self.status is not None and (
            self.status >= 500 or self.status in (408, 429))


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """A metadata answer: 200 with a document, 304 (not modified) or 404 (unknown). `body` is
    the document's bytes as the upstream sent them (decoded), for a reader that keeps them."""

    status: int
    document: dict[str, Any] | None
    etag: str | None
    size: int
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Download:
    """A tarball answer being read: its status, the stored size when the upstream declared it
    for the bytes as stored (None for a coded answer), the coding it travelled in (decoded
    here, None for identity) and the stored bytes, chunk by chunk."""

    status: int
    size: int | None
    coding: str | None
    chunks: AsyncIterator[bytes]


class Upstream:
    """One upstream registry. No redirects are followed (`allow_redirects=False` everywhere):
    a 3xx is an answer like any other, so an upstream cannot bounce the proxy to another host.
    Every call has a timeout (connect and each read), and while the upstream takes no
    connection (`outage`) its calls are answered at once."""

    def __init__(
        self,
        label: str,
        base_url: str,
        *,
        timeout: float,
        max_metadata_bytes: int,
        token: Secret | None = None,
        metrics: Metrics | None = None,
        pools: PoolSizes | None = None,
    ) -> None:
        self.label = label
        self.base = base_url if base_url.endswith("/") else base_url + "/"
        self.origin = Origin.of(self.base)
        self._token = token
        self._timeout = timeout
        self._connect_within = min(CONNECT_WITHIN, timeout)
        self._max_metadata = max_metadata_bytes
        self._max_values = max(MIN_VALUES, max_metadata_bytes // BYTES_PER_VALUE)
        self._metrics = metrics
        self.pools = pools or PoolSizes()
        self._sessions: dict[Pool, aiohttp.ClientSession] = {}
        self._in_flight: dict[Pool, int] = {FILLS: 0, TARBALLS: 0, WORKER: 0}
        self.outage = Outage(label, self.connect_once, waited=min(WAITED, timeout / 2))

    async def start(self) -> None:
        for pool in (FILLS, TARBALLS, WORKER):
            if pool not in self._sessions:
                # A session with its own TCPConnector per use, not a semaphore per use in front
                # of one shared connector: the connector accounts for a connection on every exit
                # path (released, closed, broken mid-body), so the bound is exact and a use
                # cannot see another's connections; the cost is up to three idle keep-alive
                # pools per upstream. Waiting for a free connection counts against the connect
                # timeout, so a full pool surfaces as a timeout, not a hang.
                # limit_per_host=0: the pool's one bound is `limit`; every request of an
                # Upstream goes to one origin anyway.
                self._sessions[pool] = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=self.pools.of(pool), limit_per_host=0,
                                                   ttl_dns_cache=60),
                    timeout=aiohttp.ClientTimeout(total=None, connect=self._timeout,
                                                  sock_connect=self._connect_within,
                                                  sock_read=self._timeout),
                    # the pool in the User-Agent: a registry's access log tells the proxy's
                    # reads from the worker's (and a test, the serve path's from the worker's)
                    headers={"User-Agent": f"mirrorgate ({pool})"},
                    trust_env=False,
                )

    async def close(self) -> None:
        await self.outage.close()
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            await session.close()

    def session(self, pool: Pool) -> aiohttp.ClientSession:
        """The session (and so the bounded connection pool) of one use."""
        session = self._sessions.get(pool)
        if session is None:
            raise RuntimeError(f"the {self.label} upstream was used before start()")
        return session

    def in_flight(self, pool: Pool) -> int:
        """Requests of one use under way (waiting for or holding a connection); the pool is
        back to full when this is 0. Exported as mirrorgate_upstream_in_flight."""
        return self._in_flight[pool]

    @contextmanager
    def _holding(self, pool: Pool) -> Iterator[aiohttp.ClientSession]:
        session = self.session(pool)
        self._in_flight[pool] += 1
        try:
            yield session
        finally:
            self._in_flight[pool] -= 1

    def url(self, path: str) -> str:
        return self.base + path.lstrip("/")

    def _headers(self, url: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        # The token goes only to this upstream's own origin, and never into an error (errors
        # carry the label and a status, not headers).
        headers = dict(extra or {})
        if self._token is not None and Origin.of(url) == self.origin:
            headers["Authorization"] = f"Bearer {self._token.reveal()}"
        return headers

    def _span(self, method: str, url: str, pool: Pool) -> AbstractContextManager[tracing.Span]:
        """A client span for one call, never current: a caller streaming a tarball does other
        work (the enqueue) that belongs to the request, not to this call."""
        if not tracing.enabled():
            return tracing.span(method)
        return tracing.span(method, {
            "http.request.method": method, "url.full": loggable_url(url),
            "server.address": self.origin.host, "mirrorgate.upstream": self.label,
            "mirrorgate.pool": pool}, kind="client", current=False)

    def _observe(self, kind: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.upstream_seconds.labels(self.label, kind).observe(
                time.monotonic() - started)

    def _failure(self, error: UpstreamError) -> UpstreamError:
        if self._metrics is not None:
            self._metrics.upstream_failures.labels(self.label, error.kind).inc()
            self._metrics.events.upstream_failed(self.label, error.kind, str(error))
        return error

    async def connect_once(self) -> None:
        """A connection to the upstream's origin, opened and closed: what says a dark upstream
        takes connections again (`outage`). TCP alone; a TLS or HTTP failure after it is the
        calls' own."""
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.origin.host, self.origin.port), self._connect_within)
        writer.close()

    def _admit(self, pool: Pool) -> bool:
        """Whether the pool has a connection free for a call (one that waited for a connection
        of its pool and ran out of time says nothing of the upstream); raises the failure the
        upstream is down with (`outage`) when the call is not to be made."""
        if not self.outage.allows():
            if self._metrics is not None:
                self._metrics.upstream_failures.labels(self.label, "down").inc()
            raise UpstreamError(self.label, self.outage.last_kind, self.outage.refusal())
        return self._in_flight[pool] < self.pools.of(pool)

    def _unanswered(self, free: bool, started: float, error: BaseException,
                    failure: UpstreamError) -> UpstreamError:
        """`failure` (`error` translated), told to the outage when the upstream took no
        connection: a connect timeout, or a refusal after a wait (a resolver that does not
        answer); both are raised before any status line. An upstream that took the
        connection and sent no status line in time is slow on that call, which may be one
        document's: its other calls are its own."""
        if free and isinstance(error, aiohttp.ConnectionTimeoutError
                               | aiohttp.ClientConnectorError):
            self.outage.failed(failure.kind, failure.detail, time.monotonic() - started)
        return failure

    def _translate(self, error: BaseException) -> UpstreamError:
        if isinstance(error, UpstreamError):
            return self._failure(error)
        if isinstance(error, aiohttp.ConnectionTimeoutError):
            return self._failure(UpstreamError(
                self.label, "timeout", f"no connection within {self._connect_within:g} s (nor "
                f"a free one of its pool within {self._timeout:g} s)"))
        if isinstance(error, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
            return self._failure(UpstreamError(self.label, "timeout",
                                               f"no answer within {self._timeout:g} s"))
        if isinstance(error, aiohttp.ClientConnectorError | aiohttp.ServerDisconnectedError
                      | ConnectionError | aiohttp.ClientOSError):
            return self._failure(UpstreamError(self.label, "unreachable",
                                               f"cannot connect ({type(error).__name__})"))
        if isinstance(error, aiohttp.ClientPayloadError):
            return self._failure(UpstreamError(self.label, "unreachable",
                                               "the answer was cut off mid-body"))
        return self._failure(UpstreamError(self.label, "unreachable",
                                           f"request failed ({type(error).__name__})"))

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        """The body, capped while reading and after decompression, so a gzip bomb is stopped
        too."""
        declared = response.content_length
        if declared is not None and declared > self._max_metadata:
            raise UpstreamError(self.label, "too-large",
                                f"the document is {declared} bytes; the limit is "
                                f"{self._max_metadata} (MIRRORGATE_MAX_METADATA_BYTES)")
        parts: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > self._max_metadata:
                raise UpstreamError(self.label, "too-large", f"the document exceeds "
                                    f"{self._max_metadata} bytes (MIRRORGATE_MAX_METADATA_BYTES)")
            parts.append(chunk)
        return b"".join(parts)

    async def get_json(self, path: str, *, etag: str | None = None,
                       accept: str = "application/json", pool: Pool = FILLS,
                       parse: bool = True) -> JsonAnswer:
        """GET a JSON object at `path` under the base URL: 200, 304 (with `etag`) or 404.
        With `parse` False a 200 comes with its bytes only (bounded, values counted) and
        `parsed` makes its document: the caller chooses when, and in which thread."""
        url = self.url(path)
        with self._span("GET", url, pool) as span:
            try:
                answer = await self._get_json(url, etag, accept, pool, parse)
            except UpstreamError as error:
                span.set("error.type", error.kind)
                span.set("http.response.status_code", error.status)
                raise
            span.set("http.response.status_code", answer.status)
            return answer

    async def _get_json(self, url: str, etag: str | None, accept: str,
                        pool: Pool, parse: bool) -> JsonAnswer:
        headers = {"Accept": accept, "Accept-Encoding": "gzip"}
        if etag:
            headers["If-None-Match"] = etag
        free = self._admit(pool)
        started = time.monotonic()
        try:
            with self._holding(pool) as session:
                async with session.get(url, headers=self._headers(url, headers),
                                       allow_redirects=False) as response:
                    self.outage.answered()
                    if response.status == 304:
                        return JsonAnswer(304, None, response.headers.get("ETag") or etag, 0)
                    if response.status == 404:
                        return JsonAnswer(404, None, None, 0)
                    if response.status != 200:
                        raise UpstreamError(self.label, "status", f"answered {response.status}",
                                            status=response.status,
                                            retry_after=response.headers.get("Retry-After"))
                    body = await asyncio.wait_for(self._read_capped(response),
                                                  timeout=self._timeout * 4)
                    answer_etag = response.headers.get("ETag")
        except Exception as error:  # every failure becomes one typed UpstreamError
            raise self._unanswered(free, started, error, self._translate(error)) from None
        finally:
            self._observe("metadata", started)
        values = _json_values(body, self._max_values)
        if values > self._max_values:
            raise self._failure(UpstreamError(
                self.label, "too-large", f"the document holds up to {values} JSON values; the "
                f"limit is {self._max_values} (one per {BYTES_PER_VALUE} bytes of "
                f"MIRRORGATE_MAX_METADATA_BYTES, at least {MIN_VALUES})"))
        answer = JsonAnswer(200, None, answer_etag, len(body), body)
        return self._parsed_now(answer) if parse else answer

    async def parsed(self, answer: JsonAnswer) -> JsonAnswer:
        """`answer` (from `get_json(parse=False)`) with its document, parsed in a thread when
        it is large (`offload`), without its bytes; raises UpstreamError (`invalid`)."""
        if answer.status != 200 or answer.document is not None:
            return answer
        found = await in_thread_if_large(answer.size, self._document, answer.body)
        if isinstance(found, UpstreamError):
            raise self._failure(found)
        return JsonAnswer(200, found, answer.etag, answer.size)

    def packument_of(self, name: PackageName, answer: JsonAnswer) -> JsonAnswer:
        """`answer` (parsed) when it is `name`'s packument, a 304 or a 404; raises
        UpstreamError (`not-packument`, counted and logged `upstream_not_a_packument`) for a
        200 whose object is not (`not_a_packument`): a failed answer, never public's word."""
        if answer.status != 200 or answer.document is None:
            return answer
        self.check_packument(name, answer.document)
        return answer

    async def lazy_packument_of(self, name: PackageName,
                                answer: JsonAnswer) -> Mapping[str, Any] | None:
        """`packument_of` for a one-version reading: a 200's document read lazily
        (`npm.lazydoc`: a fifth of a whole parse's CPU, and only the values read become
        objects), else parsed whole when it must be, which accepts or refuses it as always.
        Raises UpstreamError as `packument_of` does, and `invalid` for a value read that is
        not JSON (as a whole parse would have found); None for a 404 or a 304."""
        if answer.status != 200:
            return None
        document = await in_thread_if_large(answer.size, lazy_packument, answer.body)
        if document is None:
            return self.packument_of(name, await self.parsed(answer)).document
        try:
            self.check_packument(name, document)
        except orjson.JSONDecodeError as error:  # a value it reads
            raise self._failure(UpstreamError(self.label, "invalid", "the document is not "
                                              f"usable JSON ({str(error)[:120]})")) from None
        return document

    def check_packument(self, name: PackageName, document: Mapping[str, Any]) -> None:
        """`packument_of` for a document read another way (`npm.lazydoc`)."""
        wrong = not_a_packument(name, document)
        if wrong is None:
            return
        log.warning("upstream_not_a_packument", upstream=self.label, package=name.full,
                    reason=wrong)
        raise self._failure(UpstreamError(self.label, "not-packument", f"answered 200 for "
                                          f"{name.full} with a document that is not its "
                                          f"packument: {wrong}"))

    def _parsed_now(self, answer: JsonAnswer) -> JsonAnswer:
        found = self._document(answer.body)
        if isinstance(found, UpstreamError):
            raise self._failure(found)
        return JsonAnswer(200, found, answer.etag, answer.size, answer.body)

    def _document(self, body: bytes) -> dict[str, Any] | UpstreamError:
        """The JSON object in `body`, or what is wrong with it (no metric here: this may run in
        a thread; the caller counts it on the loop)."""
        try:
            document = orjson.loads(body)  # orjson's nesting limit (1,024) bounds the depth
        except orjson.JSONDecodeError as error:
            return UpstreamError(self.label, "invalid", f"the document is not usable JSON "
                                 f"({str(error)[:120]})")
        if not isinstance(document, dict):
            return UpstreamError(self.label, "invalid", "the document is not a JSON object")
        return document

    @asynccontextmanager
    async def stream(self, url: str, *, method: str = "GET", accept_missing: bool = True,
                     pool: Pool = TARBALLS) -> AsyncIterator[Download | None]:
        """Open `url` (on this upstream's origin only) for streaming, bytes as stored, on one
        of `pool`'s connections, held until the context exits. Never buffered: the caller
        copies the chunks.

        Yields the download on a 2xx, None on a 404 (when `accept_missing`), and raises
        UpstreamError otherwise. It asks for `identity`; a body the upstream encodes anyway is
        decoded here (`codings`), and one in a coding that cannot be is refused as `invalid`.
        """
        with self._span(method, url, pool) as span:
            try:
                async with self._stream(url, method, accept_missing, pool) as download:
                    span.set("http.response.status_code",
                             download.status if download is not None else 404)
                    yield download
            except UpstreamError as error:
                span.set("error.type", error.kind)
                span.set("http.response.status_code", error.status)
                raise

    @asynccontextmanager
    async def _stream(self, url: str, method: str, accept_missing: bool,
                      pool: Pool) -> AsyncIterator[Download | None]:
        try:
            check_on_origin(url, self.origin)
        except OriginRefusal as refusal:
            raise self._failure(UpstreamError(self.label, "refused", str(refusal))) from None
        free = self._admit(pool)
        started = time.monotonic()
        with self._holding(pool) as session:
            try:
                # identity: aiohttp's default asks for gzip, and a tarball then arrives gzip'd
                # (Verdaccio does it above 1 KB); auto_decompress stays off so `decode` is the
                # one place a coding is undone and Content-Length is trusted only for identity.
                response = await session.request(
                    method, url, headers=self._headers(url, {"Accept": "*/*",
                                                             "Accept-Encoding": IDENTITY}),
                    allow_redirects=False, auto_decompress=False)
                self.outage.answered()
            except Exception as error:  # connection-level failures become UpstreamError
                self._observe("tarball", started)
                raise self._unanswered(free, started, error, self._translate(error)) from None
            self._observe("tarball", started)
            try:
                if response.status == 404 and accept_missing:
                    yield None
                elif 200 <= response.status < 300:
                    yield self._download(response, method)
                else:
                    raise self._failure(UpstreamError(
                        self.label, "status", f"answered {response.status}",
                        status=response.status, retry_after=response.headers.get("Retry-After")))
            finally:
                response.release()

    def _download(self, response: aiohttp.ClientResponse, method: str) -> Download:
        try:
            coding = coding_of(response.headers)
        except UnsupportedCodingError as error:
            raise self._failure(UpstreamError(self.label, "invalid", str(error),
                                              status=response.status)) from None
        raw = response.content.iter_chunked(CHUNK)
        if coding is None:
            return Download(response.status, response.content_length, None, raw)
        if self._metrics is not None:
            self._metrics.upstream_decoded.labels(self.label, coding).inc()
        # the declared length is the coded one: the stored size is known only once decoded
        chunks = raw if method == "HEAD" else decode(raw, coding)
        return Download(response.status, None, coding, chunks)

    async def send_json(self, method: str, path: str, body: bytes | StreamedBody, *,
                        pool: Pool = WORKER) -> tuple[int, bytes]:
        """A write (publish) to this upstream: the status and up to 64 KiB of the answer.

        A `StreamedBody` is sent chunk by chunk with its Content-Length declared up front.
        """
        url = self.url(path)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        data: bytes | AsyncIterator[bytes]
        if isinstance(body, bytes):
            data = body
        else:
            data = body.chunks()
            if body.size is not None:
                headers["Content-Length"] = str(body.size)
        free = self._admit(pool)
        started = time.monotonic()
        try:
            with self._holding(pool) as session, self._span(method, url, pool) as span:
                async with session.request(
                    method, url, data=data, allow_redirects=False,
                    headers=self._headers(url, headers),
                ) as response:
                    self.outage.answered()
                    answer = await response.content.read(64 * 1024)
                    span.set("http.response.status_code", response.status)
                    return response.status, answer
        except Exception as error:
            # aiohttp wraps what the body raised (ClientConnectionError, __cause__ = ours)
            stopped = error if isinstance(error, BodyStopped) else error.__cause__
            if isinstance(stopped, BodyStopped):
                raise stopped.reason from None
            raise self._unanswered(free, started, error, self._translate(error)) from None
        finally:
            self._observe("publish", started)
