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
from typing import Literal, NamedTuple

import structlog
from aiohttp import web
from aiohttp.http_parser import RawRequestMessage
from multidict import CIMultiDictProxy
from prometheus_client import Counter

from mirrorgate import tracing
from mirrorgate.access.operators import Operators
from mirrorgate.access.tokens import ClientTokens
from mirrorgate.config import ServeSettings
from mirrorgate.gate import (
    RenderKey,
)
from mirrorgate.gate.assembled import Gate
from mirrorgate.gate.pulls.exposure import Exposure
from mirrorgate.gate.pulls.log import PullLog
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
    vary,
    wants_abbreviated,
)
from mirrorgate.npm.paths import (
    POST_ROUTES,
    RegistryPath,
    Route,
    looks_like_registry_path,
    parse_registry_path,
    parse_write_target,
)
from mirrorgate.rules import LiveRules, Rules
from mirrorgate.serve.access import CLIENT, install_access, policy_of, whoami
from mirrorgate.serve.audit import AuditRoute
from mirrorgate.serve.listener import ClientBounds, SendFloor
from mirrorgate.serve.mirroring import MirrorJobs
from mirrorgate.serve.overload import Admission
from mirrorgate.serve.packuments import PackumentRoute
from mirrorgate.serve.publishing import PublishRoute
from mirrorgate.serve.refusals import (
    Refused,
    json_response,
    reads_body,
)
from mirrorgate.serve.relay import OUTCOME, Relay
from mirrorgate.serve.search import Search
from mirrorgate.serve.spool import SPOOL_DIR, Spools
from mirrorgate.serve.tarballs import REQUEST_ID, TarballRoute
from mirrorgate.serve.traced import request_spans
from mirrorgate.serve.ui import add_ui_routes
from mirrorgate.serve.ui.readers import PullReaders
from mirrorgate.serve.ui.stored import stored_counts_for, with_state_store
from mirrorgate.serve.warm import WarmAnswer, kind_of, raw_message
from mirrorgate.store import StoreUnavailableError
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["SERVER", "Proxy", "ProxyServer", "answer_warm_first", "build_proxy_app"]

log = structlog.get_logger("mirrorgate.serve")

PREFIX = "/npm/"
_clock = time.perf_counter
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_READS = frozenset({"GET", "HEAD"})
_READ_MEMO_BYTES = 512
"""The raw path, Accept, Accept-Encoding and Host together longer than this are read without
the memo."""

ReadKey = tuple[str, str, str, str, str]
"""The raw path, Accept, Accept-Encoding, Host and scheme: what a warm answer depends on."""


class WarmRead(NamedTuple):
    """What a packument GET reads: the package, the rendering's key, whether it takes gzip."""

    name: PackageName
    key: RenderKey
    gzip: bool


@dataclass(frozen=True)
class Proxy:
    """Everything the proxy uses, built and started by the process (`mirrorgate serve`)."""

    settings: ServeSettings
    public: Upstream
    private: PrivateRegistry
    queue: MirrorQueue
    rules: Rules | LiveRules
    """The rules in force: re-read from the rules file as it changes (`rules.live`)."""
    metrics: Metrics
    health: Health
    gate: Gate
    """The process's gate (`gate.Gate`): packuments, verdicts and what they remember."""
    clients: ClientTokens | None = None
    """The client tokens in force; None leaves the proxy open (see `access`)."""
    worker_beside: bool = False
    """A worker runs in this process and judges its jobs by this cache's records: the record
    of each version enqueued is kept for its job (`Packuments.pin`)."""
    handoff: Handoff | None = None
    """A worker runs in this process: the public tarballs relayed and verified are handed to
    it with their jobs, so it need not download them again (`handoff`)."""
    pulls: PullLog | None = None
    """The pull log (`gate.pulls.log`): who pulled which tarball; None: not kept."""


PULLERS_READ = 100_000
"""(client, version) rows of one name the package view reads; it shows the first 200."""


