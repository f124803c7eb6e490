"""What mirrorgate says about a denied version besides npm's `policyRestrictions`: the
`versions_denied` log line of each fill, and the verdict in a denied tarball's status line
(pnpm and yarn 4 print the status text, not the body)."""

from __future__ import annotations

from structlog.testing import capture_logs

from mirrorgate.rules import parse_rules
from mirrorgate.serve.refusals import STATUS_TEXT_LIMIT, json_response
from tests.serve.rig import NPM_ACCEPT, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version

RULES = parse_rules('[deny]\npackages = ["explained@>=2.0.0"]\n', "rules.toml")


async def test_a_fill_that_removes_versions_logs_them_once_with_the_rules(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("explained", [
        "1.0.0", "2.0.0", "2.1.0", make_version("explained", "1.5.0", digests="none")]))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    with capture_logs() as logs:
        first = await proxy.get("npm/explained", Accept=NPM_ACCEPT)
        again = await proxy.get("npm/explained", Accept=NPM_ACCEPT)

    assert (first.status, again.status) == (200, 200)
    denied = [entry for entry in logs if entry["event"] == "versions_denied"]
    assert len(denied) == 1  # per fill, not per request: the second answer came from cache
    assert denied[0]["package"] == "explained"
    assert sorted(denied[0]["versions"]) == ["1.5.0", "2.0.0", "2.1.0"]
    assert denied[0]["count"] == 3
    assert denied[0]["rules"] == ["deny-list", "integrity-presence"]


async def test_a_fill_that_removes_nothing_logs_no_denial(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("all-admitted", ["1.0.0", "1.1.0"]))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    with capture_logs() as logs:
        assert (await proxy.get("npm/all-admitted")).status == 200

    assert [entry for entry in logs if entry["event"] == "versions_denied"] == []


async def test_a_denied_tarball_carries_the_verdict_in_its_status_line(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("explained", ["1.0.0", "2.0.0"]))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    async with proxy.session.get(proxy.registry + "explained/-/explained-2.0.0.tgz") as answer:
        body = await answer.json()

    assert answer.status == 403
    assert answer.reason == "Forbidden: mirrorgate denied explained@2.0.0 (deny-list rule)"
    assert body["rule"] == "deny-list"


def test_status_text_cannot_split_the_response_or_grow_without_bound() -> None:
    # the attack: text that ends the status line and starts a header of its own
    response = json_response(403, {"error": "x"},
                             status_text="denied\r\nSet-Cookie: session=stolen" + "é" * 300)

    assert "\r" not in response.reason
    assert "\n" not in response.reason
    assert response.reason.startswith("denied??Set-Cookie: session=stolen???")
    assert len(response.reason) == STATUS_TEXT_LIMIT
