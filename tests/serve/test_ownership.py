"""Ownership: a private package can never be taken over from the public registry.

The attack is dependency confusion: the organisation's registry holds `acme-utils@1.2.0`, and
someone publishes `acme-utils` 0.0.1, 1.2.1 and 99.0.0 on the public registry, hoping the proxy
merges them (npm then installs the highest, or the in-range one). Each test is one way in:
higher, lower and in-range impostor versions, an owned scope, a private outage, a restart in
the middle of one. Real Verdaccio is the private registry and the real npm client installs;
the fixture registry is public, and stands in for a failing private side where a fault must
be injected (401, 5xx, timeout).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorgate.rules import parse_rules
from tests.serve.rig import SharedPrivate, StartProxy
from tests.servers.availability import serving
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient, npm
from tests.servers.packages import FixturePackage, fresh_version, make_package, make_version
from tests.servers.ports import free_port
from tests.servers.verdaccio import Verdaccio

IMPOSTORS = ("0.0.1", "1.2.1", "99.0.0")
"""Lower than, in range of (^1.2.0) and higher than the organisation's 1.2.0."""


def impostor(name: str) -> FixturePackage:
    package = make_package(name, IMPOSTORS, readme="# impostor readme",
                           description="impostor")
    package.fields.update({"description": "impostor", "maintainers": [{"name": "attacker"}]})
    return package


def public_paths(public: FixtureRegistry, needle: str) -> list[str]:
    return [seen.path for seen in public.requests if needle in seen.path]


