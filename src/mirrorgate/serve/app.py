"""The proxy application: the npm registry protocol under `/npm/`, and its warm path.

A warm packument (cached within its TTL, already rendered for the request's form and base URL)
is answered before anything else runs; everything else takes the slow path, with a request id,
a deadline, an admission slot and refusals answered as JSON.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from aiohttp import web
from prometheus_client import Counter

from mirrorgate import tracing
from mirrorgate.config import Settings
from mirrorgate.gate import (
    Cached,
    FirstPartyNames,
    Gated,
    PackumentCache,
    PackumentEntry,
    Packuments,
    PackumentSource,
    Rendered,
    RenderKey,
    TooManyVersionsError,
)
from mirrorgate.gate.entry import MAX_BASES, build_rendered, rendered_body
from mirrorgate.gate.exposure import Exposure, exposures
from mirrorgate.gate.facts import KeptFacts
from mirrorgate.gate.packuments import PINS
from mirrorgate.gate.pulllog import PullLog
from mirrorgate.gate.release import ReleaseJudge
from mirrorgate.gate.withdrawals import WithdrawnVersions
from mirrorgate.handoff import Handoff
from mirrorgate.healthz import Health, add_health_routes
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorQueue
from mirrorgate.npm.names import InvalidNameError, PackageName
from mirrorgate.npm.negotiation import (
    BadBaseError,
    BaseUrls,
    Memo,
    accepts_gzip,
    etag_matches,
    vary,
    wants_abbreviated,
)
from mirrorgate.npm.packument import FULL, on_base
from mirrorgate.npm.paths import (
    POST_ROUTES,
    RegistryPath,
    Route,
    looks_like_registry_path,
    parse_registry_path,
    parse_write_target,
)
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules import LiveRules, Rules
from mirrorgate.rules.wayout import exception_how
from mirrorgate.serve.access import install_access, whoami
from mirrorgate.serve.audit import AuditRoute
from mirrorgate.serve.listener import ClientBounds, SendFloor
from mirrorgate.serve.overload import Admission
from mirrorgate.serve.publishing import PublishRoute
from mirrorgate.serve.refusals import (
    Refused,
    denied,
    json_response,
    not_mirrored,
    reads_body,
)
from mirrorgate.serve.relay import OUTCOME, Relay
from mirrorgate.serve.search import Search
from mirrorgate.serve.spool import SPOOL_DIR, Spools
from mirrorgate.serve.tarballs import TarballRoute
from mirrorgate.serve.tokens import ClientTokens
from mirrorgate.serve.traced import request_spans
from mirrorgate.serve.ui import add_ui_routes
from mirrorgate.serve.ui.stored import stored_counts_for
from mirrorgate.store import StoreUnavailableError
from mirrorgate.upstream.client import Upstream, UpstreamError
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["SERVER", "Proxy", "ProxyServer", "build_proxy_app"]

log = structlog.get_logger("mirrorgate.serve")

PREFIX = "/npm/"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class Proxy:
    """Everything the proxy uses, built and started by the process (`mirrorgate serve`)."""

    settings: Settings
    public: Upstream
    private: PrivateRegistry
    queue: MirrorQueue
    rules: Rules | LiveRules
    """The rules in force: re-read from the rules file as it changes (`rules.live`)."""
    metrics: Metrics
    health: Health
    clients: ClientTokens | None = None
    """The client tokens in force; None leaves the proxy open (see `access`)."""
    worker_beside: bool = False
    """A worker runs in this process and judges its jobs by this cache's records: the record
    of each version enqueued is kept for its job (`Packuments.pin`)."""
    handoff: Handoff | None = None
    """A worker runs in this process: the public tarballs relayed and verified are handed to
    it with their jobs, so it need not download them again (`handoff`)."""
    facts: KeptFacts | None = None
    """What the gate must not forget, kept in the state store (`gate.facts`); None: this
    process's memory only."""
    pulls: PullLog | None = None
    """The pull log (`gate.pulllog`): who pulled which tarball; None: not kept."""


