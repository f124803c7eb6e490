"""The advisory gate through the proxy and the real npm client.

The attacks: a build asks for a version the world knows is malicious or vulnerable. It must not
get the tarball, the packument must not offer it (so a range resolves to the highest version
that is not affected), and the person reading npm's error must learn which advisory and what to
upgrade to. `npm audit` through mirrorgate answers from the same index, offline.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import orjson

from mirrorgate.rules import Rules, parse_rules
from tests.advisories.https_server import ExportServer
from tests.advisories.records import (
    fixture_records,
    malware,
    record,
    semver_range,
    write_zip,
    zip_bytes,
)
from tests.serve.rig import NPM_ACCEPT, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient, npm
from tests.servers.packages import fresh_version, make_package

VULN = record("GHSA-vuln-0000-0100", "vuln-lib", summary="Command injection in vuln-lib",
              ranges=[semver_range(("introduced", "1.2.0"), ("fixed", "1.2.1"))],
              label="HIGH", cwe=["CWE-78"])
TYPO = malware("MAL-2026-0200", "@adv/typo", ["2.0.1"])


def records() -> list[dict[str, object]]:
    return [*fixture_records(), VULN, TYPO]


def rules_for(tmp_path: Path, table: str = "", extra: str = "") -> Rules:
    export = write_zip(tmp_path / "osv-npm.zip", records())
    rules = parse_rules(f'[advisories]\nsource = "{export}"\n{table}\n{extra}',
                        str(tmp_path / "rules.toml"))
    assert rules.advisories is not None
    return rules


async def loaded(tmp_path: Path, table: str = "", extra: str = "") -> Rules:
    rules = rules_for(tmp_path, table, extra)
    assert rules.advisories is not None
    assert await rules.advisories.feed.refresh() == "loaded"
    return rules


def publish(public_registry: FixtureRegistry) -> None:
    public_registry.add(
        make_package("vuln-lib", ["1.0.0", "1.1.0", "1.2.0"]),
        make_package("@adv/typo", ["2.0.0", "2.0.1"]),
    )


async def test_a_malicious_version_leaves_the_packument_and_latest_is_repointed(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    publish(public_registry)
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))

    reply = await proxy.get("npm/@adv%2ftypo", Accept=NPM_ACCEPT)

    document = reply.json()
    assert list(document["versions"]) == ["2.0.0"]
    assert document["dist-tags"]["latest"] == "2.0.0"
    restricted = document["policyRestrictions"]
    assert list(restricted["versions"]) == ["2.0.1"]
    assert "MAL-2026-0200 (Malicious code in @adv/typo (npm); malware" in restricted["message"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="advisory-malware") == 1


async def test_the_tarball_of_a_vulnerable_version_is_403_naming_the_advisory_and_the_fix(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    publish(public_registry)
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))

    reply = await proxy.get("npm/vuln-lib/-/vuln-lib-1.2.0.tgz")

    assert reply.status == 403
    body = reply.json()
    assert body["rule"] == "advisory-severity"
    assert body["error"] == (
        "mirrorgate denied vuln-lib@1.2.0 by its advisory-severity rule: vuln-lib@1.2.0 is "
        "affected by GHSA-vuln-0000-0100 (Command injection in vuln-lib; high severity; fixed "
        "in 1.2.1); upgrade to 1.2.1 or later; nearest admitted: 1.1.0; for an exception ask "
        "mirrorgate's operator: mirrorgate allow vuln-lib@1.2.0 --why ... --until DATE admits "
        "it until that date")
    assert not any(seen.path.endswith("vuln-lib-1.2.0.tgz") for seen in public_registry.requests)
    assert (await proxy.get("npm/vuln-lib/-/vuln-lib-1.1.0.tgz")).status == 200


async def test_npm_shows_the_advisory_and_the_fixed_version_and_a_range_takes_the_highest_safe(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    publish(public_registry)
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))
    npm_client.write_project({})

    denied = await npm(npm_client, "install", "vuln-lib@1.2.0", registry=proxy.registry)
    ranged = await npm(npm_client, "install", "vuln-lib@^1.0.0", registry=proxy.registry)

    assert denied.code != 0
    assert "E403" in denied.stderr
    assert "GHSA-vuln-0000-0100 (Command injection in vuln-lib; high severity; fixed in " \
        "1.2.1); upgrade to 1.2.1 or later" in denied.stderr
    assert ranged.code == 0, ranged.stderr
    assert npm_client.installed() == {"vuln-lib": "1.1.0"}


async def test_npm_audit_through_mirrorgate_reports_what_the_gate_refuses(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    publish(public_registry)
    public_registry.add(make_package("adv-moderate", ["1.0.1"]))
    # the lockfile was written before the gate existed: installed straight from "public"
    npm_client.write_project({"vuln-lib": "1.2.0", "adv-moderate": "1.0.1"})
    setup = await npm(npm_client, "install", registry=public_registry.url)
    assert setup.code == 0, setup.stderr
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))

    run = await npm(npm_client, "audit", "--json", "--audit", registry=proxy.registry)

    report = json.loads(run.stdout)
    assert run.code == 1, run.stderr
    assert list(report["vulnerabilities"]) == ["vuln-lib"]  # moderate is below the threshold
    vulnerability = report["vulnerabilities"]["vuln-lib"]
    assert vulnerability["severity"] == "high"
    (via,) = vulnerability["via"]
    assert via["source"] == "GHSA-vuln-0000-0100"
    assert via["title"] == "Command injection in vuln-lib"
    assert via["range"] == ">=1.2.0 <1.2.1"
    assert via["cwe"] == ["CWE-78"]
    assert via["url"] == "https://example.com/advisories/GHSA-vuln-0000-0100"
    assert proxy.metric("mirrorgate_audit_requests_total", outcome="answered") == 1
    assert not any("security" in seen.path for seen in public_registry.requests)


async def test_the_bulk_endpoint_reads_gzip_and_lists_only_affected_versions(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))
    body = gzip.compress(orjson.dumps({"vuln-lib": ["1.1.0", "1.2.0"], "adv-high": ["1.2.0"],
                                       "@adv/typo": ["2.0.1"], "left-pad": ["1.3.0"]}))

    reply = await proxy.request("POST", "npm/-/npm/v1/security/advisories/bulk",
                                headers={"Content-Encoding": "gzip",
                                         "Content-Type": "application/json"}, body=body)

    assert reply.status == 200
    answer = reply.json()
    assert sorted(answer) == ["@adv/typo", "vuln-lib"]
    assert answer["@adv/typo"][0]["severity"] == "critical"
    assert answer["@adv/typo"][0]["vulnerable_versions"] == "2.0.1"


async def test_the_quick_audit_endpoint_points_at_bulk_and_get_on_bulk_is_405(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))
    quick = await proxy.request("POST", "npm/-/npm/v1/security/audits/quick", body=b"{}")
    assert quick.status == 501
    assert "bulk advisory endpoint" in quick.json()["error"]
    assert (await proxy.get("npm/-/npm/v1/security/advisories/bulk")).status == 405


async def test_without_an_advisory_table_bulk_is_a_404_saying_how_to_enable_it(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)
    reply = await proxy.request("POST", "npm/-/npm/v1/security/advisories/bulk", body=b"{}")
    assert reply.status == 404
    assert "[advisories]" in reply.json()["error"]


async def test_the_fast_lane_serves_a_fresh_fix_while_the_age_rule_holds_other_fresh_versions(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    public_registry.add(make_package("vuln-lib", [
        "1.1.0", "1.2.0", fresh_version("vuln-lib", "1.2.1"), fresh_version("vuln-lib", "1.3.0")],
        dist_tags={"latest": "1.3.0"}))
    rules = await loaded(tmp_path, extra='[age]\nminimum = "3d"\n')
    proxy = await start_proxy(public_registry.url, rules=rules)

    document = (await proxy.get("npm/vuln-lib", Accept=NPM_ACCEPT)).json()

    assert list(document["versions"]) == ["1.1.0", "1.2.1"]
    assert document["dist-tags"]["latest"] == "1.2.1"
    assert "- 1.3.0 (minimum-age): " in document["policyRestrictions"]["message"]


async def test_a_new_https_export_is_swapped_in_while_requests_are_in_flight(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    publish(public_registry)
    public_registry.add(make_package("soon-bad", ["1.0.0", "1.0.1"]))
    server = ExportServer(tmp_path, zip_bytes(records()))
    await server.start()
    try:
        rules = parse_rules(f'[advisories]\nsource = "{server.url}"\n')
        assert rules.advisories is not None
        feed = rules.advisories.feed
        feed.ssl_context = server.client_context()
        assert await feed.refresh() == "loaded"
        proxy = await start_proxy(public_registry.url, rules=rules)
        before = (await proxy.get("npm/soon-bad", Accept=NPM_ACCEPT)).json()
        assert list(before["versions"]) == ["1.0.0", "1.0.1"]

        assert await feed.refresh() == "unchanged"  # a 304
        server.replace(zip_bytes([*records(), malware("MAL-2026-0300", "soon-bad", ["1.0.1"])]))

        async def pull(index: int) -> int:
            name = ("soon-bad", "vuln-lib", "@adv%2ftypo")[index % 3]
            return (await proxy.get(f"npm/{name}", Accept=NPM_ACCEPT)).status

        statuses = await asyncio.gather(feed.refresh(), *(pull(i) for i in range(60)))
        assert statuses[0] == "loaded"
        assert set(statuses[1:]) == {200}
        assert server.statuses == [200, 304, 200]

        # past the TTL an unchanged packument would be revalidated with its ETag and kept on a
        # 304; the index it was gated with is gone, so it is fetched whole and gated again
        proxy.clock.advance(proxy.proxy.settings.cache_ttl + 1)
        after = (await proxy.get("npm/soon-bad", Accept=NPM_ACCEPT)).json()
        assert list(after["versions"]) == ["1.0.0"]
        asked = [seen for seen in public_registry.requests if seen.path == "/soon-bad"]
        assert len(asked) == 2
        assert "If-None-Match" not in asked[1].headers
        assert "MAL-2026-0300" in after["policyRestrictions"]["message"]
    finally:
        await server.stop()


async def test_before_the_first_load_deny_refuses_and_the_index_applies_seconds_after_it_lands(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    publish(public_registry)
    rules = rules_for(tmp_path, 'unavailable = "deny"')
    assert rules.advisories is not None
    proxy = await start_proxy(public_registry.url, rules=rules)

    refused = await proxy.get("npm/vuln-lib", Accept=NPM_ACCEPT)
    assert refused.status == 403
    assert "no advisory data has been loaded yet" in refused.json()["error"]
    assert (await proxy.request("POST", "npm/-/npm/v1/security/advisories/bulk",
                                body=b"{}")).status == 503

    assert await rules.advisories.feed.refresh() == "loaded"
    proxy.clock.advance(6)  # DEGRADED_FRESH_FOR, not the 60 s TTL
    document = (await proxy.get("npm/vuln-lib", Accept=NPM_ACCEPT)).json()
    assert list(document["versions"]) == ["1.0.0", "1.1.0"]


async def test_a_bulk_body_that_is_not_an_object_of_names_is_a_400(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))
    for body in (b"not json", b"[1, 2]"):
        reply = await proxy.request("POST", "npm/-/npm/v1/security/advisories/bulk", body=body)
        assert reply.status == 400
        assert "package names to arrays of versions" in reply.json()["error"]
