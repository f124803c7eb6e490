"""The status page over plain HTTP: its headers, its escaping, its verdicts and its login.

The attacks these stop: a package name or an upstream's text that carries markup running as
script in an operator's browser (every value escaped, and a CSP that allows no script at all),
a name in the URL reaching an upstream unvalidated, the page being framed, and an anonymous
reader looking at what the proxy serves once client tokens are on.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from pathlib import Path

import pytest
from multidict import CIMultiDict
from yarl import URL

from mirrorgate.rules import parse_rules
from mirrorgate.serve.ui.page import CSP
from mirrorgate.serve.ui.session import COOKIE
from tests.serve.rig import RunningProxy, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.ports import free_port
from tests.servers.processes import Reply

TOKEN = "mgc_ui-client-token-4f1c0e"  # noqa: S105 - a test token
HOSTILE = '<script>alert(1)</script>'


async def fetch(proxy: RunningProxy, path: str, *, method: str = "GET",
                headers: dict[str, str] | None = None,
                data: dict[str, str] | None = None) -> Reply:
    """One request, redirects not followed (a test reads the 303 itself)."""
    async with proxy.session.request(method, URL(proxy.url + path.lstrip("/"), encoded=True),
                                     headers=headers or {}, data=data,
                                     allow_redirects=False) as response:
        return Reply(response.status, CIMultiDict(response.headers), await response.read())


def text(reply: Reply) -> str:
    return reply.body.decode()


def session_cookie(reply: Reply) -> str:
    """The Set-Cookie line of the session (the form's own cookie is cleared beside it)."""
    assert isinstance(reply.headers, CIMultiDict)  # `fetch` keeps every header line
    lines: list[str] = [value for value in reply.headers.getall("Set-Cookie", [])
                        if value.startswith(f"{COOKIE}=")]
    [line] = lines
    return line


async def post_login(proxy: RunningProxy, token: str,
                     headers: dict[str, str] | None = None) -> Reply:
    """Sign in as a browser does: the form first (its token in a hidden field and a cookie),
    then the post with both."""
    form = await fetch(proxy, "ui/login", headers=headers)
    hidden = re.search(r'name="form" value="([^"]+)"', text(form))
    assert hidden is not None
    cookie = form.headers["Set-Cookie"].split(";")[0]
    return await fetch(proxy, "ui/login", method="POST", data={"token": token,
                                                               "form": hidden.group(1)},
                       headers={**(headers or {}), "Cookie": cookie})


@pytest.fixture
async def proxy(public_registry: FixtureRegistry, start_proxy: StartProxy) -> RunningProxy:
    public_registry.add(make_package("uipage-left", ["1.0.0", "1.1.0", "2.0.0"]))
    rules = parse_rules('[deny]\npackages = ["uipage-left@2.0.0"]\n')
    return await start_proxy(public_registry.url, rules=rules)


@pytest.mark.parametrize("path", ["ui/", "ui/package/uipage-left", "ui/package/%3Cb%3E",
                                  "ui/nowhere", "ui/package?name=x%3Cy"])
async def test_every_page_carries_a_csp_that_allows_no_script_and_no_framing(
    path: str, proxy: RunningProxy,
) -> None:
    reply = await fetch(proxy, path)

    assert reply.headers["Content-Security-Policy"] == CSP
    assert "script-src" not in CSP
    assert "default-src 'none'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["Content-Type"].startswith("text/html")
    assert "<script" not in text(reply).lower()


async def test_the_stylesheet_is_served_from_the_package_under_the_same_policy(
    proxy: RunningProxy,
) -> None:
    reply = await fetch(proxy, "ui/static/style.css")

    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/css")
    assert b".verdict.denied" in reply.body


async def test_the_package_view_shows_each_verdict_the_rule_the_reason_and_what_to_use(
    proxy: RunningProxy,
) -> None:
    reply = await fetch(proxy, "ui/package/uipage-left")

    assert reply.status == 200
    page = text(reply)
    assert "denied (deny-list)" in page
    assert "nearest admitted: 1.1.0" in page
    assert page.count(">admitted<") == 2
    assert "<td>latest</td><td>1.1.0</td>" in page  # repointed past the denied 2.0.0


async def test_the_package_view_shows_each_versions_license_and_a_license_refusal(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # relicensed: 1.x under MIT, 2.0.0 under the AGPL the rules deny, 3.0.0 declaring none
    public_registry.add(make_package("uipage-relicensed", [
        make_version("uipage-relicensed", "1.0.0", license="MIT"),
        make_version("uipage-relicensed", "2.0.0", license="AGPL-3.0-only"),
        make_version("uipage-relicensed", "3.0.0", license=None)]))
    proxy = await start_proxy(public_registry.url, rules=parse_rules(
        '[license]\ndeny = ["AGPL-*"]\nunknown = "report"\n'))

    page = text(await fetch(proxy, "ui/package/uipage-relicensed"))

    assert "<th>license</th>" in page
    assert "<td>MIT</td>" in page
    assert "<td>AGPL-3.0-only</td>" in page
    assert "denied (license)" in page
    assert ("uipage-relicensed@2.0.0 declares the license AGPL-3.0-only: AGPL-3.0-only "
            "matches the license deny list entry &quot;AGPL-*&quot;; nearest admitted: 1.0.0"
            ) in page
    assert "would deny (license-unknown)" in page  # 3.0.0, served: unknown is reported


async def test_a_package_page_and_npm_read_the_same_cache_entry(proxy: RunningProxy) -> None:
    await fetch(proxy, "ui/package/uipage-left")
    assert proxy.metric("mirrorgate_cache_total", result="miss") == 1

    await proxy.get("npm/uipage-left")

    assert proxy.metric("mirrorgate_cache_total", result="miss") == 1


@pytest.mark.parametrize("raw", ["%3Cscript%3Ealert(1)%3C%2Fscript%3E", "..%2f..%2fetc",
                                 "%252e%252e", "a%0Ab", "@evil%2f%3Cimg%20src%3Dx%3E"])
async def test_a_hostile_name_in_the_url_is_refused_by_npm_s_name_rules_and_shown_as_text(
    raw: str, proxy: RunningProxy, public_registry: FixtureRegistry,
) -> None:
    public_registry.clear_requests()

    reply = await fetch(proxy, f"ui/package/{raw}")

    assert reply.status == 400
    page = text(reply)
    assert "Not a package name" in page
    assert "<script>" not in page
    assert "<img" not in page
    assert public_registry.requests == []


async def test_the_search_box_redirects_a_valid_name_and_escapes_an_invalid_one(
    proxy: RunningProxy,
) -> None:
    found = await fetch(proxy, "ui/package?name=%40acme%2Fwidget")
    refused = await fetch(proxy, "ui/package?name=%3Cscript%3Ealert(1)%3C%2Fscript%3E")

    assert found.status == 303
    assert found.headers["Location"] == "/ui/package/@acme%2fwidget"
    assert refused.status == 400
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text(refused)
    assert HOSTILE not in text(refused)


async def test_an_upstream_s_error_text_is_escaped_on_the_overview(
    proxy: RunningProxy,
) -> None:
    proxy.metrics.events.upstream_failed("public", "invalid", HOSTILE)
    proxy.metrics.events.denied(f"x@1.0.0{HOSTILE}", "deny-list", HOSTILE)

    page = text(await fetch(proxy, "ui/"))

    assert HOSTILE not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3


async def test_the_overview_agrees_with_metrics(proxy: RunningProxy) -> None:
    await proxy.get("npm/uipage-left")

    page = text(await fetch(proxy, "ui/"))

    denied = proxy.metric("mirrorgate_rule_denials_total", rule="deny-list")
    assert denied == 1
    assert '<span class="value" data-key="versions-denied">1</span>' in page
    assert "uipage-left@2.0.0" in page
    assert "deny-list" in page
    assert "in memory only" in page


async def test_the_rules_table_says_off_for_a_section_the_rules_file_lacks(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # Seen by hand on the default rules: the advisories row read "None", Python's word.
    proxy = await start_proxy(public_registry.url)

    page = text(await fetch(proxy, "ui/"))

    rules = page.split('class="rules ', 1)[1]
    assert ">None<" not in rules
    assert "off (no table in the rules file)" in rules


# --- with client tokens -------------------------------------------------------------------

@pytest.fixture
async def guarded(public_registry: FixtureRegistry, start_proxy: StartProxy,
                  tmp_path: Path) -> RunningProxy:
    public_registry.add(make_package("uipage-guarded", ["1.0.0"]))
    path = tmp_path / "client-tokens"
    path.write_text(f"ops sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    return await start_proxy(public_registry.url, client_tokens_file=path)


async def test_an_anonymous_browser_is_sent_to_the_login_form(guarded: RunningProxy) -> None:
    for path in ("ui", "ui/", "ui/package/uipage-guarded", "ui/package?name=x"):
        reply = await fetch(guarded, path)
        assert reply.status == 303
        assert reply.headers["Location"] == "/ui/login"
    form = await fetch(guarded, "ui/login")
    assert form.status == 200
    assert 'method="post"' in text(form)


async def test_a_bearer_token_opens_the_page_without_a_cookie(guarded: RunningProxy) -> None:
    reply = await fetch(guarded, "ui/", headers={"Authorization": f"Bearer {TOKEN}"})

    assert reply.status == 200
    assert "Status" in text(reply)


async def test_login_sets_an_httponly_strict_cookie_that_is_not_the_token(
    guarded: RunningProxy,
) -> None:
    reply = await post_login(guarded, TOKEN)

    assert reply.status == 303
    cookie = session_cookie(reply)
    assert cookie.startswith(f"{COOKIE}=ops.")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert TOKEN not in cookie
    assert hashlib.sha256(TOKEN.encode()).hexdigest() not in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    page = await fetch(guarded, "ui/", headers={"Cookie": f"{COOKIE}={value}"})
    assert page.status == 200


@pytest.mark.parametrize("cookie", ["ops.99999999999.00", "ops", "", "ops.1.abc",
                                    "admin.99999999999." + "0" * 64])
async def test_a_forged_or_expired_cookie_is_sent_back_to_the_form(
    cookie: str, guarded: RunningProxy,
) -> None:
    reply = await fetch(guarded, "ui/", headers={"Cookie": f"{COOKIE}={cookie}"})

    assert reply.status == 303
    assert reply.headers["Location"] == "/ui/login"


async def test_a_wrong_token_at_the_form_is_refused_and_not_echoed(
    guarded: RunningProxy,
) -> None:
    reply = await post_login(guarded, TOKEN + "x")

    assert reply.status == 401
    assert f"{COOKIE}=" not in reply.headers.get("Set-Cookie", "")  # no session
    assert TOKEN not in text(reply)
    assert guarded.metric("mirrorgate_refusals_total", reason="bad_client_token") == 1


async def test_the_cookie_does_not_open_npm_routes(guarded: RunningProxy) -> None:
    login = await post_login(guarded, TOKEN)
    value = session_cookie(login).split(";")[0].split("=", 1)[1]

    reply = await fetch(guarded, "npm/uipage-guarded", headers={"Cookie": f"{COOKIE}={value}"})

    assert reply.status == 401


async def test_an_unreachable_upstream_shows_on_the_overview_with_its_error(
    start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(f"http://127.0.0.1:{free_port()}/")
    await proxy.get("npm/uipage-nowhere")

    page = text(await fetch(proxy, "ui/"))

    failures = proxy.metric("mirrorgate_upstream_failures_total", upstream="public")
    assert failures >= 1
    assert "<td>public</td>" in page
    assert f"<td>{failures:.0f}</td>" in page
    assert "unreachable" in page
    assert "no worker in this process" in page


async def test_the_advisory_data_s_age_is_shown_from_its_gauges_when_a_source_is_set(
    proxy: RunningProxy,
) -> None:
    before = text(await fetch(proxy, "ui/"))
    proxy.metrics.watch_advisories(lambda: (12, 7200.0))  # what `mirrorgate serve` registers

    after = text(await fetch(proxy, "ui/"))

    assert 'data-key="advisory-records"' not in before
    assert '<span class="value" data-key="advisory-records">12</span>' in after
    assert '<span class="value" data-key="advisory-age">7200 s</span>' in after  # seconds
    assert proxy.metric("mirrorgate_advisory_age_seconds") == 7200.0


# --- the cookie behind a TLS-terminating proxy ----------------------------------------------

async def _login_cookie(proxy: RunningProxy, headers: dict[str, str] | None = None) -> str:
    reply = await post_login(proxy, TOKEN, headers)
    assert reply.status == 303
    return session_cookie(reply)


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "client-tokens"
    path.write_text(f"ops sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    return path


async def test_behind_a_trusted_tls_proxy_the_session_cookie_is_secure(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    """The attack: TLS ends at the ingress, so the browser is on https while mirrorgate sees
    plain http; a cookie without Secure would then ride along on any later http:// request to
    the same host (a downgrade link, a mistyped URL) in the clear."""
    proxy = await start_proxy(public_registry.url, client_tokens_file=_tokens(tmp_path),
                              trusted_proxies=(ipaddress.ip_network("127.0.0.1"),))

    assert "Secure" in await _login_cookie(proxy, {"X-Forwarded-Proto": "https"})
    assert "Secure" in await _login_cookie(proxy, {"Forwarded": "proto=https;host=npm.test"})
    assert "Secure" not in await _login_cookie(proxy, {"X-Forwarded-Proto": "http"})


async def test_a_public_url_on_https_makes_the_session_cookie_secure(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    proxy = await start_proxy(public_registry.url, client_tokens_file=_tokens(tmp_path),
                              public_url="https://npm.example.test/")

    assert "Secure" in await _login_cookie(proxy)


async def test_an_untrusted_peer_cannot_claim_https_to_shape_the_cookie(
    guarded: RunningProxy,
) -> None:
    # forwarded headers count only from MIRRORGATE_TRUSTED_PROXIES; plain http stays plain
    assert "Secure" not in await _login_cookie(guarded, {"X-Forwarded-Proto": "https"})


async def test_another_sites_page_cannot_sign_the_browser_in(guarded: RunningProxy) -> None:
    # login CSRF: a page elsewhere posts the attacker's own token to /ui/login, and the
    # person's browser is then signed in as the attacker (what they look at, the attacker sees)
    no_form = await fetch(guarded, "ui/login", method="POST", data={"token": TOKEN},
                          headers={"Origin": "https://evil.example"})
    form = await fetch(guarded, "ui/login")
    hidden = re.search(r'name="form" value="([^"]+)"', text(form))
    assert hidden is not None
    cross = await fetch(guarded, "ui/login", method="POST",
                        data={"token": TOKEN, "form": hidden.group(1)},
                        headers={"Origin": "https://evil.example",
                                 "Cookie": form.headers["Set-Cookie"].split(";")[0]})

    for refused in (no_form, cross):
        assert refused.status == 403
        assert f"{COOKIE}=" not in refused.headers.get("Set-Cookie", "")
        assert "did not come from mirrorgate" in text(refused)
    assert guarded.metric("mirrorgate_refusals_total", reason="cross_site_login") == 2
