"""What mirrorgate says about a denied version besides npm's `policyRestrictions`: the
`versions_denied` log line of each fill, and the verdict in a denied tarball's status line
(pnpm and yarn 4 print the status text, not the body)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from structlog.testing import capture_logs

from mirrorgate.moments import stamp
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
    assert answer.reason == ("Forbidden: mirrorgate denied explained@2.0.0 (deny-list rule); "
                             "nearest admitted 1.0.0; for an exception ask mirrorgate's "
                             "operator")
    assert body["rule"] == "deny-list"
    assert body["nearest_admitted"] == "1.0.0"


def test_status_text_cannot_split_the_response_or_grow_without_bound() -> None:
    # the attack: text that ends the status line and starts a header of its own
    response = json_response(403, {"error": "x"},
                             status_text="denied\r\nSet-Cookie: session=stolen" + "é" * 300)

    assert "\r" not in response.reason
    assert "\n" not in response.reason
    assert response.reason.startswith("denied??Set-Cookie: session=stolen???")
    assert len(response.reason) == STATUS_TEXT_LIMIT


async def test_a_version_under_the_minimum_age_says_when_it_becomes_installable_and_who_to_ask(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # an 8-day minimum, as in the report that started this: a version out two days ago
    published = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0)
    public_registry.add(make_package("young", [
        "26.6.7", make_version("young", "26.6.11", published=published)]))
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules('[age]\nminimum = "8d"\n', "rules.toml"),
                              operator_contact="#npm-gate on chat")

    async with proxy.session.get(proxy.registry + "young/-/young-26.6.11.tgz") as answer:
        body = await answer.json()

    becomes = stamp(published + timedelta(days=8))
    assert answer.status == 403
    assert body["error"] == (
        f"mirrorgate denied young@26.6.11 by its minimum-age rule: {body['reason']}; "
        f"installable from {becomes}; nearest admitted: 26.6.7; for an exception ask "
        "#npm-gate on chat: mirrorgate allow young@26.6.11 --why ... --until DATE admits it "
        "until that date")
    assert answer.reason == (f"Forbidden: mirrorgate denied young@26.6.11 (minimum-age rule); "
                             f"installable from {becomes}; nearest admitted 26.6.7; for an "
                             "exception ask #npm-gate on chat")
    assert body["installable_at"] == (published + timedelta(days=8)).isoformat()


async def test_a_packument_names_a_few_denied_versions_counts_the_rest_and_ends_with_the_way_out(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    now = datetime.now(UTC)
    young = [make_version("crowded", f"2.{minor}.0", published=now - timedelta(hours=minor + 1))
             for minor in range(150)]
    public_registry.add(make_package("crowded", ["1.0.0", *young]))
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules('[age]\nminimum = "8d"\n', "rules.toml"),
                              operator_contact="npm-admins@example.com")

    document = (await proxy.get("npm/crowded", Accept=NPM_ACCEPT)).json()

    lines = document["policyRestrictions"]["message"].splitlines()
    assert lines[0] == "mirrorgate's admission rules withhold 150 versions of crowded:"
    assert [line.split(" ")[1] for line in lines[1:4]] == ["2.149.0", "2.148.0", "2.147.0"]
    assert all("; installable from 20" in line for line in lines[1:4])
    assert lines[4:] == [
        "- and 147 more (minimum-age 147)",
        "newest admitted: 1.0.0",
        "for an exception ask npm-admins@example.com: mirrorgate allow crowded@VERSION "
        "--why ... --until DATE admits it until that date"]
