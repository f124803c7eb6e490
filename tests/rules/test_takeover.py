"""Account-takeover signals and registry signatures, each as the attack it stops.

The packuments are built here: a history of versions with their publishers, provenance and
registry signatures (made with the tests' own ECDSA key), gated as the serve path gates them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mirrorgate.gate import Gated, gate
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import RulesError, parse_keys, parse_rules
from tests.rules.signing import SigningKey, keys_document
from tests.sri import sri

UPSTREAM = "http://127.0.0.1:9/"
ORIGIN = Origin.of(UPSTREAM)
START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = START + timedelta(days=30)
PROVENANCE = {"url": "http://127.0.0.1:9/-/npm/v1/attestations/x",
              "provenance": {"predicateType": "https://slsa.dev/provenance/v1"}}


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def integrity_of(name: str, version: str) -> str:
    return sri("sha512", f"{name}-{version}".encode())


def packument(name: str, history: list[tuple[str, str, bool]], *, key: SigningKey | None = None,
              step: timedelta = timedelta(days=1)) -> dict[str, Any]:
    """`history` is (version, publisher, with provenance) in publish order, one `step` apart,
    the last published at `NOW - step`; `key` signs every version."""
    versions: dict[str, Any] = {}
    times: dict[str, str] = {}
    first = NOW - step * (len(history) + 1)
    for at, (version, publisher, attested) in enumerate(history):
        integrity = integrity_of(name, version)
        dist: dict[str, Any] = {"integrity": integrity,
                                "tarball": f"{UPSTREAM}{name}/-/{name}-{version}.tgz"}
        if attested:
            dist["attestations"] = PROVENANCE
        if key is not None:
            dist["signatures"] = key.sign(name, version, integrity)
        versions[version] = {"name": name, "version": version, "dist": dist,
                             "_npmUser": {"name": publisher, "email": f"{publisher}@example"},
                             "maintainers": [{"name": publisher}]}
        times[version] = stamp(first + step * (at + 1))
    return {"name": name, "versions": versions, "time": times,
            "dist-tags": {"latest": history[-1][0]}}


def gated(rules: str, document: dict[str, Any], *, now: datetime = NOW,
          keys: dict[str, Any] | None = None) -> Gated:
    return gate(parse_name(document["name"]), None, document, rules=parse_rules(rules),
                now=now, origin=ORIGIN, keys=parse_keys(keys) if keys is not None else None)


def reason(result: Gated, version: str) -> str:
    denial = result.versions[version].denial
    assert denial is not None, f"{version} was admitted"
    return f"{denial.rule}: {denial.reason}"


CI_THEN_LAPTOP = [("4.17.18", "ci-bot", True), ("4.17.19", "ci-bot", True),
                  ("4.17.20", "ci-bot", True), ("4.17.21", "ci-bot", True),
                  ("4.17.22", "mallory", False)]


# --- provenance continuity -------------------------------------------------------------------


def test_a_version_published_without_provenance_after_versions_with_it_is_denied() -> None:
    result = gated('[provenance]\ncontinuity = "deny"', packument("lodash", CI_THEN_LAPTOP))

    assert result.survivors == ["4.17.18", "4.17.19", "4.17.20", "4.17.21"]
    assert reason(result, "4.17.22") == (
        "provenance-continuity: published by `mallory` without provenance; versions "
        "`4.17.18`-`4.17.21` were published by `ci-bot` with provenance; if this is "
        "legitimate, add \"lodash@4.17.22\" (or \"lodash\") to provenance.allow")
    assert result.dist_tags["latest"] == "4.17.21"
    assert result.policy_message is not None
    assert "without provenance" in result.policy_message


def test_provenance_older_than_the_window_is_not_evidence() -> None:
    history = [("1.0.0", "ci-bot", True), *[(f"1.0.{n}", "ci-bot", False) for n in range(1, 4)]]
    rules = '[provenance]\ncontinuity = "deny"\nwindow = 2'

    result = gated(rules, packument("old-ci", history))

    assert result.denied == ["1.0.1", "1.0.2"]  # 1.0.3's previous two had none
    assert "version `1.0.0` was published by `ci-bot`" in reason(result, "1.0.2")


def test_a_project_that_never_had_provenance_is_not_flagged() -> None:
    history = [(f"1.0.{n}", "alice", False) for n in range(5)]
    assert gated('[provenance]\ncontinuity = "deny"', packument("plain", history)).denied == []


def test_order_is_publish_time_not_semver() -> None:
    # A backport (3.9.1) published from a laptop after 4.x moved to CI with provenance.
    document = packument("backport", [("3.9.0", "alice", False), ("4.0.0", "alice", True),
                                      ("3.9.1", "alice", False)])
    assert gated('[provenance]\ncontinuity = "deny"', document).denied == ["3.9.1"]


def test_continuity_off_admits_the_gap() -> None:
    rules = '[provenance]\ncontinuity = "off"'
    assert gated(rules, packument("lodash", CI_THEN_LAPTOP)).denied == []


# --- quarantine ---------------------------------------------------------------------------------


def test_a_quarantine_is_a_timed_denial_that_says_until_when_and_why() -> None:
    rules = '[provenance]\ncontinuity = "quarantine"\nquarantine = "7d"'
    document = packument("lodash", CI_THEN_LAPTOP)
    published = NOW - timedelta(days=1)

    held = gated(rules, document)

    until = published + timedelta(days=7)
    assert reason(held, "4.17.22").startswith(
        f"provenance-continuity: quarantined until {until:%Y-%m-%dT%H:%M:%SZ} (7 days after "
        "publication) because it was published by `mallory` without provenance")
    assert held.regate_at == until
    released = gated(rules, document, now=until)
    assert released.denied == []
    assert released.regate_at is None


def test_a_quarantine_ends_early_once_a_newer_version_restores_provenance() -> None:
    rules = '[provenance]\ncontinuity = "quarantine"'
    history = [*CI_THEN_LAPTOP, ("4.17.23", "ci-bot", True)]
    assert gated(rules, packument("lodash", history)).denied == []


def test_a_denial_is_not_released_by_a_newer_version_with_provenance() -> None:
    history = [*CI_THEN_LAPTOP, ("4.17.23", "ci-bot", True)]
    assert gated('[provenance]\ncontinuity = "deny"',
                 packument("lodash", history)).denied == ["4.17.22"]


@pytest.mark.parametrize("entry", ["lodash@4.17.22", "lodash", "lodash@^4"])
def test_an_allow_entry_releases_a_flagged_version(entry: str) -> None:
    rules = f'[provenance]\ncontinuity = "quarantine"\nallow = ["{entry}"]'
    assert gated(rules, packument("lodash", CI_THEN_LAPTOP)).denied == []


def test_an_allow_entry_for_another_version_does_not_release_this_one() -> None:
    rules = '[provenance]\ncontinuity = "deny"\nallow = ["lodash@4.17.21"]'
    assert gated(rules, packument("lodash", CI_THEN_LAPTOP)).denied == ["4.17.22"]


# --- publisher change ---------------------------------------------------------------------------


def test_a_version_published_by_a_new_account_is_quarantined_with_the_evidence() -> None:
    history = [(f"2.0.{n}", "alice", False) for n in range(3)] + [("2.0.3", "mallory", False)]
    rules = '[publisher]\nchange = "quarantine"\nwindow = 20\nquarantine = "3d"'

    result = gated(rules, packument("popular", history))

    assert result.denied == ["2.0.3"]
    text = reason(result, "2.0.3")
    assert text.startswith("publisher-change: quarantined until ")
    assert ("published by `mallory`, an account that published none of the previous 3 "
            "versions; versions `2.0.0`-`2.0.2` were published by `alice`") in text
    assert "add \"popular@2.0.3\" (or \"popular\") to publisher.allow" in text


def test_a_known_co_maintainer_publishing_is_not_a_change() -> None:
    history = [("1.0.0", "alice", False), ("1.0.1", "bob", False), ("1.0.2", "alice", False),
               ("1.0.3", "bob", False)]
    assert gated('[publisher]\nchange = "deny"', packument("team", history)).denied == ["1.0.1"]


def test_the_first_version_of_a_package_has_no_publisher_to_differ_from() -> None:
    assert gated('[publisher]\nchange = "deny"',
                 packument("brand-new", [("0.1.0", "alice", False)])).denied == []


def test_maintainers_stand_in_when_the_publisher_is_not_recorded() -> None:
    document = packument("old", [("1.0.0", "alice", False), ("1.0.1", "mallory", False)])
    for manifest in document["versions"].values():
        del manifest["_npmUser"]
    result = gated('[publisher]\nchange = "deny"', document)
    assert result.denied == ["1.0.1"]


def test_a_publisher_account_name_with_control_characters_is_escaped_in_the_reason() -> None:
    document = packument("odd", [("1.0.0", "alice", False), ("1.0.1", "x\u001b[2Jy", False)])
    text = reason(gated('[publisher]\nchange = "deny"', document), "1.0.1")
    assert "\u001b" not in text
    assert '"x\\u001b[2Jy"' in text


# --- registry signatures --------------------------------------------------------------------


SIGNED = [("1.0.0", "alice", False), ("1.0.1", "alice", False)]


def test_versions_with_a_valid_registry_signature_are_admitted() -> None:
    key = SigningKey()
    result = gated("[signatures]\nverify = true", packument("signed", SIGNED, key=key),
                   keys=keys_document(key))
    assert result.denied == []


def test_a_tampered_integrity_fails_its_signature_and_is_refused() -> None:
    key = SigningKey()
    document = packument("signed", SIGNED, key=key)
    document["versions"]["1.0.1"]["dist"]["integrity"] = integrity_of("evil", "1.0.1")

    result = gated("[signatures]\nverify = true", document, keys=keys_document(key))

    assert result.denied == ["1.0.1"]
    assert reason(result, "1.0.1") == (
        "registry-signature: signed@1.0.1's registry signature does not verify: its metadata "
        "was changed after the registry signed it (tampered)")


def test_a_signature_by_a_key_the_registry_does_not_list_is_refused() -> None:
    listed, impostor = SigningKey(), SigningKey(keyid="SHA256:impostor")
    result = gated("[signatures]\nverify = true", packument("signed", SIGNED, key=impostor),
                   keys=keys_document(listed))
    assert result.denied == ["1.0.0", "1.0.1"]
    assert "a key the public registry does not list" in reason(result, "1.0.0")


def test_a_signature_forged_with_another_key_under_the_listed_keyid_is_refused() -> None:
    listed, forger = SigningKey(), SigningKey()  # same keyid, different key pair
    result = gated("[signatures]\nverify = true", packument("signed", SIGNED, key=forger),
                   keys=keys_document(listed))
    assert result.denied == ["1.0.0", "1.0.1"]


def test_a_key_is_trusted_for_versions_published_before_it_expired_only() -> None:
    key = SigningKey()
    document = packument("signed", SIGNED, key=key)  # published NOW-2d and NOW-1d
    key.expires = stamp(NOW - timedelta(days=1, hours=12))

    result = gated("[signatures]\nverify = true", document, keys=keys_document(key))

    assert result.denied == ["1.0.1"]
    assert "which expired at" in reason(result, "1.0.1")


@pytest.mark.parametrize(("missing", "denied"), [("admit", []), ("deny", ["1.0.0", "1.0.1"])])
def test_an_unsigned_version_follows_the_missing_setting(missing: str,
                                                         denied: list[str]) -> None:
    key = SigningKey()
    rules = f'[signatures]\nverify = true\nmissing = "{missing}"'
    result = gated(rules, packument("unsigned", SIGNED), keys=keys_document(key))
    assert result.denied == denied


@pytest.mark.parametrize(("missing", "denied"), [("admit", []), ("deny", ["1.0.0", "1.0.1"])])
def test_a_registry_without_keys_follows_the_missing_setting(missing: str,
                                                             denied: list[str]) -> None:
    rules = f'[signatures]\nverify = true\nmissing = "{missing}"'
    result = gated(rules, packument("signed", SIGNED, key=SigningKey()), keys=None)
    assert result.denied == denied


def test_a_bad_signature_is_refused_even_when_unsigned_versions_are_admitted() -> None:
    key = SigningKey()
    document = packument("signed", SIGNED, key=key)
    document["versions"]["1.0.0"]["dist"]["signatures"][0]["sig"] = "bm90IGEgc2lnbmF0dXJl"
    rules = '[signatures]\nverify = true\nmissing = "admit"'
    assert gated(rules, document, keys=keys_document(key)).denied == ["1.0.0"]


def test_verification_off_ignores_signatures() -> None:
    key = SigningKey()
    document = packument("signed", SIGNED, key=key)
    document["versions"]["1.0.1"]["dist"]["integrity"] = integrity_of("evil", "1.0.1")
    assert gated("[signatures]\nverify = false", document, keys=keys_document(key)).denied == []


def test_a_keys_document_without_a_usable_key_is_refused() -> None:
    with pytest.raises(ValueError, match="no ECDSA P-256 key"):
        parse_keys({"keys": [{"keyid": "k", "keytype": "rsa", "key": "AAAA"}]})


# --- the rules file -------------------------------------------------------------------------


def test_the_takeover_tables_are_read_and_described() -> None:
    rules = parse_rules("""
        [provenance]
        continuity = "quarantine"
        window = 3
        quarantine = "2w"
        allow = ["lodash@4.17.22"]
        [publisher]
        change = "deny"
        [signatures]
        missing = "deny"
    """)
    assert (rules.provenance.mode, rules.provenance.window) == ("quarantine", 3)
    assert rules.provenance.quarantine == timedelta(weeks=2)
    assert (rules.publisher.mode, rules.publisher.window) == ("deny", 20)
    assert (rules.signatures.verify, rules.signatures.missing) == (True, "deny")


def test_every_problem_in_the_takeover_tables_is_named_by_its_key() -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules("""
            [provenance]
            continuity = "block"
            window = 0
            quarantine = "soon"
            [publisher]
            window = 5
            [signatures]
            missing = "maybe"
        """)
    problems = raised.value.problems
    assert any(p.startswith("provenance.continuity: \"block\" is not one of") for p in problems)
    assert any(p.startswith("provenance.window:") for p in problems)
    assert any(p.startswith("provenance.quarantine:") for p in problems)
    assert any(p.startswith("publisher.change: is required") for p in problems)
    assert any(p.startswith("signatures.missing:") for p in problems)


def test_a_quarantine_longer_than_ten_years_is_refused_as_such() -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules('[publisher]\nchange = "quarantine"\nquarantine = "600w"')
    assert raised.value.problems == [
        "publisher.quarantine: is longer than 3650 days; set a shorter quarantine, or deny "
        "instead"]
