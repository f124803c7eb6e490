"""Takeover signals and registry signatures through the running proxy, and the real npm client.

The fixture registry serves the tests' own ECDSA key at `/-/npm/v1/keys` (an exact-path body
on the fixture registry) and packuments signed with it, as the public registry does.
"""

from __future__ import annotations

import copy
from datetime import timedelta

from mirrorgate.events import Alert
from mirrorgate.rules import parse_rules
from tests.rules.signing import (
    SigningKey,
    keys_document,
    serve_keys,
    signed,
    takeover,
    verify_served,
)
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient, npm
from tests.servers.packages import make_package, make_version


async def test_the_keys_endpoint_serves_the_public_registrys_keys(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    key = SigningKey()
    serve_keys(public_registry, key)
    proxy = await start_proxy(public_registry.url)

    reply = await proxy.get("npm/-/npm/v1/keys")

    assert reply.status == 200
    assert reply.json() == keys_document(key)


async def test_admitted_versions_keep_signatures_that_verify_and_a_tampered_one_is_refused(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # The attack: metadata changed after the registry signed it (here a second version's
    # integrity and tarball swapped for another build). Its signature no longer verifies.
    key = SigningKey()
    serve_keys(public_registry, key)
    good = signed(key, "signed-pkg", "1.0.0")
    swapped = signed(key, "signed-pkg", "1.0.1")
    impostor = make_version("signed-pkg", "1.0.1", files={"index.js": b"steal()"},
                            dist={"signatures": swapped.dist("")["signatures"]})
    public_registry.add(make_package("signed-pkg", [good, impostor]))
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules("[signatures]\nverify = true\n"))

    document = (await proxy.get("npm/signed-pkg")).json()
    keys = (await proxy.get("npm/-/npm/v1/keys")).json()

    served = document["versions"]["1.0.0"]["dist"]
    assert verify_served(keys, "signed-pkg", "1.0.0", served["integrity"], served["signatures"])
    assert list(document["versions"]) == ["1.0.0"]
    assert "- 1.0.1 (registry-signature): " in document["policyRestrictions"]["message"]
    assert "(tampered)" in document["policyRestrictions"]["message"]
    tarball = await proxy.get("npm/signed-pkg/-/signed-pkg-1.0.1.tgz")
    assert tarball.status == 403


async def test_without_the_registrys_keys_unsigned_policy_applies_until_they_arrive(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    key = SigningKey()
    public_registry.add(make_package("keyless", [signed(key, "keyless", "1.0.0")]))
    proxy = await start_proxy(public_registry.url, rules=parse_rules(
        '[signatures]\nverify = true\nmissing = "deny"\n'))

    before = await proxy.get("npm/keyless")
    serve_keys(public_registry, key)
    proxy.clock.advance(31)  # past the keys retry and the short hold of an unverified entry
    after = (await proxy.get("npm/keyless")).json()

    assert before.status == 403
    assert proxy.metric("mirrorgate_refusals_total", reason="bad_registry_keys") == 1
    assert "the public registry's signing keys are unavailable" in before.json()["reason"]
    assert list(after["versions"]) == ["1.0.0"]




# the takeover versions are hours old: the default one-day cooldown is off, so that the
# signals are what holds them
QUARANTINE = parse_rules('[age]\nminimum = "0"\n'
                         '[provenance]\ncontinuity = "quarantine"\nquarantine = "7d"\n'
                         '[publisher]\nchange = "quarantine"\n', "rules.toml")


async def test_a_quarantined_version_is_served_once_its_quarantine_ends(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("held", takeover("held", "1.0.3", age=timedelta(days=6))))
    proxy = await start_proxy(public_registry.url, rules=QUARANTINE, cache_ttl=60.0)

    held = (await proxy.get("npm/held")).json()
    proxy.wall.offset_seconds = 2 * 86400
    proxy.clock.advance(61)
    released = (await proxy.get("npm/held")).json()

    assert held["dist-tags"]["latest"] == "1.0.2"
    message = held["policyRestrictions"]["message"]
    assert "- 1.0.3 (provenance-continuity): quarantined until " in message
    assert "published by `mallory` without provenance" in message
    assert sorted(released["versions"]) == ["1.0.0", "1.0.1", "1.0.2", "1.0.3"]
    assert "policyRestrictions" not in released


async def test_an_allow_entry_releases_a_quarantined_version(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("vouched", takeover("vouched", "1.0.3",
                                                         age=timedelta(hours=1))))
    rules = parse_rules('[age]\nminimum = "0"\n'
                        '[provenance]\ncontinuity = "quarantine"\nallow = ["vouched@1.0.3"]\n'
                        '[publisher]\nchange = "quarantine"\nallow = ["vouched@1.0.3"]\n')
    proxy = await start_proxy(public_registry.url, rules=rules)

    document = (await proxy.get("npm/vouched")).json()

    assert document["dist-tags"]["latest"] == "1.0.3"


async def test_npm_install_of_a_quarantined_version_fails_with_the_reason(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("hijacked", takeover("hijacked", "1.0.3",
                                                          age=timedelta(hours=1))))
    proxy = await start_proxy(public_registry.url, rules=QUARANTINE)
    npm_client.write_project({})

    exact = await npm(npm_client, "install", "hijacked@1.0.3", registry=proxy.registry)
    ranged = await npm(npm_client, "install", "hijacked@^1.0.0", registry=proxy.registry)

    assert exact.code != 0
    assert "E403" in exact.stderr
    assert "- 1.0.3 (provenance-continuity): quarantined until" in exact.stderr
    assert "published by `mallory` without provenance" in exact.stderr
    assert ranged.code == 0, ranged.stderr
    assert npm_client.installed() == {"hijacked": "1.0.2"}


def test_the_signing_helper_detects_a_changed_integrity() -> None:
    # The check the served-signature test relies on must be able to fail.
    key = SigningKey()
    version = signed(key, "x", "1.0.0")
    signatures = copy.deepcopy(version.dist("")["signatures"])
    assert verify_served(keys_document(key), "x", "1.0.0", version.integrity, signatures)
    assert not verify_served(keys_document(key), "x", "1.0.1", version.integrity, signatures)


async def test_a_quarantine_raises_one_alert_per_version_for_the_security_team(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("held-alert", takeover("held-alert", "1.0.3",
                                                            age=timedelta(days=6))))
    proxy = await start_proxy(public_registry.url, rules=QUARANTINE)
    raised: list[Alert] = []
    proxy.metrics.events.send_alerts_to(raised.append)

    assert (await proxy.get("npm/held-alert")).status == 200

    [alert] = raised  # two signals fired; the first rule's verdict is the version's
    assert (alert.kind, alert.subject) == ("quarantine", "held-alert@1.0.3")
    assert alert.data["where"] == "packument"
    assert alert.data["rule"] == "provenance-continuity"
    assert alert.data["until"] is not None
    assert alert.text.startswith("held-alert@1.0.3 is quarantined until ")
