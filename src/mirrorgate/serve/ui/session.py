"""The status page's browser login: a client token traded for a signed, short-lived cookie.

A browser cannot send `Authorization: Bearer` by itself, so `/ui/login` takes a client token
once (a POST form) and answers with a cookie that is not the token. The raw token is never
stored, logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from mirrorgate.access.tokens import Client, ClientTokens
from mirrorgate.metrics import Metrics
from mirrorgate.serve.ui.page import esc, page

__all__ = ["COOKIE", "LIFETIME_SECONDS", "LOGIN_PATH", "SESSIONS", "Sessions", "login_form",
           "login_submit", "see_other"]

log = structlog.get_logger("mirrorgate.ui")

COOKIE = "mirrorgate_ui"
FORM_COOKIE = "mirrorgate_ui_form"
"""The sign-in form's own token, also in a hidden field: a post without both is not from the
form mirrorgate served (SameSite=Strict keeps another site's page from sending the cookie)."""
LOGIN_PATH = "/ui/login"
LIFETIME_SECONDS = 12 * 3600
"""A signed cookie is honoured this long (a working day); then the form asks again."""
_MAX_COOKIE = 512


class Sessions:
    """Issues and checks status-page cookies for the clients in `tokens`."""

    def __init__(self, tokens: ClientTokens, *, clock: Callable[[], float] = time.time) -> None:
        self.tokens = tokens
        self._clock = clock
        self._key = secrets.token_bytes(32)  # per process: a restart logs every browser out

    def _mac(self, client: Client, expires: int) -> str:
        # over the name, the expiry and the token's digest: rotating a client's token
        # invalidates its cookies
        message = f"{client.name}\0{expires}\0".encode() + client.digest
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, client: Client) -> str:
        expires = int(self._clock()) + LIFETIME_SECONDS
        return f"{client.name}.{expires}.{self._mac(client, expires)}"

    def form_token(self, cookie: str) -> str:
        """The token the page's forms carry for the session `cookie` (`ui.waivers`): derived
        from it, so it needs no storage and ends with the session."""
        return hmac.new(self._key, b"form\0" + cookie.encode(), hashlib.sha256).hexdigest()

    def same_form(self, cookie: str, given: object) -> bool:
        return isinstance(given, str) and hmac.compare_digest(given.encode(),
                                                              self.form_token(cookie).encode())

    def client(self, cookie: str | None) -> Client | None:
        """The client a cookie was issued to, or None: unsigned, expired, forged, or for a
        client whose token has since been rotated or removed."""
        if not cookie or len(cookie) > _MAX_COOKIE:
            return None
        name, _, rest = cookie.rpartition(".")
        name, _, expires_text = name.rpartition(".")
        if not name or not expires_text.isdigit() or int(expires_text) < self._clock():
            return None
        for client in self.tokens.clients:
            if client.name == name and hmac.compare_digest(
                    rest, self._mac(client, int(expires_text))):
                return client
        return None


SESSIONS = web.AppKey("mirrorgate_ui_sessions", Sessions)
"""Set by `access.install_access` when client tokens are on; absent when the proxy is open."""


def see_other(location: str) -> web.Response:
    """A 303 as a plain response (a raised HTTPException would drop the cookies set on it)."""
    return web.Response(status=303, headers={"Location": location})


def _form(message: str = "", status: int = 200) -> web.Response:
    """The sign-in form with a fresh form token, in its hidden field and its cookie."""
    form_token = secrets.token_urlsafe(24)
    error = f'<p class="error" role="alert">{esc(message)}</p>' if message else ""
    body = (
        "<h1>Sign in</h1>"
        "<p>This mirrorgate asks for a client token: the same one npm uses as "
        "<code>_authToken</code>.</p>"
        f"{error}"
        f'<form class="login" method="post" action="{LOGIN_PATH}">'
        f'<input type="hidden" name="form" value="{form_token}">'
        '<label for="token">Client token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" '
        'required>'
        '<button type="submit">Sign in</button></form>')
    response = page("Sign in", body, status=status, nav=False)
    response.set_cookie(FORM_COOKIE, form_token, max_age=3600, path=LOGIN_PATH, httponly=True,
                        samesite="Strict")
    return response


async def login_form(request: web.Request) -> web.Response:
    if SESSIONS not in request.app:
        return see_other("/ui/")  # no tokens: nothing to sign in to
    return _form()


def _from_our_form(request: web.Request, form_token: object,
                   base: Callable[[web.Request], str]) -> bool:
    """Whether the post came from the form mirrorgate served (login CSRF: another site's page
    posting its own token here would sign the person's browser in as someone else): the
    hidden field matches the form's cookie, which no other site's page can make the browser
    send, and an `Origin` a browser named is mirrorgate's own."""
    cookie = request.cookies.get(FORM_COOKIE)
    if not isinstance(form_token, str) or not cookie or not hmac.compare_digest(
            form_token.encode(), cookie.encode()):
        return False
    origin = request.headers.get("Origin")
    if origin is None or origin == "null":  # the page's no-referrer policy makes it `null`
        return True
    try:
        return origin == base(request).rstrip("/")
    except ValueError:  # headers that make no base URL
        return False


def login_submit(metrics: Metrics, over_tls: Callable[[web.Request], bool],
                 base: Callable[[web.Request], str],
                 ) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def submit(request: web.Request) -> web.Response:
        sessions = request.app.get(SESSIONS)
        if sessions is None:
            return see_other("/ui/")
        form = await request.post()
        if not _from_our_form(request, form.get("form"), base):
            metrics.refusals.labels("cross_site_login").inc()
            log.warning("ui_login_refused", peer=request.remote, reason="not our form")
            return _form("this sign-in did not come from mirrorgate's own sign-in page (another "
                         "site's page, or a form left open too long); sign in again here",
                         status=403)
        token = form.get("token")
        client = (sessions.tokens.match(token.strip())
                  if isinstance(token, str) and token.strip() else None)
        if client is None:
            metrics.refusals.labels("bad_client_token").inc()
            # the token is never logged, not even in part
            log.warning("ui_login_refused", peer=request.remote)
            return _form("mirrorgate does not know this client token: it may have been "
                         "rotated; ask the operator for a current one", status=401)
        log.info("ui_login", client=client.name)
        response = see_other("/ui/")
        # HttpOnly, SameSite=Strict (no other site can make a browser send it), and Secure
        # whenever the browser is on https, including behind a TLS-terminating proxy: else a
        # later plain-http request to the same host would carry the session in the clear
        response.del_cookie(FORM_COOKIE, path=LOGIN_PATH)  # used: a form token signs in once
        response.set_cookie(COOKIE, sessions.issue(client), max_age=LIFETIME_SECONDS,
                            path="/ui", httponly=True, samesite="Strict",
                            secure=over_tls(request))
        return response
    return submit
