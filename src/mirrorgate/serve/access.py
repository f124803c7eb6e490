"""Who is asking: client authentication on a listener, as one aiohttp middleware.

With `MIRRORGATE_CLIENT_TOKENS_FILE` set, every route but the health probes needs a client
token, or a CI's ID token one of the file's issuer lines lets in (`oidc`); without the file
nothing is checked, and access control is then the network's job.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from aiohttp import web

from mirrorgate.config import OidcSettings
from mirrorgate.metrics import Metrics
from mirrorgate.serve.oidc import SignInRefused, Verifier, looks_like_jwt
from mirrorgate.serve.refusals import json_response
from mirrorgate.serve.tokens import Client, ClientTokens
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
_MAX_HEADER = 4096

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def presented_token(header: str | None) -> str | None:
    """The token in an Authorization header, else None: `Bearer` (npm's `_authToken`) or the
    password of `Basic` (npm's `_auth`, any user name)."""
    if not header or len(header) > _MAX_HEADER:
        return None
    scheme, _, value = header.strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        return value or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _user, colon, password = decoded.partition(":")
        return password if colon and password else None
    return None


def _refusal(reason: str, message: str) -> web.Response:
    return json_response(401, {"error": message, "reason": reason}, CHALLENGE)


def _sign_in_refusal(refused: SignInRefused) -> web.Response:
    # the sentence in the status line too: npm prints that line after E401 or E403
    headers = CHALLENGE if refused.status == 401 else (
        {"Retry-After": "10"} if refused.status == 503 else None)
    return json_response(refused.status, {"error": refused.message, "reason": refused.reason},
                         headers, status_text=refused.message)


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
    verifier = Verifier(audience=oidc.audience, timeout=oidc.timeout, metrics=metrics)

    async def signed_in(request: web.Request, token: str) -> Client | web.Response:
        """The client an ID token signs in as, or the refusal saying why not."""
        try:
            client = await verifier.sign_in(token, tokens.mappings)
        except SignInRefused as refused:
            metrics.refusals.labels("oidc_" + refused.reason.replace(" ", "_")).inc()
            # the claims that decided, never the token
            log.warning("client_refused", reason=refused.reason, detail=refused.message,
                        peer=request.remote, method=request.method, path=request.path[:200],
                        **(refused.identity.fields() if refused.identity else {}))
            return _sign_in_refusal(refused)
        return client

    # `/livez` and `/readyz` always, `/metrics` when MIRRORGATE_METRICS_OPEN=true
    open_paths = _ALWAYS_OPEN | UI_OPEN_PATHS | ({"/metrics"} if metrics_open else set())
    sessions = app[SESSIONS] = Sessions(tokens)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        token = presented_token(request.headers.get("Authorization"))
        client = tokens.match(token) if token is not None else None
        if client is None and token is not None and tokens.mappings and looks_like_jwt(token):
            found = await signed_in(request, token)
            if isinstance(found, web.Response):
                return found
            client = found
        # the status page also takes the signed cookie its login form sets (`ui.session`)
        if client is None and token is None and (request.path.startswith(UI_PREFIX)
                                                 or request.path == UI_PREFIX.rstrip("/")):
            client = sessions.client(request.cookies.get(COOKIE))
            if client is None:
                metrics.refusals.labels("no_client_token").inc()
                return see_other(LOGIN_PATH)  # a person at a browser: the form, not JSON
        if client is None:
            reason = "no token" if token is None else "unknown token"
            metrics.refusals.labels("no_client_token" if token is None
                                    else "bad_client_token").inc()
            # the token is never logged, not even in part: a near miss is still a secret
            log.warning("client_refused", reason=reason, peer=request.remote,
                        method=request.method, path=request.path[:200])
            if token is None:
                return _refusal(reason, "mirrorgate needs a client token: set _authToken for "
                                "this registry in .npmrc (ask the operator for a token)")
            return _refusal(reason, "mirrorgate does not know this client token: it may have "
                            "been rotated; ask the operator for a current one")
        request[CLIENT] = client
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
        await verifier.close()

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
