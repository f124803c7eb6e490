"""Who is asking: client authentication on a listener, as one aiohttp middleware.

With `MIRRORGATE_CLIENT_TOKENS_FILE` set, every route but the health probes needs a client
token, or a CI's ID token one of the file's issuer lines lets in; without the file nothing is
checked, and access control is then the network's job. The decision is `access.decision`'s;
this applies it to a request and renders its refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from aiohttp import web

from mirrorgate.access.decision import NO_TOKEN, Access, Refusal, presented_token
from mirrorgate.access.oidc import Verifier
from mirrorgate.access.tokens import Client, ClientTokens
from mirrorgate.config import OidcSettings
from mirrorgate.metrics import Metrics
from mirrorgate.serve.refusals import json_response
from mirrorgate.serve.ui import OPEN_PATHS as UI_OPEN_PATHS
from mirrorgate.serve.ui import PREFIX as UI_PREFIX
from mirrorgate.serve.ui.session import COOKIE, LOGIN_PATH, SESSIONS, Sessions, see_other
from mirrorgate.tasks import Tasks

__all__ = ["CLIENT", "install_access", "policy_of", "whoami"]

log = structlog.get_logger("mirrorgate.access")

CLIENT = web.RequestKey("mirrorgate_client", Client)
"""The authenticated client of a request (absent when the proxy is open)."""

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mirrorgate"'}
_ALWAYS_OPEN = frozenset({"/livez", "/readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refusal(reason: str, message: str) -> web.Response:
    return json_response(401, {"error": message, "reason": reason}, CHALLENGE)


def _rendered(refusal: Refusal) -> web.Response:
    if not refusal.signed_in:
        return _refusal(refusal.reason, refusal.message)
    # the sentence in the status line too: npm prints that line after E401 or E403
    headers = CHALLENGE if refusal.status == 401 else (
        {"Retry-After": "10"} if refusal.status == 503 else None)
    return json_response(refusal.status, {"error": refusal.message, "reason": refusal.reason},
                         headers, status_text=refusal.message)


def install_access(app: web.Application, clients: ClientTokens | None, *, metrics: Metrics,
                   metrics_open: bool, oidc: OidcSettings | None = None,
                   tasks: Tasks | None = None) -> None:
    """Require a client token on `app`'s routes, and keep the tokens file re-read (a task
    the process's `tasks` watch), when `clients` is given; leave `app` open otherwise. ID
    tokens are verified with `oidc`'s audience and timeout when the file has issuer lines."""
    if clients is None:
        return
    tokens = clients
    oidc = oidc or OidcSettings()
    access = Access(tokens, Verifier(audience=oidc.audience, timeout=oidc.timeout,
                                     metrics=metrics))

    def refused(request: web.Request, refusal: Refusal) -> web.Response:
        metrics.refusals.labels(refusal.counted).inc()
        # the token is never logged, not even in part: a near miss is still a secret; for an
        # ID token, the claims that decided
        detail = {"detail": refusal.message} if refusal.signed_in else {}
        identity = refusal.identity.fields() if refusal.identity is not None else {}
        log.warning("client_refused", reason=refusal.reason, **detail, peer=request.remote,
                    method=request.method, path=request.path[:200], **identity)
        return _rendered(refusal)

    # `/livez` and `/readyz` always, `/metrics` when MIRRORGATE_METRICS_OPEN=true
    open_paths = _ALWAYS_OPEN | UI_OPEN_PATHS | ({"/metrics"} if metrics_open else set())
    sessions = app[SESSIONS] = Sessions(tokens)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        token = presented_token(request.headers.get("Authorization"))
        found: Client | Refusal | None = None
        if token is not None:
            found = await access.client(token)
        elif request.path.startswith(UI_PREFIX) or request.path == UI_PREFIX.rstrip("/"):
            # the status page also takes the signed cookie its login form sets (`ui.session`)
            found = sessions.client(request.cookies.get(COOKIE))
            if found is None:
                metrics.refusals.labels(NO_TOKEN.counted).inc()
                return see_other(LOGIN_PATH)  # a person at a browser: the form, not JSON
        if found is None or isinstance(found, Refusal):
            return refused(request, found or NO_TOKEN)
        client = request[CLIENT] = found
        identity = client.identity.fields() if client.identity is not None else {}
        with structlog.contextvars.bound_contextvars(client=client.name, **identity):
            response = await handler(request)
        if (request.method == "GET" and response.status == 200
                and request.path.endswith(".tgz") and "/-/" in request.path):
            # the status page's recent pulls: which client (which repository and branch, for
            # a CI job) fetched which tarball
            metrics.events.record("pulled", request.path.removeprefix("/npm/")[:300],
                                  f"by {client.who}", client=client.who)
        return response

    async def watch(_app: web.Application) -> AsyncIterator[None]:
        task = (tasks or Tasks(metrics)).keep("client-tokens", tokens.watch)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await access.close()

    app.middlewares.append(authenticate)
    app.cleanup_ctx.append(watch)


def policy_of(request: web.Request) -> str | None:
    """The policy set the request's client is judged by (`policy:NAME` on its tokens-file
    line); None: the default rules (no such column, or an open proxy)."""
    client = request.get(CLIENT)
    return client.policy if client is not None else None


def whoami(request: web.Request) -> web.Response:
    """npm's `/-/whoami`: the authenticated client's name."""
    client = request.get(CLIENT)
    if client is None:
        return _refusal("no client tokens", "mirrorgate does not authenticate clients "
                        "(MIRRORGATE_CLIENT_TOKENS_FILE is not set), so it knows no user name")
    return json_response(200, {"username": client.name})