def _pulled_by(pulls: PullLog) -> Callable[[str], Awaitable[list[Exposure] | None]]:
    """The package view's "who pulled it": read from the store (a person's page, never the
    warm path), this process's last second of pulls written first."""
    async def pulled(name: str) -> list[Exposure] | None:
        store = pulls.facts.store
        if not pulls.enabled or store is None:
            return None
        try:
            await pulls.flush()
            served, _ = exposures(await store.pulls(name=name, limit=100_000))
        except StoreUnavailableError:
            return None
        return served
    return pulled


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _parse_or_error(rest: str) -> RegistryPath | InvalidNameError:
    try:
        return parse_registry_path(rest)
    except InvalidNameError as error:
        return error


WRITE_METHODS = frozenset({"PUT", "DELETE"})
"""What npm's writes use (`publishing`); any other method but GET, HEAD and audit's POST is 405."""

PACKAGE_MISSES = frozenset({"not found", "version not found", "no versions"})
"""Refusal reasons that only mean "no such package or version": ordinary, not logged."""


def _logged_path(request: web.Request) -> str:
    """The path as the client sent it (still percent-encoded), without the query string."""
    return request.raw_path.split("?", 1)[0][:200]


def _logged_refusal(route: str, refused: Refused) -> bool:
    """Every 4xx gets one log line, except a package miss and a denied tarball (already
    logged as `tarball_denied`)."""
    if not 400 <= refused.status < 500 or route == "write":  # writes log `publish_refused`
        return False
    if refused.status == 404 and refused.reason in PACKAGE_MISSES:
        return False
    return not (route == "tarball" and refused.status == 403)


