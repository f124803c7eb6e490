"""Packuments through the proxy: the merge, the gate, both forms, dist-tags, tarball URLs."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import timedelta

import pytest

from mirrorgate.npm.packument import ABBREVIATED, ABBREVIATED_FIELDS
from mirrorgate.rules import Rules, parse_rules
from tests.serve.rig import NPM_ACCEPT, SharedPrivate, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import (
    FixtureVersion,
    fresh_version,
    install_script_version,
    make_package,
    make_version,
    no_digest_version,
    sha1_only_version,
)


async def test_merge_public_merges_public_versions_and_the_private_side_wins_every_tie(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    # a first-party name merges public versions only when the operator opts in
    public_registry.add(make_package("merge-one", ["1.0.0", "1.1.0", "2.0.0"]))
    private_registry.publish(make_version("merge-one", "0.9.0", description="internal only"))
    private_registry.publish(make_version("merge-one", "1.1.0", description="private build"),
                             tags={"internal": "1.1.0"})
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules('[private]\nmerge_public = ["merge-one"]'))

    answer = await proxy.get("npm/merge-one")

    assert answer.status == 200
    document = answer.json()
    assert sorted(document["versions"]) == ["0.9.0", "1.0.0", "1.1.0", "2.0.0"]
    assert document["versions"]["1.1.0"]["description"] == "private build"
    assert document["versions"]["0.9.0"]["description"] == "internal only"
    assert document["versions"]["2.0.0"]["description"] == "merge-one, a fixture package"
    # the private `latest` (0.9.0, its first publish) wins over the public 2.0.0
    assert document["dist-tags"] == {"latest": "0.9.0", "internal": "1.1.0"}
    for version, manifest in document["versions"].items():
        assert manifest["dist"]["tarball"] == (
            f"{proxy.registry}merge-one/-/merge-one-{version}.tgz")
    assert {"created", "modified", "0.9.0", "1.0.0", "1.1.0", "2.0.0"} <= set(document["time"])
    assert "policyRestrictions" not in document


async def test_a_denied_version_moves_into_policy_restrictions_in_both_forms(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("gated-one", [
        "1.0.0", no_digest_version("gated-one", "1.1.0")]))
    proxy = await start_proxy(public_registry.url)

    full = (await proxy.get("npm/gated-one")).json()
    short = (await proxy.get("npm/gated-one", Accept=NPM_ACCEPT)).json()

    for document in (full, short):
        assert list(document["versions"]) == ["1.0.0"]
        assert document["dist-tags"] == {"latest": "1.0.0"}
        restricted = document["policyRestrictions"]
        assert list(restricted["versions"]) == ["1.1.0"]
        assert restricted["versions"]["1.1.0"]["dist"]["tarball"] == (
            f"{proxy.registry}gated-one/-/gated-one-1.1.0.tgz")
        assert "- 1.1.0 (integrity-presence): " in restricted["message"]
        # one line each (npm prints each after `npm error 403`), ending with the way through
        assert restricted["message"].splitlines()[-2:] == [
            "newest admitted: 1.0.0",
            "for an exception ask mirrorgate's operator: mirrorgate allow gated-one@VERSION "
            "--why ... --until DATE admits it until that date"]
    assert "1.1.0" not in full["time"]
    assert set(restricted["versions"]["1.1.0"]) <= set(ABBREVIATED_FIELDS)


def _rules(text: str) -> Rules:
    return parse_rules(text, "test-rules.toml")


RULE_CASES: list[tuple[str, str, Callable[[str], FixtureVersion]]] = [
    ("integrity-presence", "", lambda name: no_digest_version(name, "1.1.0")),
    ("digest-floor", '[integrity]\nminimum = "sha256"\n',
     lambda name: sha1_only_version(name, "1.1.0")),
    ("deny-list", '[deny]\npackages = ["rule-deny-list@>=1.1.0"]\n',
     lambda name: make_version(name, "1.1.0")),
    ("allow-list", '[allow]\npackages = ["rule-allow-list@<1.1.0"]\n',
     lambda name: make_version(name, "1.1.0")),
    ("install-scripts", "[install_scripts]\nblock = true\n",
     lambda name: install_script_version(name, "1.1.0")),
    ("minimum-age", '[age]\nminimum = "3d"\n',
     lambda name: fresh_version(name, "1.1.0", age=timedelta(hours=2))),
]


@pytest.mark.parametrize(("rule", "policy", "special"), RULE_CASES,
                         ids=[case[0] for case in RULE_CASES])
async def test_each_rule_removes_its_version_and_its_tarball_answers_403_naming_it(
    rule: str, policy: str, special: Callable[[str], FixtureVersion],
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    name = f"rule-{rule}"
    public_registry.add(make_package(name, [make_version(name, "1.0.0"), special(name)]))
    proxy = await start_proxy(public_registry.url, rules=_rules(policy))

    for _ in range(3):
        document = (await proxy.get(f"npm/{name}", Accept=NPM_ACCEPT)).json()
    tarball = await proxy.get(f"npm/{name}/-/{name}-1.1.0.tgz")

    assert list(document["versions"]) == ["1.0.0"]
    assert document["dist-tags"]["latest"] == "1.0.0"
    assert f"- 1.1.0 ({rule}): " in document["policyRestrictions"]["message"]
    assert tarball.status == 403
    body = tarball.json()
    assert body["rule"] == rule
    assert body["version"] == "1.1.0"
    assert body["package"] == name
    assert rule in body["error"]
    assert body["reason"] in body["error"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule=rule) == 1
    admitted = await proxy.get(f"npm/{name}/-/{name}-1.0.0.tgz")
    assert admitted.status == 200


async def test_the_abbreviated_form_has_npms_field_set_and_content_type(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("corgi-one", [
        make_version("corgi-one", "1.0.0", {"left": "^1.0.0"}, bin={"corgi": "cli.js"},
                     engines={"node": ">=18"}, os=["linux"], cpu=["x64"],
                     peerDependencies={"peer": "^2"}, deprecated="use corgi-two",
                     funding={"url": "https://example.com/fund"}),
        install_script_version("corgi-one", "1.1.0", scripts={"install": "node build.js"}),
    ]))
    proxy = await start_proxy(public_registry.url)

    short = await proxy.get("npm/corgi-one", Accept=NPM_ACCEPT)
    full = await proxy.get("npm/corgi-one", Accept="application/json")

    assert short.headers["Content-Type"] == ABBREVIATED
    assert full.headers["Content-Type"] == "application/json"
    document = short.json()
    assert set(document) == {"name", "modified", "dist-tags", "versions"}
    one = document["versions"]["1.0.0"]
    assert set(one) <= set(ABBREVIATED_FIELDS)
    assert one["bin"] == {"corgi": "cli.js"}
    assert one["deprecated"] == "use corgi-two"
    assert one["os"] == ["linux"]
    assert one["cpu"] == ["x64"]
    assert one["peerDependencies"] == {"peer": "^2"}
    assert one["funding"] == {"url": "https://example.com/fund"}
    assert "description" not in one
    assert "scripts" not in one
    assert document["versions"]["1.1.0"]["hasInstallScript"] is True
    assert document["modified"] == full.json()["time"]["modified"]
    assert "readme" in full.json()
    assert "scripts" in full.json()["versions"]["1.1.0"]


@pytest.mark.parametrize(("accept", "abbreviated"), [
    (NPM_ACCEPT, True),
    (ABBREVIATED, True),
    ("application/json", False),
    ("*/*", False),
    (None, False),
    ("application/json, application/vnd.npm.install-v1+json; q=0.5", False),
    ("application/vnd.npm.install-v1+json; q=0", False),
])
async def test_the_form_follows_the_accept_header_and_its_q_values(
    accept: str | None, abbreviated: bool, public_registry: FixtureRegistry,
    start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("accept-one"))
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.request("GET", "npm/accept-one",
                                 headers={"Accept": accept} if accept else {})

    assert ("readme" not in answer.json()) is abbreviated
    assert answer.headers["Content-Type"] == (ABBREVIATED if abbreviated else "application/json")


async def test_latest_is_repointed_to_the_highest_surviving_stable_version(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("tags-one", [
        "1.0.0", "1.2.0", "2.0.0-rc.1", no_digest_version("tags-one", "2.0.0"),
        no_digest_version("tags-one", "3.0.0-beta.1"),
    ], dist_tags={"latest": "2.0.0", "next": "3.0.0-beta.1", "rc": "2.0.0-rc.1"}))
    public_registry.add(make_package("tags-two", [
        "1.0.0-alpha.1", "1.0.0-alpha.2", no_digest_version("tags-two", "1.0.0")]))
    proxy = await start_proxy(public_registry.url)

    one = (await proxy.get("npm/tags-one")).json()
    two = (await proxy.get("npm/tags-two")).json()

    assert one["dist-tags"] == {"latest": "1.2.0", "rc": "2.0.0-rc.1"}
    assert two["dist-tags"] == {"latest": "1.0.0-alpha.2"}


async def test_a_package_whose_every_version_is_denied_answers_403_with_the_reasons(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("denied-all", [
        no_digest_version("denied-all", "1.0.0"), no_digest_version("denied-all", "1.1.0")]))
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/denied-all")

    assert answer.status == 403
    assert answer.headers["Content-Type"] == "application/json"
    assert "- 1.0.0 (integrity-presence): " in answer.json()["error"]
    assert "- 1.1.0 (integrity-presence): " in answer.json()["error"]


async def test_a_package_no_upstream_knows_is_a_json_404(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/nobody-has-this")

    assert answer.status == 404
    assert "nobody-has-this" in answer.json()["error"]


async def test_one_version_or_dist_tag_answers_its_manifest_or_the_denial(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("@fixture/one", [
        "1.0.0", "1.2.0", no_digest_version("@fixture/one", "1.3.0")],
        dist_tags={"latest": "1.2.0", "beta": "1.3.0"}))
    proxy = await start_proxy(public_registry.url)

    by_version = await proxy.get("npm/@fixture%2fone/1.0.0")
    by_tag = await proxy.get("npm/@fixture/one/latest")
    denied = await proxy.get("npm/@fixture%2Fone/1.3.0")
    missing = await proxy.get("npm/@fixture/one/9.9.9")

    assert by_version.status == 200
    assert by_version.json()["version"] == "1.0.0"
    assert by_version.json()["dist"]["tarball"] == (
        f"{proxy.registry}@fixture/one/-/one-1.0.0.tgz")
    assert by_tag.json()["version"] == "1.2.0"
    assert denied.status == 403
    assert denied.json()["rule"] == "integrity-presence"
    assert missing.status == 404
    assert "9.9.9" in missing.json()["error"]


async def test_tarball_urls_are_built_from_the_public_url_when_it_is_set(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("url-one"))
    proxy = await start_proxy(public_registry.url,
                              public_url="https://mirror.example.com/base/")

    document = (await proxy.get("npm/url-one", X_Forwarded_Host="other.example.com")).json()

    assert document["versions"]["1.0.0"]["dist"]["tarball"] == (
        "https://mirror.example.com/base/npm/url-one/-/url-one-1.0.0.tgz")


async def test_tarball_urls_follow_a_trusted_proxy_s_forwarded_headers_and_a_bad_host_is_refused(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("url-two"))
    proxy = await start_proxy(public_registry.url,
                              trusted_proxies=(ipaddress.ip_network("127.0.0.1"),))

    forwarded = await proxy.get("npm/url-two", X_Forwarded_Proto="https",
                                X_Forwarded_Host="npm.example.com")
    hostile = await proxy.get("npm/url-two", X_Forwarded_Host='evil.example.com/"><x')
    plain = await proxy.get("npm/url-two")

    assert forwarded.json()["versions"]["1.0.0"]["dist"]["tarball"] == (
        "https://npm.example.com/npm/url-two/-/url-two-1.0.0.tgz")
    assert hostile.status == 400
    assert "Host" in hostile.json()["error"]
    assert plain.json()["versions"]["1.0.0"]["dist"]["tarball"] == (
        f"{proxy.registry}url-two/-/url-two-1.0.0.tgz")
