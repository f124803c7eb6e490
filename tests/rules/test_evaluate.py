"""Every rule admitting and denying, the order they run in, and the reasons they give."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, cast

import pytest

from mirrorgate.rules import (
    DEFAULT_RULES,
    RULE_NAMES,
    Verdict,
    evaluate,
    parse_rules,
)
from tests.rules.builders import NOW, OLD, TARBALL, manifest, shasum, verdict
from tests.sri import sri

ADMITTED = Verdict(True, None, None)
ADMITTED_WEAK = Verdict(True, None, None, weak=True)


def denied_by(result: Verdict) -> str | None:
    assert result.admitted == (result.rule is None)
    assert (result.reason is None) == result.admitted
    return result.rule


def reason_of(result: Verdict) -> str:
    assert result.reason is not None, f"admitted, no reason: {result}"
    return result.reason


# --- integrity presence -----------------------------------------------------------------------


def test_a_version_with_sha512_integrity_is_admitted_and_not_weak() -> None:
    assert verdict() == ADMITTED


def test_a_version_without_integrity_or_shasum_is_denied_by_integrity_presence() -> None:
    result = verdict(dist={"tarball": "http://127.0.0.1:9/left-pad/-/left-pad-1.3.0.tgz"})
    assert denied_by(result) == "integrity-presence"
    assert reason_of(result).startswith("left-pad@1.3.0 carries no")


def test_integrity_presence_holds_whatever_the_file_says() -> None:
    permissive = """
        [allow]
        packages = ["left-pad"]
        [install_scripts]
        block = false
    """
    assert denied_by(verdict(permissive, dist={})) == "integrity-presence"


@pytest.mark.parametrize(
    "dist",
    [
        {"shasum": "not-hex"},
        {"shasum": "ab" * 19},
        {"integrity": "md5-" + "A" * 22 + "=="},
        {"integrity": "sha512-not base64!"},
        {"integrity": 512, "shasum": None},
        "sha512-abc",
        None,
    ],
    ids=["bad-shasum", "short-shasum", "md5-only", "bad-base64", "wrong-types", "string", "null"],
)
def test_a_dist_without_a_verifiable_digest_is_denied_by_integrity_presence(dist: Any) -> None:
    assert denied_by(verdict(dist=dist)) == "integrity-presence"


@pytest.mark.parametrize("garbage", ["a string", 42, None, ["dist"]])
def test_a_version_object_that_is_not_an_object_is_denied_rather_than_crashing(
    garbage: object,
) -> None:
    result = evaluate(DEFAULT_RULES, "left-pad", "1.3.0", cast(Any, garbage), OLD, NOW)
    assert denied_by(result) == "integrity-presence"


# --- digest floor -----------------------------------------------------------------------------


def test_a_version_with_only_a_shasum_is_admitted_and_flagged_weak_by_default() -> None:
    assert verdict(dist={"shasum": shasum()}) == ADMITTED_WEAK


def test_a_version_with_only_sha1_integrity_is_admitted_and_flagged_weak_by_default() -> None:
    assert verdict(dist={"integrity": sri("sha1", TARBALL)}) == ADMITTED_WEAK


def test_a_sha256_floor_denies_a_sha1_only_version_and_says_which_digests_it_wanted() -> None:
    result = verdict('[integrity]\nminimum = "sha256"', dist={"shasum": shasum()})
    assert denied_by(result) == "digest-floor"
    assert result.reason == (
        "left-pad@1.3.0's strongest digest is sha1; the rules require sha256 or stronger"
    )


@pytest.mark.parametrize("algorithm", ["sha256", "sha384", "sha512"])
def test_a_sha256_floor_admits_sha256_and_anything_stronger(algorithm: str) -> None:
    rules = '[integrity]\nminimum = "sha256"'
    dist = {"integrity": sri(algorithm, TARBALL), "shasum": shasum()}
    assert verdict(rules, dist=dist) == ADMITTED


def test_a_sha512_floor_denies_sha384() -> None:
    result = verdict('[integrity]\nminimum = "sha512"',
                     dist={"integrity": sri("sha384", TARBALL)})
    assert denied_by(result) == "digest-floor"
    assert reason_of(result).endswith("the rules require sha512")


def test_the_floor_looks_at_the_strongest_digest_not_the_weakest() -> None:
    dist = {"integrity": f"{sri('sha1', TARBALL)} {sri('sha512', TARBALL)}", "shasum": shasum()}
    assert verdict('[integrity]\nminimum = "sha512"', dist=dist) == ADMITTED


# --- deny list --------------------------------------------------------------------------------

DENY = """
[deny]
packages = ["event-stream", "@evil/*", "lodash@<4.17.21", "@acme/old@^1.2.0"]
"""


@pytest.mark.parametrize(
    ("name", "version", "entry"),
    [
        ("event-stream", "3.3.6", "event-stream"),
        ("event-stream", "4.0.0-beta.1", "event-stream"),
        ("@evil/thing", "1.0.0", "@evil/*"),
        ("lodash", "4.17.20", "lodash@<4.17.21"),
        ("lodash", "1.0.0", "lodash@<4.17.21"),
        ("@acme/old", "1.9.0", "@acme/old@^1.2.0"),
    ],
)
def test_a_version_matching_the_deny_list_is_denied_naming_the_entry(
    name: str, version: str, entry: str
) -> None:
    result = verdict(DENY, name, version)
    assert denied_by(result) == "deny-list"
    assert result.reason == f'{name}@{version} matches the deny list entry "{entry}"'


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("lodash", "4.17.21"),
        ("lodash", "5.0.0"),
        ("@acme/old", "1.1.9"),
        ("@acme/old", "2.0.0"),
        ("@acme/new", "1.5.0"),
        ("evil", "1.0.0"),
        ("@evilcorp/x", "1.0.0"),
        ("event-stream-extra", "1.0.0"),
    ],
)
def test_a_version_outside_every_deny_entry_is_admitted(name: str, version: str) -> None:
    assert verdict(DENY, name, version) == ADMITTED


def test_a_ranged_deny_entry_follows_npm_and_leaves_out_prereleases_of_other_versions() -> None:
    assert verdict(DENY, "lodash", "4.17.20-beta.1") == ADMITTED
    covering = '[deny]\npackages = ["lodash@<4.17.21 || >=4.17.20-0 <4.17.21"]'
    assert denied_by(verdict(covering, "lodash", "4.17.20-beta.1")) == "deny-list"


def test_a_version_that_is_not_semver_is_denied_by_a_ranged_deny_entry_for_its_package() -> None:
    result = verdict(DENY, "lodash", "4.17.x-final")
    assert denied_by(result) == "deny-list"
    assert result.reason == (
        "lodash@4.17.x-final is not a valid semver version, so it cannot be shown to be "
        'outside the deny list entry "lodash@<4.17.21"'
    )


def test_a_version_string_with_control_characters_is_escaped_and_bounded_in_the_reason() -> None:
    hostile = "1.0.0\n\x1b[31mnpm ERR! run curl | sh" + "9" * 10_000
    reason = reason_of(verdict(DENY, "lodash", hostile))
    assert "\x1b" not in reason
    assert "\n" not in reason
    assert "\\u001b[31m" in reason
    assert len(reason) < 400


def test_a_version_that_is_not_semver_is_admitted_when_no_ranged_entry_names_it() -> None:
    assert verdict(DENY, "left-pad", "1.3.0.1") == ADMITTED


# --- allow list -------------------------------------------------------------------------------

ALLOW = """
[allow]
packages = ["left-pad", "@acme/*", "react@^18.0.0"]
"""


def test_an_empty_allow_list_admits_everything_not_denied() -> None:
    assert verdict("[allow]\npackages = []", "anything", "1.0.0") == ADMITTED


@pytest.mark.parametrize(
    ("name", "version"),
    [("left-pad", "1.3.0"), ("left-pad", "2.0.0-rc.1"), ("@acme/x", "0.0.1"), ("react", "18.2.0")],
)
def test_a_non_empty_allow_list_admits_what_it_names(name: str, version: str) -> None:
    assert verdict(ALLOW, name, version) == ADMITTED


@pytest.mark.parametrize(
    ("name", "version"),
    [("right-pad", "1.0.0"), ("react", "17.0.2"), ("react", "19.0.0-rc.1"), ("@acmex/y", "1.0.0"),
     ("react", "18.x")],
)
def test_a_non_empty_allow_list_denies_what_it_does_not_name(name: str, version: str) -> None:
    result = verdict(ALLOW, name, version)
    assert denied_by(result) == "allow-list"
    assert result.reason == (
        f"{name}@{version} matches no allow list entry, and only versions on the allow list "
        "are admitted"
    )


def test_the_deny_list_wins_over_the_allow_list() -> None:
    both = '[deny]\npackages = ["left-pad@1.3.0"]\n[allow]\npackages = ["left-pad"]'
    assert denied_by(verdict(both, "left-pad", "1.3.0")) == "deny-list"
    assert verdict(both, "left-pad", "1.3.1") == ADMITTED


# --- install scripts --------------------------------------------------------------------------

BLOCK = """
[install_scripts]
block = true
allow = ["esbuild", "@prisma/*", "sharp@>=0.33.0"]
"""


@pytest.mark.parametrize("script", ["preinstall", "install", "postinstall"])
def test_a_version_with_an_install_script_is_denied_naming_the_script(script: str) -> None:
    result = verdict(BLOCK, scripts={script: "node build.js", "test": "jest"})
    assert denied_by(result) == "install-scripts"
    assert result.reason == (
        f"left-pad@1.3.0 has install scripts ({script}), which the rules block for packages "
        "not listed in install_scripts.allow"
    )


def test_a_version_flagged_has_install_script_is_denied() -> None:
    result = verdict(BLOCK, hasInstallScript=True)
    assert denied_by(result) == "install-scripts"
    assert "(hasInstallScript)" in reason_of(result)


def test_every_install_script_is_named_in_the_reason() -> None:
    result = verdict(BLOCK, scripts={"postinstall": "a", "preinstall": "b"})
    assert "(preinstall, postinstall)" in reason_of(result)


@pytest.mark.parametrize(
    "overrides",
    [
        {"scripts": {"test": "jest", "prepare": "tsc", "build": "tsc"}},
        {"scripts": {"postinstall": ""}},
        {"scripts": "postinstall"},
        {"hasInstallScript": False},
        {},
    ],
    ids=["other-scripts", "empty-script", "scripts-not-an-object", "flag-false", "none"],
)
def test_a_version_without_install_scripts_is_admitted(overrides: dict[str, Any]) -> None:
    assert verdict(BLOCK, **overrides) == ADMITTED


@pytest.mark.parametrize(
    ("name", "version"), [("esbuild", "0.20.0"), ("@prisma/engines", "5.0.0"), ("sharp", "0.33.2")]
)
def test_a_package_on_the_install_scripts_exception_list_is_admitted(
    name: str, version: str
) -> None:
    assert verdict(BLOCK, name, version, scripts={"install": "node install.js"}) == ADMITTED


def test_an_exception_with_a_range_covers_only_those_versions() -> None:
    result = verdict(BLOCK, "sharp", "0.32.6", scripts={"install": "node install.js"})
    assert denied_by(result) == "install-scripts"


def test_install_scripts_are_admitted_without_the_table_or_with_block_false() -> None:
    scripts = {"postinstall": "node evil.js"}
    assert verdict(DEFAULT_RULES, scripts=scripts) == ADMITTED
    assert verdict("[install_scripts]\nblock = false", scripts=scripts) == ADMITTED


def test_writing_the_install_scripts_table_turns_the_block_on() -> None:
    result = verdict('[install_scripts]\nallow = ["esbuild"]', scripts={"install": "x"})
    assert denied_by(result) == "install-scripts"


# --- minimum release age ----------------------------------------------------------------------

AGE = """
[age]
minimum = "3d"
exempt = ["@acme/*"]
"""


def test_a_version_younger_than_the_minimum_age_is_denied_with_when_and_how_long_ago() -> None:
    result = verdict(AGE, published="2026-12-01T10:00:00.000Z")
    assert denied_by(result) == "minimum-age"
    assert result.reason == (
        "published 2026-12-01T10:00:00Z, 5 hours ago; the minimum release age is 3 days"
    )


@pytest.mark.parametrize(
    ("published", "ago"),
    [
        ("2026-12-01T14:59:30Z", "30 seconds ago"),
        ("2026-12-01T14:00:00Z", "60 minutes ago"),
        ("2026-11-30T15:00:00Z", "24 hours ago"),
        ("2026-11-29T14:00:00Z", "2 days ago"),
        ("2026-12-01T16:00:00Z", "60 minutes in the future"),
        ("2027-01-01T00:00:00Z", "30 days in the future"),
    ],
)
def test_the_age_reason_says_how_long_ago_in_a_readable_unit(published: str, ago: str) -> None:
    result = verdict(AGE, published=published)
    assert denied_by(result) == "minimum-age"
    assert f", {ago};" in reason_of(result)


@pytest.mark.parametrize("published", ["2026-11-28T15:00:00Z", OLD, "2026-11-28T16:00:00+01:00"])
def test_a_version_at_or_past_the_minimum_age_is_admitted(published: str) -> None:
    assert verdict(AGE, published=published) == ADMITTED


def test_a_publish_time_with_an_offset_is_compared_in_utc() -> None:
    result = verdict(AGE, published="2026-12-01T12:00:00+02:00")
    assert reason_of(result).startswith(
        "published 2026-12-01T10:00:00Z, 5 hours ago;"
    )


def test_a_publish_time_without_a_zone_is_read_as_utc() -> None:
    assert verdict(AGE, published="2026-11-28T15:00:00") == ADMITTED
    assert denied_by(verdict(AGE, published="2026-11-28T15:00:01")) == "minimum-age"


def test_a_clock_without_a_zone_is_read_as_utc() -> None:
    naive_now = datetime(2026, 12, 1, 15, 0, 0)
    assert verdict(AGE, published="2026-11-28T15:00:00Z", now=naive_now) == ADMITTED


@pytest.mark.parametrize("published", [None, "", "yesterday", "2026-13-01T00:00:00Z", "9" * 100])
def test_a_version_without_a_usable_publish_time_is_denied_by_default(
    published: str | None,
) -> None:
    result = verdict(AGE, published=published)
    assert denied_by(result) == "minimum-age"
    assert result.reason == (
        "left-pad@1.3.0 has no publish time in the packument, so its age is unknown; "
        "the minimum release age is 3 days"
    )


@pytest.mark.parametrize("published", [None, "not a time"])
def test_missing_time_allow_admits_a_version_without_a_usable_publish_time(
    published: str | None,
) -> None:
    rules = AGE + 'missing_time = "allow"\n'
    assert verdict(rules, published=published) == ADMITTED


def test_missing_time_allow_still_denies_a_version_known_to_be_too_young() -> None:
    rules = AGE + 'missing_time = "allow"\n'
    assert denied_by(verdict(rules, published="2026-12-01T14:00:00Z")) == "minimum-age"


def test_an_exempt_package_skips_the_age_rule() -> None:
    assert verdict(AGE, "@acme/fresh", "1.0.0", published="2026-12-01T14:59:00Z") == ADMITTED
    assert verdict(AGE, "@acme/fresh", "1.0.0", published=None) == ADMITTED


def test_without_an_age_table_the_default_cooldown_of_one_day_applies() -> None:
    # a worm's version is pulled within hours: the cooldown held in every 2025-26 compromise
    young = verdict(DEFAULT_RULES, published="2026-12-01T14:40:00Z")  # 20 minutes old
    assert denied_by(young) == "minimum-age"
    assert "the minimum release age is 1 day (mirrorgate's default cooldown)" in reason_of(young)
    assert verdict(DEFAULT_RULES, published="2026-11-30T14:59:59Z") == ADMITTED
    # a version without a publish time is not shown to be young: the default admits it
    assert verdict(DEFAULT_RULES, published=None) == ADMITTED


def test_a_zero_minimum_age_turns_the_rule_off() -> None:
    assert verdict('[age]\nminimum = "0d"', published=None) == ADMITTED
    assert verdict('[age]\nminimum = "0"', published="2026-12-01T14:59:59Z") == ADMITTED


@pytest.mark.parametrize(
    ("setting", "text"),
    [
        ('minimum = "90m"', "90 minutes"),
        ('minimum = "36h"', "36 hours"),
        ('minimum = "1d"', "1 day"),
        ('minimum = "2w"', "2 weeks"),
        ("minimum_days = 3", "3 days"),
    ],
)
def test_the_minimum_age_is_stated_in_the_units_it_was_written_in(setting: str, text: str) -> None:
    result = verdict(f"[age]\n{setting}", published="2026-12-01T14:00:00Z")
    assert result.reason is not None
    assert result.reason.endswith(f"; the minimum release age is {text}")


# --- order ------------------------------------------------------------------------------------

EVERYTHING = """
[integrity]
minimum = "sha256"
[age]
minimum = "3d"
[deny]
packages = ["doomed"]
[allow]
packages = ["fine", "scripted", "fresh"]
[install_scripts]
block = true
"""


def test_the_rules_run_in_the_documented_order() -> None:
    assert RULE_NAMES == (
        "integrity-presence",
        "digest-floor",
        "registry-signature",
        "deny-list",
        "allow-list",
        "advisory-unavailable",
        "advisory-malware",
        "advisory-severity",
        "install-scripts",
        "license",
        "license-unknown",
        "minimum-age",
        "provenance-continuity",
        "publisher-change",
        "new-capability",
        "young-package-capability",
        "new-install-script",
        "new-dependency-young",
        "obfuscated-code",
        "typosquat",
        "new-dependency-outside",
        "unreadable-release",
        "young-package-install-script",
    )


@pytest.mark.parametrize(
    ("name", "dist", "rule"),
    [
        ("doomed", {}, "integrity-presence"),
        ("doomed", {"shasum": shasum()}, "digest-floor"),
        ("doomed", None, "deny-list"),
        ("unlisted", None, "allow-list"),
        ("scripted", None, "install-scripts"),
        ("fresh", None, "minimum-age"),
    ],
)
def test_the_first_rule_to_deny_a_version_is_the_one_reported(
    name: str, dist: dict[str, str] | None, rule: str
) -> None:
    overrides: dict[str, Any] = {"scripts": {"install": "x"}} if name != "fresh" else {}
    if dist is not None:
        overrides["dist"] = dist
    result = verdict(EVERYTHING, name, published="2026-12-01T14:00:00Z", **overrides)
    assert denied_by(result) == rule


def test_a_version_passing_every_rule_is_admitted() -> None:
    assert verdict(EVERYTHING, "fine") == ADMITTED


def test_evaluation_is_deterministic_and_leaves_the_manifest_untouched() -> None:
    rules = parse_rules(EVERYTHING)
    version = manifest("scripted", scripts={"install": "x"})
    before = copy.deepcopy(version)
    first = evaluate(rules, "scripted", "1.3.0", version, OLD, NOW)
    assert evaluate(rules, "scripted", "1.3.0", version, OLD, NOW) == first
    assert version == before