class ProxyServer:
    """The request handlers and the state they share: the cache, memo tables, counters."""

    def __init__(self, proxy: Proxy, *, clock: Callable[[], float],
                 now: Callable[[], datetime]) -> None:
        self.proxy = proxy
        self.clock = clock
        self.settings: Settings = proxy.settings
        self.metrics = proxy.metrics
        self._counters: dict[tuple[str, int | str], Counter] = {}
        self._cache_results: dict[str, Counter] = {}
        # chosen once: with tracing off a cache lookup costs exactly what it did
        count_cache = self._count_cache_traced if tracing.enabled() else self._count_cache
        self.keys = RegistryKeys(proxy.public, clock=clock, metrics=proxy.metrics)
        facts = proxy.facts if proxy.facts is not None else KeptFacts()
        self.facts = facts
        self.release = ReleaseJudge(
            rules=proxy.rules, public=proxy.public, metrics=proxy.metrics,
            packument=self._gated_or_none, now=now, facts=facts,
            previous_max_bytes=self.settings.release_previous_max_bytes,
            timeout=self.settings.release_timeout,
            forget=lambda name: self.packuments.forget(name))
        self.packuments = Packuments(
            PackumentSource(
                private=proxy.private, public=proxy.public, rules=proxy.rules,
                metrics=proxy.metrics, now=now, keys=self.keys,
                first_party=FirstPartyNames(facts), withdrawals=WithdrawnVersions(facts),
                refused=self.release.refused_versions),
            PackumentCache(ttl=self.settings.cache_ttl,
                           max_entries=self.settings.cache_max_entries,
                           max_bytes=self.settings.cache_max_bytes,
                           clock=clock, on_result=count_cache),
            clock, pins=PINS if proxy.worker_beside else 0)
        self.relay = Relay(Spools(self.settings.data_dir / SPOOL_DIR,
                                  self.settings.spool_max_bytes),
                           proxy.metrics, self._send_floor)
        self.tarballs = TarballRoute(private=proxy.private, public=proxy.public,
                                     queue=proxy.queue, metrics=proxy.metrics,
                                     relay=self.relay, packument=self._gated_or_none,
                                     private_answered=self.packuments.private_answered,
                                     for_tarball=self._for_tarball,
                                     handoff=proxy.handoff,
                                     on_enqueued=(self.packuments.pin if proxy.worker_beside
                                                  else None),
                                     clock=clock, release=self.release,
                                     contact=self.settings.operator_contact,
                                     pulls=proxy.pulls)
        self.audit = AuditRoute(proxy.rules, proxy.metrics)
        self.search = Search(proxy.public, self._gated_or_none, self._cached_or_false,
                             ttl=self.settings.cache_ttl, clock=clock)
        self.publishing = PublishRoute(
            settings=self.settings, rules=proxy.rules, private=proxy.private,
            public=proxy.public, first_party=self.packuments.source.first_party,
            forget=self.packuments.forget, metrics=proxy.metrics)
        self.admission = Admission(self.settings.max_in_flight, proxy.metrics)
        self._floor = ClientBounds(
            head_timeout=self.settings.head_timeout,
            write_stall_timeout=self.settings.write_stall_timeout,
            on_cut=lambda reason: proxy.metrics.slow_clients.labels(reason).inc(),
            min_rate=self.settings.send_min_rate,
            min_rate_grace=self.settings.send_min_rate_grace)
        self._targets: Memo[str, RegistryPath | InvalidNameError] = Memo(_parse_or_error)
        self._abbreviated: Memo[str, bool] = Memo(wants_abbreviated)
        self._gzip: Memo[str, bool] = Memo(accepts_gzip)
        self._bases = BaseUrls(self.settings.public_url, self.settings.trusted_proxies)
        self._vary = vary(fixed_base=self._bases.fixed is not None,
                          trusted_proxies=self._bases.trusts_proxies,
                          authenticated=proxy.clients is not None)
        self._kept_bases: dict[str, None] = {}
        self._rendering_once = asyncio.Semaphore(1)
        self._unknown_bases_seen = 0
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(3).hex()

    # --- bookkeeping -----------------------------------------------------------------------

    def footer(self, name: PackageName) -> str:
        """The last line of a packument's `policyRestrictions` message: how to get an
        exception (MIRRORGATE_OPERATOR_CONTACT is the proxy's, not the gate's)."""
        return exception_how(name.full, None, self.settings.operator_contact)

    def _count(self, route: str, status: int | str) -> None:
        """Count every request by fixed route label and status (`mirrorgate_requests_total`)."""
        counter = self._counters.get((route, status))
        if counter is None:
            counter = self._counters[(route, status)] = self.metrics.requests.labels(
                route, str(status))
        counter.inc()

    def _count_cache(self, result: str) -> None:
        counter = self._cache_results.get(result)
        if counter is None:
            counter = self._cache_results[result] = self.metrics.cache.labels(result)
        counter.inc()

    def _count_cache_traced(self, result: str) -> None:
        self._count_cache(result)
        tracing.annotate({"mirrorgate.cache": result})

    def describe(self, request: web.Request) -> RegistryPath | InvalidNameError:
        """The request's route and package as `npm` reads them (the same memo), for its span."""
        raw = request.raw_path
        query = raw.find("?")
        return self._targets(raw[len(PREFIX):query] if query >= 0 else raw[len(PREFIX):])

    def _key(self, request: web.Request) -> RenderKey:
        """(abbreviated, base URL) for a request; raises BadBaseError for hostile headers."""
        return self._abbreviated(request.headers.get("Accept") or ""), self._base(request)

    def _base(self, request: web.Request) -> str:
        base = self._bases.fixed
        if base is None:
            # the peer only matters when some proxies are trusted: skip the lookup otherwise
            peer = request.remote if self._bases.trusts_proxies else None
            base = self._bases(request.headers, request.scheme, request.host, peer)
        return base

    def over_tls(self, request: web.Request) -> bool:
        """Whether the client reached mirrorgate over TLS: this connection's own, or the scheme
        it sees (MIRRORGATE_PUBLIC_URL, or a trusted proxy's X-Forwarded-Proto/Forwarded)."""
        if request.secure:
            return True
        try:
            return self._base(request).startswith("https://")
        except BadBaseError:
            return False

    def _request_id(self, request: web.Request) -> str:
        given = request.headers.get("X-Request-Id")
        if given is not None and _REQUEST_ID.fullmatch(given) is not None:
            return given
        return f"{self._id_prefix}-{next(self._ids)}"

    # --- dispatch --------------------------------------------------------------------------

    async def npm(self, request: web.Request) -> web.StreamResponse:
        """Every `/npm/...` request; a warm packument returns before anything else runs.

        The warm path is a memoised parse of the path, a cache lookup within the TTL, and the
        bytes rendered for (form, base URL), plain or gzip'd, or a 304. Merging, gating,
        rendering and compressing happen once per cache fill (`fill`, `rendered`), never per
        request, and the warm path takes no admission slot, so it is never shed."""
        raw = request.raw_path
        query = raw.find("?")
        rest = raw[len(PREFIX):query] if query >= 0 else raw[len(PREFIX):]
        target = self._targets(rest)
        if (isinstance(target, RegistryPath) and target.route == "packument"
                and target.name is not None and request.method in ("GET", "HEAD")
                and (query < 0 or "write=" not in raw[query:])):  # ?write=true: publishing
            slot = self.packuments.fresh(target.name)
            if slot is not None:
                try:
                    rendered = slot.value.renderings.get(self._key(request))
                except BadBaseError:
                    rendered = None
                if rendered is not None:
                    response = self._send(request, rendered)
                    self._count("packument", response.status)
                    return response
        return await self._slow(request, target)

    def _send(self, request: web.Request, rendered: Rendered) -> web.Response:
        wanted = request.headers.get("If-None-Match")
        if wanted is not None and rendered.etag and etag_matches(wanted, rendered.etag):
            return web.Response(status=304, headers=rendered.not_modified_headers)
        if rendered.gzipped and self._gzip(request.headers.get("Accept-Encoding") or ""):
            return web.Response(body=rendered.gzipped, headers=rendered.gzip_headers)
        return web.Response(body=rendered.body, headers=rendered.headers)

    async def _slow(self, request: web.Request,
                    target: RegistryPath | InvalidNameError) -> web.StreamResponse:
        """Everything but a warm packument: a request id bound to the log context, refusals
        turned into JSON answers, and any unexpected error logged and answered 500, never
        raised."""
        writing = request.method in WRITE_METHODS
        route: Route = target.route if isinstance(target, RegistryPath) else "unknown"
        route = "write" if writing else route
        request_id = self._request_id(request)
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            response: web.StreamResponse
            try:
                if writing:
                    response = await self._write(request)
                elif isinstance(target, InvalidNameError):
                    self.metrics.refusals.labels("bad_name").inc()
                    raise Refused(400, f"invalid package path: {target}", reason=str(target))
                elif route in POST_ROUTES:
                    if request.method != "POST":
                        raise Refused(405, f"{request.method} is not supported here: npm audit "
                                      "POSTs to this endpoint", reason="post only",
                                      headers={"Allow": "POST"})
                    handler = self.audit.bulk if route == "audit" else self.audit.quick
                    response = await handler(request)
                elif request.method not in ("GET", "HEAD"):
                    raise Refused(405, f"{request.method} is not supported: mirrorgate reads "
                                  "with GET and HEAD, and takes npm's writes (publish, "
                                  "unpublish, deprecate, dist-tag) as PUT and DELETE",
                                  reason="method not allowed",
                                  headers={"Allow": "GET, HEAD, PUT, DELETE"})
                else:
                    response = await self._route(request, target)
            except Refused as refused:
                response = refused.response(reads_body(request.headers.get("User-Agent", "")))
                if _logged_refusal(route, refused):
                    log.info("request_refused", route=route, status=refused.status,
                             path=_logged_path(request), reason=refused.reason)
            except BadBaseError as error:
                self.metrics.refusals.labels(error.label).inc()
                log.info("request_refused", route=route, status=400,
                         path=_logged_path(request), reason=error.label)
                response = Refused(400, str(error)).response()
            except Exception:  # a bug must not take the listener down: log it, answer 500
                log.exception("request_failed", route=route, path=request.path[:300])
                response = json_response(500, {
                    "error": "mirrorgate failed to answer this request; the error is in its "
                             "log", "request_id": request_id})
            self._count(route, response.get(OUTCOME, response.status))
            return response

    async def _write(self, request: web.Request) -> web.StreamResponse:
        """PUT and DELETE: npm's writes, which `publishing` checks and forwards."""
        rest = request.raw_path[len(PREFIX):].split("?", 1)[0]
        try:
            target = parse_write_target(rest, request.method)
        except InvalidNameError as error:
            self.metrics.refusals.labels("bad_name").inc()
            raise Refused(400, f"invalid package path: {error}", reason=str(error)) from None
        if target is None:
            raise Refused(405, f"{request.method} is not a write npm sends to this path; "
                          "mirrorgate takes npm publish, unpublish, deprecate and dist-tag",
                          reason="method not allowed", headers={"Allow": "GET, HEAD"})
        return await self.publishing.write(request, target)

    async def _route(self, request: web.Request, target: RegistryPath) -> web.StreamResponse:
        if target.route == "ping":
            return json_response(200, {})
        if target.route == "whoami":
            return whoami(request)
        if target.route == "keys":
            return await self._keys()
        name = target.name
        if target.route == "unknown" or (name is None and target.route != "search"):
            # the client found /npm/, so its registry URL is right: no hint about it here
            raise Refused(404, f"no such route: {request.path[:200]}; under /npm/ mirrorgate "
                          "serves packuments, versions, tarballs, dist-tags, search and audit",
                          reason="no such route")
        limit = self.settings.request_timeout
        # upstream work first takes an admission slot (`overload`: 503 past
        # MIRRORGATE_MAX_IN_FLIGHT), then runs within MIRRORGATE_REQUEST_TIMEOUT (504 JSON)
        try:
            async with self.admission.slot(target.route) as slot, \
                    asyncio.timeout(limit) as deadline:
                if name is None:  # the search route, the only one without a package name
                    return json_response(200, await self.search(request.query))
                if target.route == "packument":
                    if request.query.get("write") == "true":  # npm, before a change
                        return await self.publishing.write_packument(
                            request, name, self._key(request)[1])
                    return await self._packument(request, name)
                if target.route == "version":
                    return await self._version(request, name, target.detail)
                if target.route == "dist-tags":
                    return await self._dist_tags(name)
                return await self.tarballs(request, name, target.detail, deadline, slot)
        except TimeoutError:
            log.warning("request_timed_out", route=target.route,
                        package=name.full if name is not None else None, timeout=limit)
            raise Refused(504, f"mirrorgate could not answer within {limit:g} s "
                          "(MIRRORGATE_REQUEST_TIMEOUT)") from None

    def _send_floor(self, request: web.Request) -> SendFloor:
        """The minimum rate a tarball response is held to (MIRRORGATE_SEND_MIN_RATE)."""
        # any loop's stream transport: uvloop's is not an asyncio.Transport subclass (an
        # isinstance check here left every tarball on uvloop without its rate floor)
        return SendFloor(request.transport, self._floor)

    async def _keys(self) -> web.Response:
        """The public registry's signing keys, as it serves them: npm checks the
        `dist.signatures` mirrorgate keeps in served versions against these."""
        document = await self.keys.document()
        if document is None:
            raise Refused(503, "the public registry's signing keys are not available yet; "
                          "try again shortly", reason="keys unavailable",
                          headers={"Retry-After": "30"})
        return web.Response(body=document, content_type="application/json")

    # --- packuments ------------------------------------------------------------------------

    async def _entry(self, name: PackageName) -> Cached[PackumentEntry]:
        try:
            return await self.packuments.entry(name)
        except UpstreamError as error:
            raise not_mirrored(error, name) from None
        except TooManyVersionsError as error:
            self.metrics.refusals.labels("too_many_versions").inc()
            log.warning("packument_refused", package=name.full, reason=str(error))
            raise Refused(502, str(error), reason="too many versions") from None

    async def _gated_or_none(self, name: PackageName) -> Gated | None:
        return (await self._entry(name)).value.gated

    async def _for_tarball(self, name: PackageName, version: str) -> Gated | None:
        """`Packuments.for_tarball`, its failures answered as `_entry`'s are."""
        try:
            return await self.packuments.for_tarball(name, version)
        except (UpstreamError, TooManyVersionsError):
            return await self._gated_or_none(name)  # the whole fill's answer, and its refusal

    def _cached_or_false(self, name: PackageName) -> Gated | bool | None:
        """The fresh cached packument of `name` (None: no upstream has it), False when none
        is cached; never fills."""
        slot = self.packuments.fresh(name)
        return False if slot is None else slot.value.gated

    async def _packument(self, request: web.Request, name: PackageName) -> web.Response:
        slot = await self._entry(name)
        gated = slot.value.gated
        if gated is None:
            raise Refused(404, f"{name.full} is not on the private or the public upstream",
                          reason="not found")
        if not gated.survivors and gated.policy_message is None:
            # nothing was denied, so there was nothing to gate: unpublished, or only
            # version keys that were skipped as unreadable
            raise Refused(404, f"{name.full} has no versions on the private or the public "
                          "upstream", reason="no versions", package=name.full)
        if not gated.survivors:
            raise Refused(403, f"every version of {name.full} was denied by mirrorgate's "
                          f"admission rules: {gated.policy_message}\n{self.footer(name)}",
                          reason=gated.policy_message, package=name.full)
        key = self._key(request)
        rendered = slot.value.renderings.get(key)
        if rendered is None and self._known_base(key[1]):
            rendered = await self._render(slot, gated, key)
        elif rendered is None:
            gzipped = self._gzip(request.headers.get("Accept-Encoding") or "")
            rendered = await self._render_once(slot, gated, key, gzipped)
        return self._send(request, rendered)

    def _known_base(self, base: str) -> bool:
        """Whether renderings for `base` are kept: MIRRORGATE_PUBLIC_URL's, or one of the first
        `MAX_BASES` the process was asked for. A deployment is reached by a few names; a
        client inventing `Host` values must not spend the CPU of a rendering per value, nor
        push out the renderings other clients' warm hits are answered from."""
        if base in self._kept_bases:
            return True
        if len(self._kept_bases) < MAX_BASES:
            self._kept_bases[base] = None
            return True
        return False

    async def _render_once(self, slot: Cached[PackumentEntry], gated: Gated,
                           key: RenderKey, gzipped: bool) -> Rendered:
        """A rendering for a base whose renderings are not kept: the entry's bytes on the
        placeholder (made once per form) with the base put in, uncompressed, one at a time
        under the request's admission slot, then dropped."""
        if not self._unknown_bases_seen:
            log.warning("unknown_base_rendered", base=key[1][:200], kept=list(self._kept_bases),
                        hint="set MIRRORGATE_PUBLIC_URL to the URL clients use")
        self._unknown_bases_seen += 1
        self.metrics.unkept_renderings.inc()
        abbreviated, base = key
        entry = slot.value
        async with self._rendering_once:
            unplaced = entry.unplaced.get(abbreviated)
            if unplaced is None:
                unplaced = await in_thread_if_large(gated.size, gated.render, abbreviated, None,
                                                    self.footer(gated.name))
                entry.unplaced[abbreviated] = unplaced
                self.packuments.cache.grow(slot, len(unplaced))
            return await in_thread_if_large(len(unplaced), _placed, unplaced, abbreviated, base,
                                            self._vary, gzipped)

    async def _render(self, slot: Cached[PackumentEntry], gated: Gated, key: RenderKey) -> Rendered:
        """Render once per key, however many requests ask at the same time."""
        entry = slot.value
        task = entry.pending.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._render_into(slot, gated, key))
            entry.pending[key] = task
        return await asyncio.shield(task)

    async def _render_into(self, slot: Cached[PackumentEntry], gated: Gated,
                           key: RenderKey) -> Rendered:
        entry = slot.value
        try:
            rendered = await in_thread_if_large(gated.size, build_rendered, gated, *key,
                                                self._vary, self.footer(gated.name))
        finally:
            entry.pending.pop(key, None)
        self.packuments.cache.grow(slot, entry.keep(key, rendered))
        return rendered

    async def _version(self, request: web.Request, name: PackageName,
                       wanted: str) -> web.Response:
        gated = await self._gated_or_none(name)
        if gated is None:
            raise Refused(404, f"{name.full} is not on the private or the public upstream",
                          reason="not found")
        version = gated.resolve(wanted)
        record = gated.versions.get(version) if version is not None else None
        if record is None and isinstance(gated.public_failure, UpstreamError):
            raise not_mirrored(gated.public_failure, name, wanted)
        if record is None:
            raise Refused(404, f"{name.full} has no version or dist-tag {wanted!r}",
                          reason="version not found")
        if record.denial is not None:
            raise denied(name, record, gated.survivors, self.settings.operator_contact)
        body = record.document(self._key(request)[1])
        return web.Response(body=body, headers={"Content-Type": FULL, "Vary": self._vary})

    async def _dist_tags(self, name: PackageName) -> web.Response:
        """`npm dist-tag ls`: the tags of the packument served, so never a denied version."""
        gated = await self._gated_or_none(name)
        if gated is None or not gated.survivors:
            raise Refused(404, f"{name.full} has no admitted versions on the private or the "
                          "public upstream", reason="not found")
        return json_response(200, gated.dist_tags)

    # --- everything else -------------------------------------------------------------------

    async def unknown(self, request: web.Request) -> web.Response:
        path = request.path[:200]
        if looks_like_registry_path(request.raw_path.lstrip("/").split("?", 1)[0]):
            body = {"error": f"no such route: {path}; mirrorgate serves the npm registry under "
                    "/npm/: point the client at http://HOST:PORT/npm/ (npm: --registry, yarn "
                    "4: npmRegistryServer, bun: [install] registry)",
                    "reason": "no such route: the registry URL lacks /npm/"}
        else:
            body = {"error": f"no such route: {path}", "reason": "no such route"}
        log.info("request_refused", route="unknown", status=404, path=_logged_path(request),
                 reason=body["reason"])
        self._count("unknown", 404)
        return json_response(404, body)


