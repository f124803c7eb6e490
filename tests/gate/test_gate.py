"""The merge and the gate as pure functions, and the release-age gate coming of age."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from mirrorgate.gate import MAX_VERSIONS, TooManyVersionsError, gate
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.negotiation import wants_abbreviated
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import DEFAULT_RULES, parse_rules
from tests.serve.rig import NPM_ACCEPT, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import fresh_version, make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
ORIGIN = Origin.of(UPSTREAM)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def document(name: str, versions: list[str], **fields: Any) -> dict[str, Any]:
    packument = make_package(name, versions, **fields).packument(UPSTREAM)
    packed: dict[str, Any] = orjson.loads(orjson.dumps(packument))
    return packed


def test_with_no_denials_the_document_has_no_policy_restrictions() -> None:
    gated = gate(parse_name("plain"), None, document("plain", ["1.0.0"]),
                 rules=DEFAULT_RULES, now=NOW, origin=ORIGIN)

    rendered = orjson.loads(gated.render(False, "http://proxy.example.com/"))

    assert "policyRestrictions" not in rendered
    assert rendered["versions"]["1.0.0"]["dist"]["tarball"] == (
        "http://proxy.example.com/npm/plain/-/plain-1.0.0.tgz")
    assert gated.regate_at is None


def test_a_first_party_package_is_held_to_the_deny_list_alone() -> None:
    private = document("internal", ["1.0.0"])
    for manifest in private["versions"].values():
        del manifest["dist"]["integrity"], manifest["dist"]["shasum"]

    gated = gate(parse_name("internal"), private, None, rules=DEFAULT_RULES, now=NOW,
                 origin=ORIGIN)

    assert gated.survivors == ["1.0.0"]
    assert gated.versions["1.0.0"].private
    assert gated.dist_tags == {"latest": "1.0.0"}
    assert gated.first_party


def test_a_public_impostor_is_not_merged_into_a_first_party_name() -> None:
    gated = gate(parse_name("acme-utils"), document("acme-utils", ["1.2.0"]),
                 document("acme-utils", ["0.0.1", "1.2.1", "99.0.0"]), rules=DEFAULT_RULES,
                 now=NOW, origin=ORIGIN)

    assert list(gated.versions) == ["1.2.0"]
    assert gated.dist_tags == {"latest": "1.2.0"}
    assert gated.versions["1.2.0"].upstream_tarball is None


def test_the_policy_message_names_the_newest_few_denied_versions_and_counts_the_rest() -> None:
    # about 150 denied versions once pushed npm's own E403 line off a terminal
    versions = [f"1.{minor}.0" for minor in range(30)]
    public = document("many-denied", ["0.9.0", *versions])
    for version in versions:
        del public["versions"][version]["dist"]["integrity"]
        del public["versions"][version]["dist"]["shasum"]

    gated = gate(parse_name("many-denied"), None, public, rules=DEFAULT_RULES, now=NOW,
                 origin=ORIGIN)

    lines = (gated.policy_message or "").splitlines()
    assert lines == [
        "mirrorgate's admission rules withhold 30 versions of many-denied:",
        *[f"- 1.{minor}.0 (integrity-presence): many-denied@1.{minor}.0 carries no digest to "
          "verify its tarball against (no sha1 to sha512 dist.integrity and no hex "
          "dist.shasum), and every version must carry one" for minor in (29, 28, 27)],
        "- and 27 more (integrity-presence 27)",
        "newest admitted: 0.9.0",
    ]
    assert gated.denials == {"integrity-presence": 30}


def test_one_version_gated_alone_is_judged_as_in_the_whole_packument() -> None:
    rules = parse_rules('[deny]\npackages = ["mixed@1.1.0"]\n[age]\nminimum = "3d"\n')
    mixed = make_package("mixed", [
        make_version("mixed", "1.0.0"), make_version("mixed", "1.1.0"),
        fresh_version("mixed", "1.2.0"), make_version("mixed", "1.3.0", digests="none"),
        make_version("mixed", "1.4.0")])
    public = orjson.loads(orjson.dumps(mixed.packument(UPSTREAM)))
    now = datetime.now(UTC)
    whole = gate(parse_name("mixed"), None, public, rules=rules, now=now, origin=ORIGIN)
    assert sorted(whole.denied) == ["1.1.0", "1.2.0", "1.3.0"]  # deny list, age, no digest

    for version in ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]:
        alone = gate(parse_name("mixed"), None, public, rules=rules, now=now, origin=ORIGIN,
                     only=version)
        assert list(alone.versions) == [version]
        assert alone.versions[version] == whole.versions[version]
        assert alone.time.get(version) == whole.time.get(version)
    assert gate(parse_name("mixed"), None, public, rules=rules, now=now, origin=ORIGIN,
                only="9.9.9").versions == {}


def test_more_versions_than_the_bound_are_refused_before_any_gating() -> None:
    public = {"name": "huge", "versions": {f"0.0.{i}": {} for i in range(MAX_VERSIONS + 1)}}

    with pytest.raises(TooManyVersionsError, match=f"{MAX_VERSIONS + 1} versions"):
        gate(parse_name("huge"), None, public, rules=DEFAULT_RULES, now=NOW, origin=ORIGIN)


def test_a_release_age_denial_records_when_it_comes_of_age() -> None:
    rules = parse_rules('[age]\nminimum = "3d"\n')
    public = document("young", ["1.0.0", "1.1.0"])
    public["time"]["1.1.0"] = (NOW - timedelta(days=1)).isoformat()

    gated = gate(parse_name("young"), None, public, rules=rules, now=NOW, origin=ORIGIN)

    assert gated.denied == ["1.1.0"]
    assert gated.regate_at == NOW + timedelta(days=2)


@pytest.mark.parametrize(("accept", "expected"), [
    (NPM_ACCEPT, True),
    ("application/vnd.npm.install-v1+json;q=0.9, application/*;q=0.8", True),
    ("application/vnd.npm.install-v1+json;q=0.5, */*;q=0.9", False),
    ("APPLICATION/VND.NPM.INSTALL-V1+JSON", True),
    ("application/vnd.npm.install-v1+json; q=bogus", False),
    ("", False),
])
def test_the_abbreviated_form_is_chosen_by_explicit_preference(accept: str,
                                                               expected: bool) -> None:
    assert wants_abbreviated(accept) is expected


async def test_a_version_held_by_the_release_age_rule_appears_once_it_is_old_enough(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("ageing", [
        make_version("ageing", "1.0.0"),
        fresh_version("ageing", "1.1.0", age=timedelta(hours=70))]))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0,
                              rules=parse_rules('[age]\nminimum = "3d"\n'))
    young = (await proxy.get("npm/ageing")).json()

    proxy.wall.offset_seconds = 3 * 3600
    proxy.clock.advance(61)
    grown = (await proxy.get("npm/ageing")).json()

    assert list(young["versions"]) == ["1.0.0"]
    assert sorted(grown["versions"]) == ["1.0.0", "1.1.0"]
    assert grown["dist-tags"]["latest"] == "1.1.0"
    assert "policyRestrictions" not in grown
    sent = [seen.headers.get("If-None-Match") for seen in public_registry.requests]
    assert sent == [None, None]


async def test_a_publish_time_without_a_zone_comes_of_age_through_a_revalidation(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # The age rule reads a zone-less `time` as UTC; the moment its denial ends must be read
    # the same way, or the 304 the upstream answers once the TTL passes keeps the old denial.
    package = make_package("zoneless", [
        make_version("zoneless", "1.0.0"),
        fresh_version("zoneless", "1.1.0", age=timedelta(hours=70))])
    times = dict(package.packument(public_registry.url)["time"])
    times["1.1.0"] = times["1.1.0"].removesuffix("Z")
    public_registry.add(dataclasses.replace(package, fields={"time": times}))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0,
                              rules=parse_rules('[age]\nminimum = "3d"\n'))
    young = (await proxy.get("npm/zoneless")).json()

    proxy.wall.offset_seconds = 3 * 3600
    proxy.clock.advance(61)
    grown = (await proxy.get("npm/zoneless")).json()

    assert list(young["versions"]) == ["1.0.0"]
    assert "- 1.1.0 (minimum-age): published" in young["policyRestrictions"]["message"]
    assert sorted(grown["versions"]) == ["1.0.0", "1.1.0"]
    sent = [seen.headers.get("If-None-Match") for seen in public_registry.requests]
    assert sent == [None, None]  # gated again, never revalidated into the old verdict


def test_a_private_version_shadows_the_public_version_semver_ranks_equal_to_it() -> None:
    # `1.1.0+shadow` published straight into the private registry is public's `1.1.0` to npm
    # (it may install either): for a merged name the private copy wins, as on an exact match
    rules = parse_rules('[private]\nnames = ["acme-shared"]\nmerge_public = ["acme-shared"]\n')
    private = document("acme-shared", ["1.1.0+shadow"])
    public = document("acme-shared", ["1.0.0", "1.1.0"])

    gated = gate(parse_name("acme-shared"), private, public, rules=rules, now=NOW,
                 origin=ORIGIN)

    assert sorted(gated.versions) == ["1.0.0", "1.1.0+shadow"]
    assert gated.versions["1.1.0+shadow"].private
