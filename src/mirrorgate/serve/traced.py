"""The request span: one server span per `/npm/` request, installed only when tracing is on.

A middleware rather than code in the handlers, so that with tracing off the warm path is
exactly what it was (no middleware, no call), and with it on every request, a warm hit
included, gets its route, package, outcome and cache result. The span joins a client's own
trace when the request carries a `traceparent` header.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from mirrorgate import tracing
from mirrorgate.npm.names import InvalidNameError, version_from_filename
from mirrorgate.npm.paths import RegistryPath

__all__ = ["Describe", "request_spans"]

Describe = Callable[[web.Request], RegistryPath | InvalidNameError]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PREFIX = "/npm/"
WRITES = frozenset({"PUT", "DELETE"})


def request_spans(describe: Describe, outcome: web.ResponseKey[str]) -> Middleware:
    """The middleware. `describe` reads a request's route and package the way the proxy does
    (its own memo of parsed paths); `outcome` is the response key a cut transfer's outcome is
    under (`aborted`, `tampered`, `client_gone`)."""

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.raw_path.startswith(PREFIX):
            return await handler(request)
        method = request.method
        with tracing.serve(f"{method} /npm/", request.headers) as span:
            response = await handler(request)
            # described once answered, and only when the sampler keeps it: a span it drops
            # costs a warm hit no parsing and no attribute
            if span.recording:
                target = describe(request)
                route = "write" if method in WRITES else (
                    target.route if isinstance(target, RegistryPath) else "unknown")
                name = target.name if isinstance(target, RegistryPath) else None
                span.rename(f"{method} {route}")
                # few attributes: each is encoded again for every span the exporter sends
                span.set("http.request.method", method)
                span.set("mirrorgate.route", route)
                span.set("mirrorgate.package", name.full if name is not None else None)
                span.set("mirrorgate.version", _version(target))
                span.set("http.response.status_code", response.status)
                span.set("mirrorgate.outcome", response.get(outcome, str(response.status)))
            if response.status >= 500:
                span.fail(f"answered {response.status}")
            return response

    return traced


def _version(target: RegistryPath | InvalidNameError) -> str | None:
    if not isinstance(target, RegistryPath) or target.name is None:
        return None
    if target.route == "version":
        return target.detail
    if target.route == "tarball":
        try:
            return version_from_filename(target.name, target.detail)
        except InvalidNameError:
            return None
    return None
