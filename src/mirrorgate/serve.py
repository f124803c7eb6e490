"""The proxy: the npm registry protocol under `/npm/`, merged packuments, gated tarballs.

`build_proxy_app(proxy)` is what `mirrorgate serve` listens with. Routes (GET and HEAD):
`/npm/<name>` (packument; scoped as `@s%2fn`, `@s%2Fn` or `@s/n`), `/npm/<name>/<version or
tag>`, `/npm/<name>/-/<file>.tgz`, `/npm/-/ping`, plus `/livez`, `/readyz` and `/metrics` at the
root, which no package name can shadow. Anything else is a JSON 404. Decisions:

- A warm packument request does almost nothing: look the rendered bytes up by (package, form,
  base URL), answer 304 or the gzip'd or plain body with its ETag. Merging, gating, rendering
  and compressing happen once per cache fill (`cache.PackumentCache`, `registry.packument`),
  in a thread for large documents so the loop keeps answering.
- Names are parsed from `request.raw_path` with `parse_name`; anything it refuses is a 400 with
  the reason, and no upstream URL is built from an unvalidated name.
- Tarballs: the private upstream first, streamed as is; on a miss (or a private failure,
  logged) the version's public gate decides: 403 with a JSON reason, or the public bytes
  streamed chunk by chunk and a `MirrorJob` enqueued in the background once public answered
  2xx (never for HEAD, never when a private copy exists). A transfer whose upstream breaks
  mid-body is aborted, so the client sees a failed download, never a short 200.
- `request_timeout` bounds everything up to the first byte of a response (504 JSON); a tarball
  body, once streaming, is bounded by the upstream's per-read timeout instead.
- Tarball URLs in served documents point at the proxy: `MIRRORGATE_PUBLIC_URL` + `npm/...`
  when set, else the request's `X-Forwarded-Proto`/`X-Forwarded-Host` or `Host`, validated.
- Every request is counted by fixed route label and status; rule denials are counted per
  fill, not per request. Unexpected errors are logged and answered 500, never raised.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import itertools
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote

import aiohttp
import orjson
import structlog
from aiohttp import web
from prometheus_client import Counter

from mirrorgate.cache import Loaded, PackumentCache, Slot
from mirrorgate.config import Settings
from mirrorgate.healthz import Health, add_health_routes
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorArtifact, MirrorJob, MirrorQueue
from mirrorgate.registry.filestore import StoreError
from mirrorgate.registry.names import (
    InvalidNameError,
    PackageName,
    parse_name,
    version_from_filename,
)
from mirrorgate.registry.packument import (
    ABBREVIATED,
    FULL,
    Gated,
    TooManyVersionsError,
    VersionRecord,
    gate,
    render,
    version_document,
    wants_abbreviated,
)
from mirrorgate.registry.private import PrivateSource
from mirrorgate.registry.upstream import JsonAnswer, Upstream, UpstreamError
from mirrorgate.rules import Rules

__all__ = ["SERVER", "Proxy", "ProxyServer", "Rendered", "build_proxy_app", "parse_target"]

log = structlog.get_logger("mirrorgate.serve")

PREFIX = "/npm/"
OCTETS = "application/octet-stream"
VARY = "Accept, Accept-Encoding"
THREAD_ABOVE = 256 * 1024
"""Fills and renderings of documents larger than this run in a thread."""
DEGRADED_FRESH_FOR = 5.0
"""Freshness of a packument built while one upstream was failing: retried soon."""
_MEMO_LIMIT = 4096
_HOST = re.compile(r"(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}\.?(?::[0-9]{1,5})?"
                   r"|\[[0-9A-Fa-f:.]{2,45}\](?::[0-9]{1,5})?")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SEGMENT_LIMIT = 256

OUTCOME = web.ResponseKey("mirrorgate_outcome", str)
"""Set on a response whose transfer did not complete (`aborted`, `client_gone`): the
metrics label instead of the status that was already sent."""

Route = Literal["packument", "version", "tarball", "ping", "unknown"]


@dataclass(frozen=True)
class Proxy:
    """Everything the proxy uses, built and started by the process (`mirrorgate serve`)."""

    settings: Settings
    public: Upstream
    private: PrivateSource
    queue: MirrorQueue
    rules: Rules
    metrics: Metrics
    health: Health


@dataclass(frozen=True, slots=True)
class Target:
    """What an `/npm/` path asks for, parsed once (and memoised) per distinct path."""

    route: Route
    name: PackageName | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Rendered:
    """A packument ready to send: both codings, the ETag and the headers of each."""

    body: bytes
    gzipped: bytes
    etag: str
    headers: Mapping[str, str]
    gzip_headers: Mapping[str, str]
    not_modified_headers: Mapping[str, str]

    @property
    def size(self) -> int:
        return len(self.body) + len(self.gzipped) + 256


class Entry:
    """A cached package: its gated packument (None: no upstream knows it), a fingerprint of
    the private answer it was built from, and its renderings by (abbreviated, base URL)."""

    __slots__ = ("fingerprint", "gated", "pending", "renderings")

    def __init__(self, gated: Gated | None, fingerprint: bytes | None) -> None:
        self.gated = gated
        self.fingerprint = fingerprint
        self.renderings: dict[tuple[bool, str], Rendered] = {}
        self.pending: dict[tuple[bool, str], asyncio.Task[Rendered]] = {}


class Refused(Exception):  # noqa: N818 - an outcome carried to the response, not a bug
    """A request answered with a JSON error: the status, the sentence and extra fields."""

    def __init__(self, status: int, message: str, *, reason: str | None = None,
                 headers: Mapping[str, str] | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.headers = dict(headers or {})
        self.fields = fields


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _json(status: int, body: Mapping[str, Any],
          headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body),
                        headers={"Content-Type": "application/json", **(headers or {})})


def _etag_matches(header: str, etag: str) -> bool:
    bare = etag.removeprefix("W/")
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == bare:
            return True
    return False


def _accepts_gzip(header: str) -> bool:
    for part in header.split(",")[:32]:
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        key, _, value = params.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value.strip()) > 0
            except ValueError:
                return False
        return True
    return False


def _fingerprint(document: Mapping[str, Any] | None) -> bytes | None:
    if document is None:
        return None
    serialised = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(serialised, digest_size=16).digest()


def _build_rendered(gated: Gated, abbreviated: bool, base: str) -> Rendered:
    body = render(gated, abbreviated, base)
    etag = 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    headers = {"Content-Type": ABBREVIATED if abbreviated else FULL, "ETag": etag,
               "Vary": VARY}
    return Rendered(
        body=body,
        gzipped=gzip.compress(body, compresslevel=6, mtime=0),
        etag=etag,
        headers=headers,
        gzip_headers={**headers, "Content-Encoding": "gzip"},
        not_modified_headers={"ETag": etag, "Vary": VARY},
    )


def _decode_segment(segment: str, what: str) -> str:
    try:
        decoded = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise InvalidNameError(f"the {what} is not valid UTF-8 once decoded") from None
    if not decoded or len(decoded) > _SEGMENT_LIMIT:
        raise InvalidNameError(f"the {what} is empty or longer than {_SEGMENT_LIMIT} "
                               "characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c in "/\\%" for c in decoded):
        raise InvalidNameError(f"the {what} holds a slash, a backslash, a percent sign, a "
                               "space or a control character")
    return decoded


def parse_target(rest: str) -> Target:
    """The route an `/npm/` path (without the prefix and query) names; raises
    InvalidNameError with the reason when the name or a segment is refused."""
    if rest == "-/ping":
        return Target("ping")
    if not rest or rest.startswith("-/"):
        return Target("unknown")
    segments = rest.split("/")
    first = segments[0]
    if first.startswith("@") and "%2f" not in first.lower():
        if len(segments) < 2:
            raise InvalidNameError("a scoped name needs a package after the scope: @scope/name")
        raw_name, remainder = f"{first}/{segments[1]}", segments[2:]
    else:
        raw_name, remainder = first, segments[1:]
    name = parse_name(raw_name)
    if not remainder:
        return Target("packument", name)
    if len(remainder) == 1:
        return Target("version", name, _decode_segment(remainder[0], "version or tag"))
    if len(remainder) == 2 and remainder[0] == "-":
        return Target("tarball", name, _decode_segment(remainder[1], "tarball filename"))
    return Target("unknown")


class ProxyServer:
    """The request handlers and the state they share (cache, memo tables, counters)."""

    def __init__(self, proxy: Proxy, *, clock: Callable[[], float],
                 now: Callable[[], datetime]) -> None:
        self.proxy = proxy
        self.settings = proxy.settings
        self.metrics = proxy.metrics
        self._now = now
        self._cache_results: dict[str, Counter] = {}
        self.cache: PackumentCache[Entry] = PackumentCache(
            ttl=self.settings.cache_ttl,
            max_entries=self.settings.cache_max_entries,
            max_bytes=self.settings.cache_max_bytes,
            clock=clock,
            on_result=self._count_cache,
        )
        self._counters: dict[tuple[str, int | str], Counter] = {}
        self._targets: dict[str, Target] = {}
        self._accept: dict[str, bool] = {}
        self._encodings: dict[str, bool] = {}
        self._bases: dict[tuple[str | None, str | None, str | None, str], str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(3).hex()
        base = self.settings.public_url
        self._fixed_base = base if base is None or base.endswith("/") else base + "/"

    # --- bookkeeping -----------------------------------------------------------------------

    def _count(self, route: str, status: int | str) -> None:
        counter = self._counters.get((route, status))
        if counter is None:
            counter = self.metrics.requests.labels(route, str(status))
            self._counters[(route, status)] = counter
        counter.inc()

    def _count_cache(self, result: str) -> None:
        counter = self._cache_results.get(result)
        if counter is None:
            counter = self.metrics.cache.labels(result)
            self._cache_results[result] = counter
        counter.inc()

    def _refuse(self, reason: str) -> None:
        self.metrics.refusals.labels(reason).inc()

    @staticmethod
    def _memo(table: dict[str, Any], key: str, value: Any) -> None:
        if len(table) >= _MEMO_LIMIT:
            table.clear()
        table[key] = value

    def _abbreviated(self, request: web.Request) -> bool:
        accept = request.headers.get("Accept") or ""
        wanted = self._accept.get(accept)
        if wanted is None:
            wanted = wants_abbreviated(accept)
            self._memo(self._accept, accept, wanted)
        return wanted

    def _gzip(self, request: web.Request) -> bool:
        header = request.headers.get("Accept-Encoding") or ""
        accepted = self._encodings.get(header)
        if accepted is None:
            accepted = _accepts_gzip(header)
            self._memo(self._encodings, header, accepted)
        return accepted

    def _base(self, request: web.Request) -> str:
        """The proxy's base URL as the client sees it, ending in `/`."""
        if self._fixed_base is not None:
            return self._fixed_base
        headers = request.headers
        key = (headers.get("Host"), headers.get("X-Forwarded-Proto"),
               headers.get("X-Forwarded-Host"), request.scheme)
        base = self._bases.get(key)
        if base is not None:
            return base
        host_header, proto_header, forwarded_host, scheme = key
        proto = (proto_header or scheme or "http").split(",")[0].strip().lower()
        if proto not in ("http", "https"):
            self._refuse("bad_forwarded_header")
            raise Refused(400, f"X-Forwarded-Proto {proto_header!r} is not http or https")
        host = (forwarded_host or host_header or request.host).split(",")[0].strip()
        if _HOST.fullmatch(host) is None:
            self._refuse("bad_host_header")
            raise Refused(400, "the Host (or X-Forwarded-Host) header is not a host name; "
                          "tarball URLs are built from it")
        base = f"{proto}://{host}/"
        if len(self._bases) >= _MEMO_LIMIT:
            self._bases.clear()
        self._bases[key] = base
        return base

    def _request_id(self, request: web.Request) -> str:
        given = request.headers.get("X-Request-Id")
        if given is not None and _REQUEST_ID.fullmatch(given) is not None:
            return given
        return f"{self._id_prefix}-{next(self._ids)}"

    # --- dispatch --------------------------------------------------------------------------

    async def npm(self, request: web.Request) -> web.StreamResponse:
        """Every `/npm/...` request. The warm packument path returns before anything else."""
        raw = request.raw_path
        query = raw.find("?")
        rest = raw[len(PREFIX):query] if query >= 0 else raw[len(PREFIX):]
        target = self._targets.get(rest)
        if target is not None and target.route == "packument" and target.name is not None:
            slot = self.cache.fresh(target.name.full)
            if slot is not None:
                try:
                    key = (self._abbreviated(request), self._base(request))
                except Refused:
                    pass
                else:
                    rendered = slot.value.renderings.get(key)
                    if rendered is not None and request.method in ("GET", "HEAD"):
                        response = self._send(request, rendered)
                        self._count("packument", response.status)
                        return response
        return await self._slow(request, rest)

    def _send(self, request: web.Request, rendered: Rendered) -> web.Response:
        wanted = request.headers.get("If-None-Match")
        if wanted is not None and _etag_matches(wanted, rendered.etag):
            return web.Response(status=304, headers=rendered.not_modified_headers)
        if self._gzip(request):
            return web.Response(body=rendered.gzipped, headers=rendered.gzip_headers)
        return web.Response(body=rendered.body, headers=rendered.headers)

    async def _slow(self, request: web.Request, rest: str) -> web.StreamResponse:
        route: str = "unknown"
        request_id = self._request_id(request)
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                target = self._targets.get(rest)
                if target is None:
                    try:
                        target = parse_target(rest)
                    except InvalidNameError as error:
                        self._refuse("bad_name")
                        raise Refused(400, f"invalid package path: {error}",
                                      reason=str(error)) from None
                    self._memo(self._targets, rest, target)
                route = target.route
                if request.method not in ("GET", "HEAD"):
                    raise Refused(405, f"{request.method} is not supported: mirrorgate is a "
                                  "read-only npm registry proxy", headers={"Allow": "GET, HEAD"})
                response = await self._route(request, target)
            except Refused as refused:
                response = self._refusal(refused)
            except Exception:  # a bug must not take the listener down: log it, answer 500
                log.exception("request_failed", route=route, path=request.path[:300])
                response = _json(500, {"error": "mirrorgate failed to answer this request; "
                                       "the error is in its log",
                                       "request_id": request_id})
            self._count(route, response.get(OUTCOME, response.status))
            return response

    @staticmethod
    def _refusal(refused: Refused) -> web.Response:
        body: dict[str, Any] = {"error": refused.message}
        if refused.reason is not None:
            body["reason"] = refused.reason
        body.update(refused.fields)
        return _json(refused.status, body, refused.headers)

    async def _route(self, request: web.Request, target: Target) -> web.StreamResponse:
        if target.route == "ping":
            return _json(200, {})
        if target.route == "unknown" or target.name is None:
            raise Refused(404, f"no such route: {request.path[:200]}; npm clients use "
                          "--registry http://HOST:PORT/npm/")
        timeout = self.settings.request_timeout
        try:
            async with asyncio.timeout(timeout) as deadline:
                if target.route == "packument":
                    return await self._packument(request, target.name)
                if target.route == "version":
                    return await self._version(request, target.name, target.detail)
                return await self._tarball(request, target.name, target.detail, deadline)
        except TimeoutError:
            log.warning("request_timed_out", route=target.route, package=target.name.full,
                        timeout=timeout)
            raise Refused(504, f"mirrorgate could not answer within {timeout:g} s "
                          "(MIRRORGATE_REQUEST_TIMEOUT)") from None

    # --- packuments ------------------------------------------------------------------------

    def _upstream_refusal(self, error: UpstreamError, name: PackageName) -> Refused:
        status = error.client_status
        headers = {"Retry-After": error.retry_after or "30"} if status == 503 else None
        return Refused(status, f"the {error.label} upstream failed for {name.full}: "
                       f"{error}", headers=headers, upstream=error.label, kind=error.kind)

    async def _entry(self, name: PackageName) -> Slot[Entry]:
        try:
            return await self.cache.get(name.full, lambda previous: self._load(name, previous))
        except UpstreamError as error:
            raise self._upstream_refusal(error, name) from None
        except TooManyVersionsError as error:
            self._refuse("too_many_versions")
            log.warning("packument_refused", package=name.full, reason=str(error))
            raise Refused(502, str(error), reason="too many versions") from None

    async def _packument(self, request: web.Request, name: PackageName) -> web.StreamResponse:
        slot = await self._entry(name)
        gated = self._served(slot, name)
        key = (self._abbreviated(request), self._base(request))
        rendered = slot.value.renderings.get(key)
        if rendered is None:
            rendered = await self._render(slot, gated, key)
        return self._send(request, rendered)

    def _served(self, slot: Slot[Entry], name: PackageName) -> Gated:
        """The gated packument, or the 404/403 a client gets when nothing is installable."""
        gated = slot.value.gated
        if gated is None:
            raise Refused(404, f"{name.full} is not on the private or the public upstream",
                          reason="not found")
        if not gated.survivors:
            raise Refused(403, f"every version of {name.full} was denied by mirrorgate's "
                          f"admission rules: {gated.policy_message}",
                          reason=gated.policy_message, package=name.full)
        return gated

    async def _render(self, slot: Slot[Entry], gated: Gated,
                      key: tuple[bool, str]) -> Rendered:
        entry = slot.value
        task = entry.pending.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._render_into(slot, gated, key))
            entry.pending[key] = task
        return await asyncio.shield(task)

    async def _render_into(self, slot: Slot[Entry], gated: Gated,
                           key: tuple[bool, str]) -> Rendered:
        entry = slot.value
        try:
            if gated.size > THREAD_ABOVE:
                rendered = await asyncio.to_thread(_build_rendered, gated, *key)
            else:
                rendered = _build_rendered(gated, *key)
        finally:
            entry.pending.pop(key, None)
        entry.renderings[key] = rendered
        self.cache.grow(slot, rendered.size)
        return rendered

    async def _private_document(self, name: PackageName) -> tuple[dict[str, Any] | None,
                                                                   UpstreamError | None]:
        try:
            return await self.proxy.private.packument(name), None
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="private", package=name.full,
                        kind=error.kind, detail=str(error))
            return None, error
        except (StoreError, OSError) as error:
            log.warning("upstream_failed", upstream="private", package=name.full,
                        kind="store", detail=str(error))
            return None, UpstreamError("private", "unreachable", str(error))

    async def _public_answer(self, name: PackageName,
                             etag: str | None) -> JsonAnswer | UpstreamError:
        try:
            return await self.proxy.public.get_json(name.url_path(), etag=etag)
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="public", package=name.full,
                        kind=error.kind, detail=str(error))
            return error

    async def _load(self, name: PackageName, previous: Slot[Entry] | None) -> Loaded[Entry]:
        """Fetch both upstreams, then merge and gate; a 304 from public with an unchanged
        private answer keeps the previous entry (and its renderings)."""
        now = self._now()
        old = previous.value if previous is not None else None
        revalidate = (previous is not None and old is not None and old.gated is not None
                      and (old.gated.regate_at is None or now < old.gated.regate_at))
        etag = previous.validator if revalidate and previous is not None else None
        (private, private_error), public = await asyncio.gather(
            self._private_document(name), self._public_answer(name, etag))
        fingerprint = _fingerprint(private)
        if isinstance(public, JsonAnswer) and public.status == 304:
            if previous is not None and old is not None and old.fingerprint == fingerprint:
                return Loaded(old, previous.size, public.etag)
            public = await self._public_answer(name, None)
        public_error = public if isinstance(public, UpstreamError) else None
        answer = public if isinstance(public, JsonAnswer) else None
        public_doc = answer.document if answer is not None and answer.status == 200 else None
        degraded = private_error is not None or public_error is not None
        if private is None and public_doc is None:
            if degraded:
                raise public_error or private_error or UpstreamError(
                    "public", "unreachable", "no answer")
            return Loaded(Entry(None, None), 256)
        size = answer.size if answer is not None else 0
        arguments = (name, private, public_doc)
        if size > THREAD_ABOVE:
            gated = await asyncio.to_thread(self._gate, *arguments, now)
        else:
            gated = self._gate(*arguments, now)
        if not gated.survivors and degraded:
            raise public_error or private_error or UpstreamError(
                "public", "unreachable", "no answer")
        self._report_fill(gated)
        return Loaded(Entry(gated, fingerprint), gated.size + 256,
                      answer.etag if answer is not None else None,
                      fresh_for=DEGRADED_FRESH_FOR if degraded else None)

    def _gate(self, name: PackageName, private: Mapping[str, Any] | None,
              public: Mapping[str, Any] | None, now: datetime) -> Gated:
        return gate(name, private, public, rules=self.proxy.rules, now=now,
                    origin=self.proxy.public.origin)

    def _report_fill(self, gated: Gated) -> None:
        for rule, count in gated.denials.items():
            self.metrics.rule_denials.labels(rule).inc(count)
        for refusal in gated.refused_urls[:5]:
            log.warning("tarball_url_refused", package=gated.name.full,
                        version=refusal.version, kind=refusal.kind, reason=refusal.detail)
        if gated.refused_urls:
            self.metrics.refusals.labels("tarball_url").inc(len(gated.refused_urls))
        if len(gated.refused_urls) > 5:
            log.warning("tarball_urls_refused", package=gated.name.full,
                        count=len(gated.refused_urls))
        if gated.skipped:
            self.metrics.refusals.labels("bad_version_key").inc(gated.skipped)
            log.warning("packument_versions_skipped", package=gated.name.full,
                        count=gated.skipped, reason="version keys that are not plain version "
                        "strings, or manifests that are not objects")
        log.info("packument_filled", package=gated.name.full,
                 versions=len(gated.versions), denied=sum(gated.denials.values()))

    # --- one version -----------------------------------------------------------------------

    def _record(self, gated: Gated, wanted: str) -> VersionRecord:
        version = gated.resolve(wanted)
        record = gated.versions.get(version) if version is not None else None
        if record is None:
            raise Refused(404, f"{gated.name.full} has no version or dist-tag {wanted!r}",
                          reason="version not found")
        return record

    def _denied(self, name: PackageName, record: VersionRecord) -> Refused:
        denial = record.denial
        assert denial is not None
        return Refused(403, f"mirrorgate denied {name.full}@{record.version} by its "
                       f"{denial.rule} rule: {denial.reason}", reason=denial.reason,
                       rule=denial.rule, package=name.full, version=record.version)

    async def _version(self, request: web.Request, name: PackageName,
                       wanted: str) -> web.Response:
        slot = await self._entry(name)
        gated = slot.value.gated
        if gated is None:
            raise Refused(404, f"{name.full} is not on the private or the public upstream",
                          reason="not found")
        record = self._record(gated, wanted)
        if record.denial is not None:
            raise self._denied(name, record)
        body = version_document(record, self._base(request))
        return web.Response(body=body, headers={"Content-Type": FULL})

    # --- tarballs --------------------------------------------------------------------------

    async def _tarball(self, request: web.Request, name: PackageName, filename: str,
                       deadline: asyncio.Timeout) -> web.StreamResponse:
        try:
            version = version_from_filename(name, filename)
        except InvalidNameError as error:
            self._refuse("bad_tarball_filename")
            raise Refused(400, f"refused tarball path: {error}", reason=str(error)) from None
        head = request.method == "HEAD"
        private_error: UpstreamError | None = None
        try:
            async with self.proxy.private.tarball(name, filename) as body:
                if body is not None:
                    return await self._stream(request, body.size, body.chunks, deadline,
                                              source="private", name=name, version=version)
        except UpstreamError as error:
            private_error = error
            log.warning("upstream_failed", upstream="private", package=name.full,
                        version=version, kind=error.kind, detail=str(error))
        except (StoreError, OSError) as error:
            private_error = UpstreamError("private", "unreachable", str(error))
            log.warning("upstream_failed", upstream="private", package=name.full,
                        version=version, kind="store", detail=str(error))
        slot = await self._entry(name)
        gated = slot.value.gated
        record = gated.versions.get(version) if gated is not None else None
        if record is None:
            raise Refused(404, f"{name.full}@{version} is not on the private or the public "
                          "upstream", reason="not found")
        if record.denial is not None:
            log.info("tarball_denied", package=name.full, version=version,
                     rule=record.denial.rule, reason=record.denial.reason)
            raise self._denied(name, record)
        url = record.upstream_tarball
        if url is None:
            if private_error is not None:
                raise self._upstream_refusal(private_error, name)
            raise Refused(404, f"{name.full}@{version} is listed by the private upstream, "
                          "which did not serve its tarball", reason="not found")
        try:
            async with self.proxy.public.stream(url, method=request.method) as response:
                if response is None:
                    raise Refused(404, f"the public upstream has no tarball for "
                                  f"{name.full}@{version}", reason="not found")
                if not head and not record.private:
                    self._enqueue(name, record, url, response.content_length)
                chunks = response.content.iter_chunked(64 * 1024)
                return await self._stream(request, response.content_length, chunks, deadline,
                                          source="public", name=name, version=version)
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="public", package=name.full,
                        version=version, kind=error.kind, detail=str(error))
            raise self._upstream_refusal(error, name) from None

    async def _stream(self, request: web.Request, size: int | None,
                      chunks: AsyncIterator[bytes], deadline: asyncio.Timeout, *,
                      source: str, name: PackageName, version: str) -> web.StreamResponse:
        """Copy a tarball to the client as it arrives; abort the connection if the upstream
        breaks mid-body, so the client sees a failed transfer, not a short 200."""
        response = web.StreamResponse(headers={"Content-Type": OCTETS})
        if size is not None:
            response.content_length = size
        await response.prepare(request)
        deadline.reschedule(None)
        sent = 0
        if request.method != "HEAD":
            iterator = aiter(chunks)
            while True:
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                except (aiohttp.ClientError, TimeoutError, OSError, StoreError) as error:
                    log.warning("tarball_stream_failed", upstream=source, package=name.full,
                                version=version, sent=sent, detail=type(error).__name__)
                    self._abort(request)
                    response[OUTCOME] = "aborted"
                    return response
                try:
                    await response.write(chunk)
                except (ConnectionError, aiohttp.ClientConnectionResetError):
                    log.info("tarball_client_gone", package=name.full, version=version,
                             sent=sent)
                    response[OUTCOME] = "client_gone"
                    return response
                sent += len(chunk)
            await response.write_eof()
        log.info("tarball_served", upstream=source, package=name.full, version=version,
                 bytes=sent, head=request.method == "HEAD")
        return response

    @staticmethod
    def _abort(request: web.Request) -> None:
        transport = request.transport
        if transport is not None:
            transport.close()

    def _enqueue(self, name: PackageName, record: VersionRecord, url: str,
                 size: int | None) -> None:
        """Hand the admitted version to the queue in the background; never fails the
        response and never waits on the queue."""
        try:
            job = MirrorJob(
                name=name.full,
                version=record.version,
                artifact=MirrorArtifact(url, f"{name.bare}-{record.version}.tgz", size,
                                        record.digests),
                manifest=record.manifest(None),
            )
        except ValueError as error:
            log.warning("job_not_enqueued", package=name.full, version=record.version,
                        reason=str(error))
            return
        task = asyncio.get_running_loop().create_task(self._send_job(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_job(self, job: MirrorJob) -> None:
        try:
            await self.proxy.queue.enqueue(job)
        except Exception as error:  # the queue promised not to raise; a bug is logged
            log.error("enqueue_failed", package=job.name, version=job.version,
                      reason=f"{type(error).__name__}: {error}")
            return
        self.metrics.enqueued.inc()
        log.info("job_enqueued", package=job.name, version=job.version,
                 queue=self.proxy.queue.provider)

    async def drain(self) -> None:
        """Wait for the background enqueues still running (at application cleanup)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- everything else -------------------------------------------------------------------

    async def unknown(self, request: web.Request) -> web.Response:
        self._count("unknown", 404)
        return _json(404, {"error": f"no such route: {request.path[:200]}; npm clients use "
                           "--registry http://HOST:PORT/npm/"})


SERVER = web.AppKey("mirrorgate_proxy_server", ProxyServer)


def build_proxy_app(
    proxy: Proxy,
    *,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], datetime] = _utcnow,
) -> web.Application:
    """The aiohttp application serving `/npm/` and the health routes at the root.

    `clock` (monotonic seconds, for the cache) and `now` (wall time, for release-age rules)
    are injectable so tests move time instead of sleeping.
    """
    server = ProxyServer(proxy, clock=clock, now=now)
    app = web.Application()
    app[SERVER] = server
    add_health_routes(app, proxy.health, proxy.metrics)
    # [\s\S]: the router matches the decoded path, and `.` would not match a %0a in it.
    app.router.add_route("*", PREFIX + r"{tail:[\s\S]*}", server.npm)
    app.router.add_route("*", r"/{tail:[\s\S]*}", server.unknown)

    async def drain_enqueues(_app: web.Application) -> AsyncIterator[None]:
        yield
        await server.drain()

    app.cleanup_ctx.append(drain_enqueues)
    return app