def _placed(unplaced: bytes, abbreviated: bool, base: str, vary: str,
            gzipped: bool) -> Rendered:
    return rendered_body(on_base(unplaced, base), abbreviated, vary, kept=False,
                         gzipped=gzipped)


SERVER = web.AppKey("mirrorgate_proxy_server", ProxyServer)


def build_proxy_app(
    proxy: Proxy,
    *,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], datetime] = _utcnow,
) -> web.Application:
    """The aiohttp application serving `/npm/` and the health routes at the root.

    Routes, GET and HEAD: `/npm/<name>` (the packument; scoped as `@s%2fn`, `@s%2Fn` or
    `@s/n`), `/npm/<name>/<version or dist-tag>`, `/npm/<name>/-/<file>.tgz`,
    `/npm/-/package/<name>/dist-tags`, `/npm/-/v1/search` (`search`), `/npm/-/ping`,
    `/npm/-/whoami`, and `/livez`, `/readyz`, `/metrics` at the root, where no package name
    can shadow them; POST only to npm audit's endpoints (`audit`). Anything else is a JSON
    404, a write a JSON 405. Who may ask is `access`'s business (a middleware).

    `clock` (monotonic seconds, for the cache) and `now` (wall time, for release-age rules)
    are injectable so tests move time instead of sleeping.
    """
    server = ProxyServer(proxy, clock=clock, now=now)
    app = web.Application()
    app[SERVER] = server
    if tracing.enabled():  # outermost, so a refused token's 401 is traced too
        app.middlewares.append(request_spans(server.describe, OUTCOME))
    add_health_routes(app, proxy.health, proxy.metrics)
    install_access(app, proxy.clients, metrics=proxy.metrics,
                   metrics_open=proxy.settings.metrics_open, oidc=proxy.settings.oidc)
    # [\s\S]: the router matches the decoded path, and `.` would not match a %0a in it.
    app.router.add_route("*", PREFIX + r"{tail:[\s\S]*}", server.npm)
    add_ui_routes(app, metrics=proxy.metrics, rules=proxy.rules, health=proxy.health,
                  packument=server._gated_or_none, over_tls=server.over_tls,
                  base=server._base, stored=stored_counts_for(proxy.settings.mirror_target),
                  worker_beside=proxy.worker_beside, facts=server.facts,
                  waiver_granters=proxy.settings.waiver_granters,
                  pulled=_pulled_by(proxy.pulls) if proxy.pulls is not None else None)
    app.router.add_route("*", r"/{tail:[\s\S]*}", server.unknown)

    async def drain_enqueues(_app: web.Application) -> AsyncIterator[None]:
        yield
        await server.tarballs.drain()
        await server.relay.close()
        await server.keys.close()

    app.cleanup_ctx.append(drain_enqueues)
    return app
