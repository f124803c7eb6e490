"""The status page's waiver forms: grant and revoke, as `mirrorgate allow` does, for a person
signed in through the page's login whose client MIRRORGATE_WAIVER_GRANTERS names.

A post is honoured only with the session cookie, a form token derived from it (in a hidden
field, which another site's page cannot read) and, when the browser names one, mirrorgate's
own Origin: the login's defence against cross-site posts (`ui.session`), per session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import structlog
from aiohttp import web

from mirrorgate.access.operators import Operators
from mirrorgate.access.tokens import Client
from mirrorgate.errors import MirrorgateError
from mirrorgate.events import Alert
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.kept.waivers import held_waivers, listed_bytes
from mirrorgate.gate.records import Gated
from mirrorgate.metrics import Metrics
from mirrorgate.moments import stamp
from mirrorgate.npm.names import PackageName, parse_name
from mirrorgate.serve.ui.page import esc, page
from mirrorgate.serve.ui.session import COOKIE, SESSIONS, Sessions, see_other
from mirrorgate.store.waivers import (
    EXAMPLE,
    WAIVER,
    Waiver,
    WaiverError,
    parse_subject,
    parse_until,
)

__all__ = ["GRANT_PATH", "REVOKE_PATH", "Granting", "add_waiver_routes"]

log = structlog.get_logger("mirrorgate.waivers")

GRANT_PATH = "/ui/waivers/grant"
REVOKE_PATH = "/ui/waivers/revoke"


class Granting:
    """Who may grant from the page, the facts a grant is written to, and the packuments the
    bytes it names are read from (the serve path's, as the pull that was refused read them)."""

    def __init__(self, facts: KeptFacts, operators: Operators, metrics: Metrics,
                 base: Callable[[web.Request], str],
                 packument: Callable[[PackageName], Awaitable[Gated | None]]) -> None:
        self.facts = facts
        self.operators = operators
        self.metrics = metrics
        self.base = base
        self.packument = packument

    def _session(self, request: web.Request) -> tuple[Sessions, Client, str] | None:
        sessions = request.app.get(SESSIONS)
        cookie = request.cookies.get(COOKIE)
        if sessions is None or cookie is None:
            return None
        client = sessions.client(cookie)
        if client is None or not self.operators.may_grant(client):
            return None
        return sessions, client, cookie

    def forms(self, request: web.Request, now: datetime) -> str:
        """The grant form and a revoke button per waiver in force, or why there are none."""
        signed_in = self._session(request)
        if signed_in is None:
            return ('<p class="note" data-key="waiver-how">Grant a waiver with <code>'
                    f'{esc(EXAMPLE)}</code>; from this page, sign in as a client '
                    "MIRRORGATE_WAIVER_GRANTERS names.</p>")
        sessions, client, cookie = signed_in
        token = esc(sessions.form_token(cookie))
        revokes = "".join(
            f'<form class="revoke" method="post" action="{REVOKE_PATH}">'
            f'<input type="hidden" name="form" value="{token}">'
            f'<input type="hidden" name="package" value="{esc(waiver.subject)}">'
            f'<button type="submit">Revoke {esc(waiver.subject)}</button></form>'
            for waiver in held_waivers(self.facts, now))
        return (f'<form class="grant" method="post" action="{GRANT_PATH}" data-key="waiver-form">'
                f'<input type="hidden" name="form" value="{token}">'
                '<label for="package">Version</label><input id="package" name="package" '
                'placeholder="left-pad@1.3.1" required>'
                '<label for="why">Why</label><input id="why" name="why" required>'
                '<label for="until">Until</label><input id="until" name="until" '
                'placeholder="2027-01-31" required>'
                f'<button type="submit">Grant a waiver as {esc(client.name)}</button></form>'
                + revokes)

    async def _posted(self, request: web.Request) -> tuple[Client, dict[str, str]] | web.Response:
        signed_in = self._session(request)
        if signed_in is None:
            return _refused("sign in as a client MIRRORGATE_WAIVER_GRANTERS names to grant or "
                            "revoke waivers here", 403)
        sessions, client, cookie = signed_in
        form = {key: value for key, value in (await request.post()).items()
                if isinstance(value, str)}
        if not sessions.same_form(cookie, form.get("form")) or not self._our_origin(request):
            self.metrics.refusals.labels("cross_site_form").inc()
            log.warning("ui_waiver_refused", client=client.name, reason="not our form")
            return _refused("this form did not come from mirrorgate's own status page; "
                            "open the page and try again", 403)
        return client, form

    def _our_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None or origin == "null":  # the page's no-referrer policy makes it `null`
            return True
        try:
            return origin == self.base(request).rstrip("/")
        except ValueError:
            return False

    async def grant(self, request: web.Request) -> web.Response:
        posted = await self._posted(request)
        if isinstance(posted, web.Response):
            return posted
        client, form = posted
        now = datetime.now(UTC)
        try:
            name, version = parse_subject(form.get("package", "").strip())
            why = " ".join(form.get("why", "").split())
            if not why:
                raise WaiverError("say why this version is admitted despite the rules")
            until = parse_until(form.get("until", "").strip(), now)
            # the bytes the proxy lists for it now, as `mirrorgate allow` names them
            integrity = await listed_bytes(self.packument, parse_name(name), version)
            waiver = Waiver(name, version, client.name, why[:500], until, now, integrity)
        except WaiverError as error:
            return _refused(f"{error}. For example: {EXAMPLE}", 400)
        except MirrorgateError as error:  # an upstream's failure (the page's `Refused` too)
            return _refused(f"the bytes of {name}@{version} could not be looked up "
                            f"({error}); try again, or grant it with mirrorgate allow "
                            "--integrity", 503)
        fact = waiver.fact()
        assert fact.value is not None
        self.facts.put(WAIVER, fact.key, fact.value)  # the store at once, every replica next
        self.facts.changed_here(WAIVER)
        log.info("waiver_granted", via="status page", **waiver.shown())
        self.metrics.events.alert(Alert(
            "waiver-granted", waiver.subject,
            f"{waiver.subject} is admitted past every rule until {stamp(waiver.until)}, granted "
            f"by {waiver.by} on the status page: {waiver.why}", name, version,
            {key: value for key, value in waiver.shown().items() if key != "package"}))
        return see_other("/ui/")

    async def revoke(self, request: web.Request) -> web.Response:
        posted = await self._posted(request)
        if isinstance(posted, web.Response):
            return posted
        client, form = posted
        try:
            name, version = parse_subject(form.get("package", "").strip())
        except WaiverError as error:
            return _refused(str(error), 400)
        key = f"{name}@{version}"
        value = self.facts.get(WAIVER, key)
        held = Waiver.from_fact(key, value) if value is not None else None
        if held is None:
            return _refused(f"no waiver for {key}", 404)
        self.facts.forget(WAIVER, key)
        self.facts.changed_here(WAIVER)
        log.info("waiver_revoked", via="status page", package=key, by=client.name,
                 granted_by=held.by)
        self.metrics.events.alert(Alert(
            "waiver-revoked", key, f"the waiver for {key} (granted by {held.by}: {held.why}) "
            f"was revoked by {client.name} on the status page; the rules decide again", name,
            version, {"by": client.name, "granted_by": held.by, "why": held.why}))
        return see_other("/ui/")


def _refused(message: str, status: int) -> web.Response:
    return page("Waiver", f'<h1>Waiver</h1><p class="error" role="alert">{esc(message)}</p>'
                '<p><a href="/ui/">Back to the status page</a></p>', status=status)


def add_waiver_routes(app: web.Application, granting: Granting) -> None:
    handlers: dict[str, Callable[[web.Request], Awaitable[web.Response]]] = {
        GRANT_PATH: granting.grant, REVOKE_PATH: granting.revoke}
    for path, handler in handlers.items():
        app.router.add_post(path, handler)