async def test_impostor_versions_higher_lower_and_in_range_never_reach_npm(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    public_registry.add(impostor("acme-utils"))
    ours = make_version("acme-utils", "1.2.0", description="ours")
    private_registry.publish(ours)
    proxy = await start_proxy(public_registry.url)
    npm_client.write_project({})

    document = (await proxy.get("npm/acme-utils")).json()
    latest = await npm(npm_client, "install", "acme-utils", registry=proxy.registry)
    ranged = await npm(npm_client, "install", "acme-utils@^1.2.0", registry=proxy.registry)
    lower = await npm(npm_client, "install", "acme-utils@0.0.1", registry=proxy.registry)

    assert list(document["versions"]) == ["1.2.0"]
    assert document["dist-tags"] == {"latest": "1.2.0"}
    assert document.get("description") != "impostor"
    assert "impostor" not in document.get("readme", "")
    assert {"name": "attacker"} not in document.get("maintainers", [])
    assert latest.code == 0, latest.stderr
    assert ranged.code == 0, ranged.stderr
    assert npm_client.installed() == {"acme-utils": "1.2.0"}
    assert lower.code != 0
    assert "ETARGET" in lower.stderr
    for version in IMPOSTORS:
        assert (await proxy.get(f"npm/acme-utils/{version}")).status == 404
        assert (await proxy.get(f"npm/acme-utils/-/acme-utils-{version}.tgz")).status == 404
    assert await proxy.jobs() == []
    assert public_paths(public_registry, "/-/") == []


async def test_an_owned_scope_is_never_requested_from_public(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("@owned/tools", ["9.9.9"]),
                        make_package("owned-cli", ["9.9.9"]))
    rules = parse_rules('[private]\nnames = ["@owned/*", "owned-*"]')
    proxy = await start_proxy(public_registry.url, rules=rules, cache_ttl=60.0)
    npm_client.write_project({})

    missing = [await proxy.get(path) for path in (
        "npm/@owned%2ftools", "npm/@owned/tools/9.9.9", "npm/@owned/tools/-/tools-9.9.9.tgz",
        "npm/owned-cli", "npm/owned-cli/-/owned-cli-9.9.9.tgz")]
    private_registry.publish(make_version("@owned/tools", "1.0.0"))
    proxy.clock.advance(61)
    installed = await npm(npm_client, "install", "@owned/tools", registry=proxy.registry)

    assert [reply.status for reply in missing] == [404] * 5
    assert installed.code == 0, installed.stderr
    assert npm_client.installed() == {"@owned/tools": "1.0.0"}
    assert public_paths(public_registry, "owned") == []  # not one request left for them
    assert await proxy.jobs() == []


async def test_an_owned_name_whose_private_side_fails_is_a_503_never_public_bytes(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("@owned/down", ["9.9.9"]))
    rules = parse_rules('[private]\nnames = ["@owned/*"]')
    proxy = await start_proxy(public_registry.url, private=f"http://127.0.0.1:{free_port()}/",
                              rules=rules)

    packument = await proxy.get("npm/@owned%2fdown")
    tarball = await proxy.get("npm/@owned/down/-/down-9.9.9.tgz")

    for answer in (packument, tarball):
        assert answer.status == 503
        assert "@owned/down is first-party" in answer.json()["error"]
        assert answer.json()["upstream"] == "private"
    assert public_paths(public_registry, "owned") == []


@pytest.mark.parametrize("fault", [Fault(status=401), Fault(status=500), Fault(delay=3.0)],
                         ids=["401", "500", "timeout"])
async def test_a_failing_private_side_never_turns_a_first_party_name_public_only(
    fault: Fault, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(impostor("acme-outage"))
    ours = make_package("acme-outage", ["1.2.0"])
    # a fault-injecting stand-in for the private registry (401 after a token rotation, 5xx,
    # a hang): the real Verdaccio cannot be told to fail this way
    with FixtureRegistry(ours) as private:
        proxy = await start_proxy(public_registry.url, private=private.url, cache_ttl=60.0,
                                  upstream_timeout=1.0)
        warm = await proxy.get("npm/acme-outage")
        private.fault("/acme-outage", fault)
        proxy.clock.advance(61)
        stale = await proxy.get("npm/acme-outage")
        proxy.clock.advance(700)  # past the cache's stale-if-error bound (600 s)
        refused = await proxy.get("npm/acme-outage")
        tarball = await proxy.get("npm/acme-outage/-/acme-outage-99.0.0.tgz")

    assert list(warm.json()["versions"]) == ["1.2.0"]
    assert stale.status == 200
    assert stale.body == warm.body
    assert refused.status == 503
    assert "acme-outage is first-party" in refused.json()["error"]
    assert refused.headers["Retry-After"]
    assert tarball.status == 503
    assert public_paths(public_registry, "/-/") == []
    assert proxy.metric("mirrorgate_refusals_total", reason="first_party_private_failed") >= 1


async def test_a_restart_during_a_private_outage_still_knows_the_first_party_names(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    public_registry.add(impostor("acme-restart"), make_package("never-seen", ["1.0.0"]))
    data = tmp_path / "data"
    with serving(Verdaccio(tmp_path / "verdaccio"), "Verdaccio") as verdaccio:
        verdaccio.publish(make_version("acme-restart", "1.2.0"))
        before = await start_proxy(public_registry.url, private=verdaccio.url, data_dir=data)
        warm = await before.get("npm/acme-restart")
        await before.written()
    # Verdaccio is down now; the proxy restarts with the same data directory
    after = await start_proxy(public_registry.url, private=verdaccio.url, data_dir=data)
    refused = await after.get("npm/acme-restart")
    unknown = await after.get("npm/never-seen")

    assert list(warm.json()["versions"]) == ["1.2.0"]
    assert refused.status == 503
    assert "acme-restart is first-party" in refused.json()["error"]
    # documented: a name never seen first-party is served from public while private is down
    assert unknown.status == 200
    assert list(unknown.json()["versions"]) == ["1.0.0"]


async def test_a_mirrored_public_name_still_takes_a_new_public_version(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    package = make_package("mirrored-lib", ["1.0.0", "1.1.0"])
    public_registry.add(package)
    private_registry.publish(package.version("1.0.0").marked())  # what the worker mirrored
    proxy = await start_proxy(public_registry.url)

    document = (await proxy.get("npm/mirrored-lib")).json()
    old = await proxy.get("npm/mirrored-lib/-/mirrored-lib-1.0.0.tgz")
    new = await proxy.get("npm/mirrored-lib/-/mirrored-lib-1.1.0.tgz")

    assert sorted(document["versions"]) == ["1.0.0", "1.1.0"]
    assert document["dist-tags"]["latest"] == "1.1.0"
    assert old.body == package.version("1.0.0").tarball
    assert new.body == package.version("1.1.0").tarball
    assert public_paths(public_registry, "/-/") == ["/mirrored-lib/-/mirrored-lib-1.1.0.tgz"]
    assert [f"{job.name}@{job.version}" for job in await proxy.jobs()] == ["mirrored-lib@1.1.0"]


async def test_a_mirrored_version_is_judged_by_its_public_time_not_the_moment_of_mirroring(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    fresh = fresh_version("age-mirrored", "2.0.0")  # published on public minutes ago
    package = make_package("age-mirrored", ["1.0.0", fresh])
    public_registry.add(package)
    for version in ("1.0.0", "2.0.0"):  # Verdaccio stamps both with this very moment
        private_registry.publish(package.version(version).marked(), tags={})
    rules = parse_rules('[age]\nminimum = "3d"')
    proxy = await start_proxy(public_registry.url, rules=rules)

    document = (await proxy.get("npm/age-mirrored")).json()
    young = await proxy.get("npm/age-mirrored/-/age-mirrored-2.0.0.tgz")

    assert list(document["versions"]) == ["1.0.0"]
    assert "- 2.0.0 (minimum-age): " in document["policyRestrictions"]["message"]
    assert young.status == 403


async def test_a_deny_rule_withdraws_a_mirrored_version_and_npm_reports_e403(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    package = make_package("uap-fixture", ["0.7.28", "0.7.29"])
    public_registry.add(package)
    for version in ("0.7.28", "0.7.29"):
        private_registry.publish(package.version(version).marked())
    rules = parse_rules('[deny]\npackages = ["uap-fixture@0.7.29"]')
    proxy = await start_proxy(public_registry.url, rules=rules)
    npm_client.write_project({})

    document = (await proxy.get("npm/uap-fixture")).json()
    tarball = await proxy.get("npm/uap-fixture/-/uap-fixture-0.7.29.tgz")
    run = await npm(npm_client, "install", "uap-fixture@0.7.29", registry=proxy.registry)

    assert list(document["versions"]) == ["0.7.28"]
    assert document["dist-tags"] == {"latest": "0.7.28"}
    assert list(document["policyRestrictions"]["versions"]) == ["0.7.29"]
    assert tarball.status == 403
    assert tarball.json()["rule"] == "deny-list"
    assert run.code != 0
    assert "E403" in run.stderr
    assert public_paths(public_registry, "/-/") == []


async def test_a_deny_rule_withdraws_a_first_party_version_too(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    for version in ("1.0.0", "1.1.0"):
        private_registry.publish(make_version("acme-withdrawn", version))
    rules = parse_rules('[deny]\npackages = ["acme-withdrawn@1.1.0"]')
    proxy = await start_proxy(public_registry.url, rules=rules)

    document = (await proxy.get("npm/acme-withdrawn")).json()
    tarball = await proxy.get("npm/acme-withdrawn/-/acme-withdrawn-1.1.0.tgz")

    assert list(document["versions"]) == ["1.0.0"]
    assert document["dist-tags"] == {"latest": "1.0.0"}
    assert tarball.status == 403
    assert "matches the deny list entry" in tarball.json()["error"]


async def test_merge_public_takes_gated_public_versions_and_the_private_tag_wins(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    public_registry.add(impostor("acme-fork"))
    private_registry.publish(make_version("acme-fork", "1.2.0", description="our fork"))
    rules = parse_rules('[private]\nnames = ["acme-*"]\nmerge_public = ["acme-fork"]')
    proxy = await start_proxy(public_registry.url, rules=rules)
    npm_client.write_project({})

    document = (await proxy.get("npm/acme-fork")).json()
    run = await npm(npm_client, "install", "acme-fork", registry=proxy.registry)

    assert sorted(document["versions"]) == ["0.0.1", "1.2.0", "1.2.1", "99.0.0"]
    assert document["dist-tags"]["latest"] == "1.2.0"  # private's, over public's 99.0.0
    assert document.get("description") != "impostor"
    assert "impostor" not in document.get("readme", "")
    assert {"name": "attacker"} not in document.get("maintainers", [])
    assert run.code == 0, run.stderr
    assert npm_client.installed() == {"acme-fork": "1.2.0"}


async def test_a_public_manifest_cannot_forge_the_mirror_mark(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    forged = make_version("forged-mark", "1.0.0").marked()  # public carrying a mark itself
    public_registry.add(make_package("forged-mark", [forged]))
    proxy = await start_proxy(public_registry.url)

    document = (await proxy.get("npm/forged-mark")).json()
    await proxy.get("npm/forged-mark/-/forged-mark-1.0.0.tgz")

    assert "_mirrorgate" not in document["versions"]["1.0.0"]
    [job] = await proxy.jobs()
    assert "_mirrorgate" not in job.manifest  # what the worker publishes is marked by it alone


async def test_a_private_registry_answering_404_for_a_first_party_name_never_hands_it_to_public(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # the attack waits for the private registry to stop admitting the name exists: Artifactory
    # and GitHub Packages answer 404, not 401, to a token that lost its read permission, and an
    # unmounted storage volume answers 404 for everything. A name remembered first-party must
    # not then be rebuilt from public, where the impostor is waiting.
    public_registry.add(impostor("acme-hidden"))
    with FixtureRegistry(make_package("acme-hidden", ["1.2.0"])) as private:
        proxy = await start_proxy(public_registry.url, private=private.url, cache_ttl=60.0)
        warm = await proxy.get("npm/acme-hidden")
        private.fault("/acme-hidden", Fault(status=404))
        proxy.clock.advance(61)
        stale = await proxy.get("npm/acme-hidden")
        proxy.clock.advance(700)  # past the cache's stale-if-error bound (600 s)
        refused = await proxy.get("npm/acme-hidden")
        tarball = await proxy.get("npm/acme-hidden/-/acme-hidden-99.0.0.tgz")

    assert list(warm.json()["versions"]) == ["1.2.0"]
    assert stale.body == warm.body  # the organisation's own, from the cache
    assert refused.status == 503
    assert "acme-hidden is first-party" in refused.json()["error"]
    assert "404" in refused.json()["error"]
    assert tarball.status == 503
    assert public_paths(public_registry, "/-/") == []