def _pulled_by(pulls: PullLog) -> Callable[[str, str | None], Awaitable[list[Exposure] | None]]:
    """The package view's "who pulled it": read from the store (a person's page, never the
    warm path), this process's last second of pulls written first; one client's, or every
    client's (None) for an operator (`ui.readers`)."""
    async def pulled(name: str, client: str | None) -> list[Exposure] | None:
        store = pulls.facts.store
        if not pulls.enabled or store is None:
            return None
        try:
            await pulls.flush()
            return await store.pulled(name=name, client=client, limit=PULLERS_READ)
        except StoreUnavailableError:
            return None
    return pulled


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

    def __init__(self, proxy: Proxy, *, clock: Callable[[], float]) -> None:
        self.proxy = proxy
        self.clock = clock
        self.settings: ServeSettings = proxy.settings
        self.metrics = proxy.metrics
        self._counters: dict[tuple[str, int | str], Counter] = {}
        gate = proxy.gate
        self.gate = gate
        self.keys = gate.keys
        self.facts = gate.facts
        self.release = gate.release
        self.packuments = gate.packuments
        self._targets: Memo[str, RegistryPath | InvalidNameError] = Memo(_parse_or_error)
        self._reads: Memo[ReadKey, WarmRead | Literal[False]] = Memo(self._reading)
        self._abbreviated: Memo[str, bool] = Memo(wants_abbreviated)
        self._bases = BaseUrls(self.settings.public_url, self.settings.trusted_proxies)
        self._vary = vary(fixed_base=self._bases.fixed is not None,
                          trusted_proxies=self._bases.trusts_proxies,
                          authenticated=proxy.clients is not None)
        self.packument_route = PackumentRoute(gate, proxy.metrics, key=self._key,
                                              vary=self._vary,
                                              contact=self.settings.operator_contact)
        self.relay = Relay(Spools(self.settings.data_dir / SPOOL_DIR,
                                  self.settings.spool_max_bytes),
                           proxy.metrics, self._send_floor, gate.findings)
        self.tarballs = TarballRoute(
            private=proxy.private, public=proxy.public, metrics=proxy.metrics,
            relay=self.relay, admissions=gate.admissions, pulls=proxy.pulls,
            jobs=MirrorJobs(queue=proxy.queue, metrics=proxy.metrics, relay=self.relay,
                            handoff=proxy.handoff,
                            on_enqueued=(self.packuments.pin if proxy.worker_beside else None),
                            clock=clock, mirrored=gate.admissions.mirrored))
        self.audit = AuditRoute(proxy.rules, proxy.metrics)
        self.search = Search(proxy.public, self.packument_route.gated_or_none,
                             self.packument_route.cached_or_false,
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
        self._ids = itertools.count(1)
        self._authenticated = proxy.clients is not None
        self.answers_warm_first = False
        """Whether `answer_warm_first` is installed before routing (`warmed_first`)."""
        """Every /npm/ request carries its client (`access.CLIENT`), and perhaps a policy set."""
        # `Counter.inc` cost a warm hit more than its lookups: counted as plain ints, folded
        # into mirrorgate_requests_total at every scrape
        self._warm_counts = {status: proxy.metrics.tally(proxy.metrics.requests.labels(
            "packument", str(status))) for status in (200, 304)}
        self._id_prefix = os.urandom(3).hex()
        # `mirrorgate_request_seconds`: a list increment per request (`metrics.Durations`)
        self._warm_seconds = proxy.metrics.request_seconds.series("packument", "warm")
        self._slow_seconds: dict[str, Callable[[float], None]] = {}

    # --- bookkeeping -----------------------------------------------------------------------

    def _count(self, route: str, status: int | str) -> None:
        """Count every request by fixed route label and status (`mirrorgate_requests_total`)."""
        counter = self._counters.get((route, status))
        if counter is None:
            counter = self._counters[(route, status)] = self.metrics.requests.labels(
                route, str(status))
        counter.inc()

    def describe(self, request: web.Request) -> RegistryPath | InvalidNameError:
        """The request's route and package as `npm` reads them (the same memo), for its span."""
        raw = request.raw_path
        query = raw.find("?")
        return self._targets(raw[len(PREFIX):query] if query >= 0 else raw[len(PREFIX):])

    def _key(self, request: web.BaseRequest) -> RenderKey:
        """(abbreviated, base URL) for a request; raises BadBaseError for hostile headers."""
        return self._abbreviated(request.headers.get("Accept") or ""), self._base(request)

    def _base(self, request: web.BaseRequest) -> str:
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
        """Every `/npm/...` request; a warm packument returns before anything else runs."""
        started = _clock()
        if not self.warmed_first(raw_message(request)):  # else found cold before routing
            answer = self.warm(request, started)
            if answer is not None:
                return answer
        return await self._slow(request, self.describe(request), started)

    def warmed_first(self, message: RawRequestMessage) -> bool:
        """Whether `answer_warm_first` looks for this request's warm answer before routing:
        an `/npm/` raw path without `Expect` (aiohttp's application answers that)."""
        return (self.answers_warm_first and message.path.startswith(PREFIX)
                and "Expect" not in message.headers)

    def warm(self, request: web.BaseRequest, started: float) -> WarmAnswer | None:
        """The answer to a warm packument request (an `/npm/` path), else None.

        The warm path is one memo lookup (the raw path and the headers the answer depends on
        give the package, the rendering's key and the coding), a cache lookup within the TTL,
        and the bytes rendered for (form, base URL), plain or gzip'd, or a 304, counted by
        tallies. Merging, gating, rendering and compressing happen once per cache fill
        (`fill`, `rendered`), never per request, and the warm path takes no admission slot, so
        it is never shed."""
        # the request line and headers as parsed (`raw_message`): `method`, `headers` and
        # `raw_path` would each run a Python frame on a new request
        message = raw_message(request)
        if message.method not in _READS:
            return None
        headers = message.headers
        read = self._read(request, message.path, headers)
        if not read:
            return None
        # the client's policy set's entry (`policy:NAME` in the tokens file): one policy's
        # packument is never another's (`gate.packuments.service.cache_key`)
        slot = self.packuments.fresh(read.name,
                                     request[CLIENT].policy if self._authenticated else None)
        if slot is None:
            return None
        rendered = slot.value.renderings.get(read.key)
        if rendered is None:
            return None
        answer = WarmAnswer(rendered, kind_of(headers, rendered, read.gzip))
        self._warm_counts[answer.status].inc()
        self._warm_seconds(_clock() - started)
        return answer

    def _read(self, request: web.BaseRequest, raw: str,
              headers: CIMultiDictProxy[str]) -> WarmRead | Literal[False]:
        """What a GET or HEAD reads when it is a packument (False when it is not, or when its
        headers cannot make a base URL: the slow path answers that). Memoised on the raw path
        and the headers read, unless forwarded headers count (a trusted proxy), the Host is
        missing, or they are long: a memo keyed by what a client sends is bounded in bytes as
        well as in entries."""
        accept = headers.get("Accept") or ""
        coding = headers.get("Accept-Encoding") or ""
        # the Host only matters without MIRRORGATE_PUBLIC_URL
        host = headers.get("Host") if self._bases.fixed is None else ""
        if (host is None or self._bases.trusts_proxies
                or len(raw) + len(accept) + len(coding) + len(host) > _READ_MEMO_BYTES):
            return self._read_now(request, raw, coding)
        key = (raw, accept, coding, host, request.scheme)
        read = self._reads.known(key)
        return self._reads(key) if read is None else read

    def _reading(self, key: ReadKey) -> WarmRead | Literal[False]:
        raw, accept, coding, host, scheme = key
        name = self._packument_read(raw)
        if name is None:
            return False
        base = self._bases.fixed
        if base is None:
            try:
                base = self._bases({}, scheme, host)  # no peer: forwarded headers are not read
            except BadBaseError:
                return False
        return WarmRead(name, (wants_abbreviated(accept), base), accepts_gzip(coding))

    def _read_now(self, request: web.BaseRequest, raw: str,
                  coding: str) -> WarmRead | Literal[False]:
        name = self._packument_read(raw)
        if name is None:
            return False
        try:
            key = self._key(request)
        except BadBaseError:
            return False
        return WarmRead(name, key, self.packument_route.takes_gzip(coding))

    def _packument_read(self, raw: str) -> PackageName | None:
        """The package whose packument a raw path reads (`/npm/<name>`, not npm's
        `?write=true` before a change), else None."""
        query = raw.find("?")
        target = self._targets(raw[len(PREFIX):query] if query >= 0 else raw[len(PREFIX):])
        if (isinstance(target, RegistryPath) and target.route == "packument"
                and (query < 0 or "write=" not in raw[query:])):
            return target.name
        return None

    async def _slow(self, request: web.Request, target: RegistryPath | InvalidNameError,
                    started: float) -> web.StreamResponse:
        """Everything but a warm packument: a request id bound to the log context, refusals
        turned into JSON answers, and any unexpected error logged and answered 500, never
        raised."""
        writing = request.method in WRITE_METHODS
        route: Route = target.route if isinstance(target, RegistryPath) else "unknown"
        route = "write" if writing else route
        request_id = request[REQUEST_ID] = self._request_id(request)
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
            timed = self._slow_seconds.get(route)
            if timed is None:
                timed = self._slow_seconds[route] = self.metrics.request_seconds.series(
                    route, "slow")
            timed(_clock() - started)
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
                    return json_response(200, await self.search(request.query,
                                                                policy_of(request)))
                if target.route == "packument":
                    if request.query.get("write") == "true":  # npm, before a change
                        return await self.publishing.write_packument(
                            request, name, self._key(request)[1])
                    return await self.packument_route.packument(request, name)
                if target.route == "version":
                    return await self.packument_route.version(request, name, target.detail)
                if target.route == "dist-tags":
                    return await self.packument_route.dist_tags(name, policy_of(request))
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


SERVER = web.AppKey("mirrorgate_proxy_server", ProxyServer)


def answer_warm_first(runner: web.AppRunner) -> None:
    """Answer a warm packument before aiohttp's application routes the request, when nothing
    routing leads to must see it: the proxy's application (`SERVER`) with no middleware (no
    client tokens, tracing off), and no `Expect` asked (aiohttp's application answers it).
    Call it between the runner's `setup()` and its site's `start()`.

    Routing costs a warm hit more than its own lookups (the router's resolve, the match info,
    the middleware chain: 5 to 7 us of a 50 us hit). A request found cold here reaches `npm`
    routed, which does not look again (`warmed_first`); one not looked at (`Expect`) is
    answered by `npm` the same way (`warm`), so this changes which frames run, not what is
    answered (tests/serve/test_warm_answers.py)."""
    app, server = runner.app, runner.server
    proxy = app.get(SERVER)
    if proxy is None or server is None or app.middlewares or app.on_response_prepare:
        return
    routed = server.request_handler

    async def warm_first(request: web.BaseRequest) -> web.StreamResponse:
        if proxy.warmed_first(raw_message(request)):
            answer = proxy.warm(request, _clock())
            if answer is not None:
                return answer
        return await routed(request)

    server.request_handler = warm_first
    proxy.answers_warm_first = True


def build_proxy_app(
    proxy: Proxy,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    """The aiohttp application serving `/npm/` and the health routes at the root.

    Routes, GET and HEAD: `/npm/<name>` (the packument; scoped as `@s%2fn`, `@s%2Fn` or
    `@s/n`), `/npm/<name>/<version or dist-tag>`, `/npm/<name>/-/<file>.tgz`,
    `/npm/-/package/<name>/dist-tags`, `/npm/-/v1/search` (`search`), `/npm/-/ping`,
    `/npm/-/whoami`, and `/livez`, `/readyz`, `/metrics` at the root, where no package name
    can shadow them; POST only to npm audit's endpoints (`audit`). Anything else is a JSON
    404, a write a JSON 405. Who may ask is `access`'s business (a middleware).

    `clock` (monotonic seconds, for the memo tables and enqueue windows) is injectable so
    tests move time instead of sleeping; the gate carries its own clocks.
    """
    server = ProxyServer(proxy, clock=clock)
    app = web.Application()
    app[SERVER] = server
    if tracing.enabled():  # outermost, so a refused token's 401 is traced too
        app.middlewares.append(request_spans(server.describe, OUTCOME))
    add_health_routes(app, proxy.health, proxy.metrics)
    install_access(app, proxy.clients, metrics=proxy.metrics,
                   metrics_open=proxy.settings.identity.metrics_open,
                   oidc=proxy.settings.identity.oidc,
                   tasks=proxy.health.tasks)
    # [\s\S]: the router matches the decoded path, and `.` would not match a %0a in it.
    app.router.add_route("*", PREFIX + r"{tail:[\s\S]*}", server.npm)
    identity = proxy.settings.identity
    operators = Operators.named(identity.operators, identity.waiver_granters)
    add_ui_routes(app, metrics=proxy.metrics, rules=proxy.rules, health=proxy.health,
                  packument=server.packument_route.gated_or_none, over_tls=server.over_tls,
                  base=server._base,
                  stored=with_state_store(stored_counts_for(proxy.settings.mirror_target),
                                          server.facts),
                  worker_beside=proxy.worker_beside, facts=server.facts,
                  operators=operators,
                  pulled=_pulled_by(proxy.pulls) if proxy.pulls is not None else None,
                  policy_clients=(proxy.clients.file.policies if proxy.clients is not None
                                  else dict),
                  readers=PullReaders(proxy.clients is not None, operators,
                                      lambda request: request.get(CLIENT)))
    app.router.add_route("*", r"/{tail:[\s\S]*}", server.unknown)

    async def drain_enqueues(_app: web.Application) -> AsyncIterator[None]:
        yield
        await server.tarballs.drain()
        await server.relay.close()

    app.cleanup_ctx.append(drain_enqueues)
    return app
