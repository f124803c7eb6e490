"""Row 25 of the faults table: the attacker's smaller findings.

> | 25 | `.` and `..` as a dist-tag, a revision or a version segment; an `npm search` asking
> for 250 results, twice; a private registry behind a gateway that answers a publish with an
> HTML error page | 400 naming the dot segment, before anything is sent on; one query fills
> at most 20 packuments and its answer is kept for the cache's TTL; the refusal's `error` is
> one line of text (the page's title), never HTML |

The login form's check of where a post came from (login CSRF) is tested with the status page
(`tests/serve/test_ui_pages.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import web

from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import forged_document, start_stack
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package
from tests.servers.processes import http_request
from tests.servers.threaded import ThreadedApp
from tests.servers.verdaccio import Verdaccio

WIDGET = make_package("@acme/widget", ["1.0.0"]).version("1.0.0")


def test_dot_segments_are_refused_before_anything_is_sent_on(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    # an HTTP client resolves dot segments: `dist-tags/..` reached PUT -/package/<name>/
    stack = start_stack(guarded, guard, public_registry, verdaccio,
                        SecretDir(tmp_path / "client-tokens"), tmp_path)
    verdaccio.publish(WIDGET)
    auth = {"Authorization": f"Bearer {stack.publisher}", "Content-Type": "application/json"}
    registry = stack.proxy.registry_url
    paths = [("PUT", "-/package/@acme%2fwidget/dist-tags/.."),
             ("PUT", "-/package/@acme%2fwidget/dist-tags/%2e%2e"),
             ("DELETE", "-/package/@acme%2fwidget/dist-tags/."),
             ("PUT", "@acme%2fwidget/-rev/.."),
             ("GET", "@acme%2fwidget/..")]

    replies = [http_request(method, registry + path, body=b'"1.0.0"', headers=auth)
               for method, path in paths]

    for (method, path), reply in zip(paths, replies, strict=True):
        assert reply.status == 400, (method, path, reply.status)
        assert "dot segment" in reply.json()["error"], path
    assert verdaccio.packument("@acme/widget")["dist-tags"] == {"latest": "1.0.0"}  # type: ignore[index]


def test_a_search_for_250_results_fills_at_most_20_packuments_and_is_kept(
    guarded: GuardedFactory, guard: SecretGuard, verdaccio: Verdaccio,
) -> None:
    # Verdaccio stands in for the public registry: it answers /-/v1/search
    for index in range(30):
        verdaccio.publish(make_package(f"searchme-{index:02d}", ["1.0.0"]).version("1.0.0"))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": verdaccio.url})

    first = http_request("GET", proxy.registry_url + "-/v1/search?text=searchme&size=250")
    fills = proxy.metric("mirrorgate_cache_total", result="miss")
    again = http_request("GET", proxy.registry_url + "-/v1/search?text=searchme&size=250")

    assert first.status == again.status == 200
    assert len(first.json()["objects"]) == 20
    assert fills == 20
    assert proxy.metric("mirrorgate_cache_total", result="miss") == fills
    assert again.json() == first.json()  # the kept answer: no public request at all


def gateway() -> web.Application:
    """A private registry behind a gateway whose publishes fail with its HTML error page."""
    async def packument(_request: web.Request) -> web.Response:
        return web.json_response({"error": "not found"}, status=404)

    async def publish(_request: web.Request) -> web.Response:
        page = ("<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>"
                "<h1>Bad Gateway</h1><p>The upstream server is unavailable.</p>"
                "<hr><address>nginx</address></body></html>")
        return web.Response(status=502, text=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", packument)
    app.router.add_put("/{tail:.*}", publish)
    return app


def test_an_html_error_page_from_the_private_registry_is_relayed_as_one_line(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    tmp_path: Path,
) -> None:
    with ThreadedApp(gateway, name="gateway") as private:
        secrets = SecretDir(tmp_path / "client-tokens")
        stack = start_stack(guarded, guard, public_registry, None, secrets, tmp_path,
                            MIRRORGATE_PRIVATE_UPSTREAM=private.url)

        reply = stack.put("@acme/widget", forged_document(WIDGET))

    said = json.loads(reply.body)
    assert reply.status == 502
    assert said["error"] == "the private upstream refused this write (502): 502 Bad Gateway"
    assert "<" not in said["error"]
