"""The status page at `/ui/`: a read-only, server-rendered view for people.

No script, no build step: HTML from Python with every value escaped, one CSS file served from
this package, a strict Content-Security-Policy (`ui.page`). Who may look is `access`'s
business, as for `/npm/`; the browser's cookie is `ui.session`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib.resources import files

from aiohttp import web

from mirrorgate.access.operators import Operators
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.healthz import Health
from mirrorgate.metrics import Metrics
from mirrorgate.rules import LiveRules, Rules, live
from mirrorgate.serve.ui.overview import overview
from mirrorgate.serve.ui.package import LoadPackument, PulledBy, package_view, search
from mirrorgate.serve.ui.page import HEADERS, esc, page
from mirrorgate.serve.ui.readers import PullReaders
from mirrorgate.serve.ui.session import LOGIN_PATH, login_form, login_submit, see_other
from mirrorgate.serve.ui.stored import StoredCounts
from mirrorgate.serve.ui.waivers import Granting, add_waiver_routes

__all__ = ["OPEN_PATHS", "PREFIX", "add_ui_routes"]

PREFIX = "/ui/"
STYLE_PATH = "/ui/static/style.css"
OPEN_PATHS = frozenset({LOGIN_PATH, STYLE_PATH, "/"})
"""Paths served without a token even when client tokens are on: the form and its style, and
`/`, which only points a browser at the page (a person typing the host name lands there)."""
_PACKAGE = "/ui/package/"


def add_ui_routes(app: web.Application, *, metrics: Metrics, rules: Rules | LiveRules,
                  health: Health,
                  packument: LoadPackument, over_tls: Callable[[web.Request], bool],
                  base: Callable[[web.Request], str], stored: StoredCounts,
                  worker_beside: bool = False, facts: KeptFacts | None = None,
                  operators: Operators | None = None,
                  pulled: PulledBy | None = None,
                  readers: PullReaders | None = None,
                  policy_clients: Callable[[], Mapping[str, list[str]]] = dict) -> None:
    """Register the overview (`/ui/`), the package view (`/ui/package/<name>` and the search
    box's `/ui/package?name=`), the login form and the stylesheet on the proxy app. Who
    pulled what is shown as `readers` allow (default: to everyone, as with tokens off);
    `policy_clients`: the tokens-file lines naming each policy set, as the file says now."""
    operators = operators or Operators()
    readers = readers or PullReaders(operators=operators)
    started = datetime.now(UTC)
    in_force = live(rules)
    style = files("mirrorgate.serve.ui").joinpath("style.css").read_bytes()
    granting = (Granting(facts, operators, metrics, base, packument)
                if facts is not None else None)

    async def show_overview(request: web.Request) -> web.Response:
        now = datetime.now(UTC)
        return overview(metrics=metrics, rules=in_force.current, started=started,
                        heartbeat=health.heartbeat, now=now,
                        stored=await stored(), state=in_force,
                        registry_url=base(request) + "npm/", worker_beside=worker_beside,
                        waiver_forms=granting.forms(request, now) if granting else "",
                        pulls_of=readers.only(request), policy_clients=policy_clients())

    async def show_package(request: web.Request) -> web.Response:
        # the raw path: the name is decoded once, by parse_name, exactly as under /npm/
        raw = request.raw_path.partition("?")[0]
        return await package_view(raw[len(_PACKAGE):], packument, pulled,
                                  pulls_of=readers.only(request))

    async def search_box(request: web.Request) -> web.Response:
        return search(request.query.get("name", ""))

    async def stylesheet(_request: web.Request) -> web.Response:
        return web.Response(body=style, headers={**HEADERS, "Content-Type": "text/css",
                                                 "Cache-Control": "max-age=3600"})

    async def to_overview(_request: web.Request) -> web.Response:
        return see_other(PREFIX)

    async def not_found(request: web.Request) -> web.Response:
        return page("Not found", f"<h1>Not found</h1><p>There is no page at "
                    f"<code>{esc(request.path[:200])}</code>.</p>", status=404)

    app.router.add_get("/", to_overview)
    app.router.add_get("/ui", to_overview)
    app.router.add_get(PREFIX, show_overview)
    app.router.add_get(STYLE_PATH, stylesheet)
    app.router.add_get(LOGIN_PATH, login_form)
    app.router.add_post(LOGIN_PATH, login_submit(metrics, over_tls, base))
    app.router.add_get("/ui/package", search_box)
    if granting is not None:
        add_waiver_routes(app, granting)
    # [\s\S]: the router matches the decoded path, and `.` would not match a %0a in it
    app.router.add_get(_PACKAGE + r"{name:[\s\S]+}", show_package)
    app.router.add_get(PREFIX + r"{tail:[\s\S]*}", not_found)
