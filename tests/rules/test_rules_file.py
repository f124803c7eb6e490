"""The rules file: what it may say, what it means, and the error for each way it can be wrong."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.rules import (
    DEFAULT_RULES,
    Rules,
    RulesError,
    load_rules,
    parse_rules,
    rules_summary,
)
from mirrorgate.rules.patterns import Subject
from mirrorgate.rules.summary import DEFAULT_AGE_WHY, POLICY_TABLES

SERVING_DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def problems(text: str) -> list[str]:
    with pytest.raises(RulesError) as raised:
        parse_rules(text, source="rules.toml")
    return raised.value.problems


def only_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


FIRST_PARTY = rules_summary(DEFAULT_RULES)["private"]["first_party"]
PUBLISHERS = rules_summary(DEFAULT_RULES)["publish"]["who"]
RELEASE_DEFAULT = {"new-capability": "quarantine", "young-package-capability": "quarantine",
                   "new-install-script": "off", "new-dependency-young": "off",
                   "obfuscated-code": "off", "typosquat": "off",
                   "new-dependency-outside": "off", "unreadable-release": "deny",
                   "young-package-install-script": "off", "young": "30 days",
                   "young_package": "30 days", "quarantine": "7 days", "allow": [],
                   "unavailable": "admit"}
"""Without a `[release]` table, what a release's code can do (issue 55), and what it cannot
read refused (issue 53)."""


def test_private_names_and_merge_public_load_and_decide_which_names_stay_private() -> None:
    rules = parse_rules('[private]\nnames = ["@acme/*", "acme-*"]\nmerge_public = ["acme-fork"]')
    assert rules.private_alone("@acme/tools")
    assert rules.private_alone("acme-utils")
    assert not rules.private_alone("acme-fork")  # merge_public takes it back, gated
    assert not rules.private_alone("left-pad")


def test_publish_names_load_and_nothing_is_publishable_without_them() -> None:
    rules = parse_rules('[publish]\nnames = ["@acme/*", "acme-*"]')
    assert rules.publishable.covers_name("@acme/widget")
    assert rules.publishable.covers_name("acme-tools")
    assert not rules.publishable.covers_name("left-pad")
    assert not DEFAULT_RULES.publishable.covers_name("@acme/widget")  # deny by default
    assert rules_summary(rules)["publish"]["names"] == ["@acme/*", "acme-*"]


def test_a_publish_name_with_a_version_range_is_an_error() -> None:
    assert only_problem('[publish]\nnames = ["@acme/widget@^1"]') == (
        'publish.names: "@acme/widget@^1" has a version range; [publish] lists name whole '
        'packages, like "@acme/*", "acme-*" or "acme-utils"')


def test_a_private_name_with_a_version_range_is_an_error() -> None:
    assert only_problem('[private]\nnames = ["acme-utils@^1"]') == (
        'private.names: "acme-utils@^1" has a version range; [private] lists name whole '
        'packages, like "@acme/*", "acme-*" or "acme-utils"')


def documented_example() -> str:
    text = SERVING_DOC.read_text(encoding="utf-8")
    rules_section = text[text.index("\n## Admission rules\n"):]
    match = re.search(r"```toml\n(.*?)```", rules_section, re.DOTALL)
    assert match is not None, "docs/serving.md's Admission rules should hold a ```toml example"
    return match.group(1)


# --- what a file means ------------------------------------------------------------------------


def test_no_file_means_the_default_rules() -> None:
    assert load_rules(None) is DEFAULT_RULES


def test_an_empty_file_means_the_default_rules() -> None:
    assert parse_rules("") == DEFAULT_RULES


def test_the_default_rules_are_integrity_presence_with_sha1_admitted_as_weak() -> None:
    assert rules_summary(DEFAULT_RULES) == {
        "source": "<defaults>",
        "order": [
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
        ],
        "integrity": {"presence": "always on", "minimum": "sha1",
                      "sha1_only": "admitted, flagged weak"},
        "age": {"minimum": "1 day", "minimum_seconds": 86400, "missing_time": "allow",
                "exempt": [], "default": DEFAULT_AGE_WHY},
        "deny": {"packages": []},
        "allow": {"packages": [], "mode": "everything not denied"},
        "install_scripts": {"block": False, "allow": []},
        "advisories": None,
        "signatures": {"verify": False, "missing": "admit"},
        "provenance": {"mode": "off", "window": 5, "quarantine": "7 days", "allow": []},
        "publisher": {"mode": "off", "window": 20, "quarantine": "7 days", "allow": []},
        "release": RELEASE_DEFAULT,
        "license": None,
        "private": {"names": [], "merge_public": [], "first_party": FIRST_PARTY},
        "mode": "enforce",
        "modes": {table: "enforce" for table in POLICY_TABLES},
        "exceptions": [],
        "publish": {"names": [], "who": PUBLISHERS},
    }


def test_the_example_in_the_docs_loads_and_describes_itself(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(documented_example(), encoding="utf-8")
    rules = load_rules(path)
    assert rules_summary(rules) == {
        "source": str(path),
        "order": rules_summary(DEFAULT_RULES)["order"],
        "integrity": {"presence": "always on", "minimum": "sha1",
                      "sha1_only": "admitted, flagged weak"},
        "age": {"minimum": "3 days", "minimum_seconds": 259200, "missing_time": "deny",
                "exempt": []},
        "deny": {"packages": ["event-stream@3.3.6", "@evil/*", "lodash@<4.17.21"]},
        "allow": {"packages": [], "mode": "everything not denied"},
        "install_scripts": {"block": True, "allow": ["esbuild", "@prisma/engines"]},
        "advisories": None,
        **{table: rules_summary(DEFAULT_RULES)[table]
           for table in ("signatures", "provenance", "publisher", "release", "license")},
        "private": {"names": ["@acme/*", "acme-*"], "merge_public": [],
                    "first_party": FIRST_PARTY},
        "mode": "enforce",
        "modes": {table: "enforce" for table in POLICY_TABLES},
        "exceptions": [],
        "publish": {"names": [], "who": PUBLISHERS},
    }


def test_a_floor_above_sha1_is_described_as_denying_sha1_only_versions() -> None:
    described = rules_summary(parse_rules('[integrity]\nminimum = "SHA384"'))
    assert described["integrity"]["minimum"] == "sha384"
    assert described["integrity"]["sha1_only"] == "denied"


def test_a_non_empty_allow_list_is_described_as_admitting_only_its_entries() -> None:
    described = rules_summary(parse_rules('[allow]\npackages = ["left-pad"]'))
    assert described["allow"] == {"packages": ["left-pad"], "mode": "only these"}


@pytest.mark.parametrize(
    ("setting", "minimum"),
    [
        ('minimum = "90m"', timedelta(minutes=90)),
        ('minimum = " 36h "', timedelta(hours=36)),
        ('minimum = "3 d"', timedelta(days=3)),
        ('minimum = "2w"', timedelta(weeks=2)),
        ("minimum_days = 3", timedelta(days=3)),
        ('minimum = "3650d"', timedelta(days=3650)),
    ],
)
def test_a_minimum_age_may_be_written_as_a_duration_or_in_days(
    setting: str, minimum: timedelta
) -> None:
    assert parse_rules(f"[age]\n{setting}").minimum_age == minimum


def test_missing_time_allow_is_read() -> None:
    rules = parse_rules('[age]\nminimum = "1d"\nmissing_time = "allow"')
    assert rules.missing_time_allowed
    assert rules_summary(rules)["age"]["missing_time"] == "allow"


def test_a_rules_file_is_read_from_disk_and_named_as_its_source(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[deny]\npackages = ["left-pad"]\n', encoding="utf-8")
    rules = load_rules(path)
    assert isinstance(rules, Rules)
    assert rules.source == str(path)
    assert rules.deny.texts() == ["left-pad"]


# --- files that cannot be read ----------------------------------------------------------------


def test_a_missing_file_is_an_error_naming_the_file_and_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(RulesError) as raised:
        load_rules(path)
    assert str(raised.value).startswith(f"{path}: cannot read the rules file (")
    assert "MIRRORGATE_RULES_FILE" in str(raised.value)


def test_a_directory_is_an_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot read the rules file"):
        load_rules(tmp_path)


def test_a_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_bytes(b"[deny]\npackages = [\"\xff\xfe\"]\n")
    with pytest.raises(RulesError, match="is not UTF-8 text"):
        load_rules(path)


def test_a_file_that_is_not_toml_is_an_error_saying_where() -> None:
    problem = only_problem('[deny]\npackages = ["left-pad",, "right-pad"]\n')
    assert problem.startswith("is not valid TOML (")
    assert "(at line 2, column" in problem


def test_the_error_text_names_the_file_on_every_line() -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules("[nope]\n[age]\nminimum = 3", source="/etc/mirrorgate/rules.toml")
    lines = str(raised.value).splitlines()
    assert len(lines) == 2
    assert all(line.startswith("/etc/mirrorgate/rules.toml: ") for line in lines)


# --- files that cannot be honoured ------------------------------------------------------------


def test_an_unknown_table_is_an_error_suggesting_the_right_one() -> None:
    assert only_problem("[ages]\nminimum = '3d'") == (
        "[ages]: unknown table (did you mean [age]?); the tables are [integrity], [age], "
        "[deny], [allow], [install_scripts], [advisories], [signatures], [provenance], "
        "[publisher], [release], [license], [private], [publish]"
    )


def test_an_unknown_key_is_an_error_suggesting_the_right_one() -> None:
    assert only_problem("[deny]\npackage = ['left-pad']") == (
        "deny.package: unknown key (did you mean packages?); [deny] takes packages, mode"
    )


def test_a_top_level_key_is_an_error() -> None:
    assert only_problem('minimum = "3d"').startswith(
        "minimum: unknown top-level key; rules live in the tables [integrity], [age]"
    )


def test_a_table_written_as_a_value_is_an_error() -> None:
    assert only_problem("deny = ['left-pad']") == (
        "deny: should be a table ([deny]), got an array"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[integrity]\nminimum = 256",
         'integrity.minimum: should be a string, got an integer; write "sha1", "sha256", '
         '"sha384" or "sha512"'),
        ('[integrity]\nminimum = "md5"',
         'integrity.minimum: "md5" is not one of "sha1", "sha256", "sha384" or "sha512"'),
        ('[age]\nminimum = "3d"\nmissing_time = "skip"',
         'age.missing_time: "skip" is not one of "deny" or "allow"'),
        ('[age]\nminimum = "3d"\nmissing_time = false',
         'age.missing_time: should be a string, got a boolean; write "deny" or "allow"'),
        ('[install_scripts]\nblock = "yes"',
         "install_scripts.block: should be true or false, got a string"),
        ('[deny]\npackages = "lodash"',
         'deny.packages: should be an array of patterns such as ["left-pad", "@acme/*", '
         '"acme-*" or "lodash@<4.17.21"], got a string'),
        ("[allow]\npackages = [1979-05-27]",
         'allow.packages[0]: should be a string pattern such as "left-pad", "@acme/*", '
         '"acme-*" or "lodash@<4.17.21", got a date or time'),
        ('[age]\nminimum = "1d"\nexempt = {}',
         'age.exempt: should be an array of patterns such as ["left-pad", "@acme/*", '
         '"acme-*" or "lodash@<4.17.21"], got a table'),
    ],
)
def test_a_value_of_the_wrong_type_or_outside_its_choices_is_an_error(
    text: str, problem: str
) -> None:
    assert only_problem(text) == problem


@pytest.mark.parametrize("duration", ["3 days", "3", "-1d", "1.5d", "3y", "", "d3", "0x10d"])
def test_a_bad_duration_is_an_error_showing_good_ones(duration: str) -> None:
    assert only_problem(f'[age]\nminimum = "{duration}"') == (
        f'age.minimum: "{duration}" is not a duration; write a whole number and a unit, '
        'like "90m", "36h", "3d" or "2w"'
    )


def test_a_duration_that_is_not_a_string_is_an_error() -> None:
    assert only_problem("[age]\nminimum = 3") == (
        'age.minimum: should be a string, got an integer; write a whole number and a unit, '
        'like "90m", "36h", "3d" or "2w"'
    )


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("1.5", "1.5"), ("true", "a boolean"),
                                              ('"3"', "a string")])
def test_minimum_days_must_be_a_whole_number_of_days(value: str, shown: str) -> None:
    assert only_problem(f"[age]\nminimum_days = {value}") == (
        f"age.minimum_days: should be a whole number of days (0 or more), got {shown}; "
        "e.g. minimum_days = 3"
    )


@pytest.mark.parametrize(
    "setting", ['minimum = "3651d"', 'minimum = "999999999w"', "minimum_days = 9223372036854775807"]
)
def test_a_minimum_age_beyond_ten_years_is_an_error_not_an_overflow(setting: str) -> None:
    assert "is longer than 3650 days" in only_problem(f"[age]\n{setting}")


def test_an_age_table_without_a_minimum_keeps_the_default_cooldown() -> None:
    rules = parse_rules('[age]\nexempt = ["@acme/*"]')
    assert rules.age_is_default
    assert rules.minimum_age == timedelta(days=1)
    assert rules.age_exempt.texts() == ["@acme/*"]


def test_both_minimum_and_minimum_days_is_an_error() -> None:
    assert only_problem('[age]\nminimum = "3d"\nminimum_days = 3') == (
        "age.minimum_days: set either age.minimum or age.minimum_days, not both"
    )


def test_a_bad_range_is_an_error_naming_the_entry_and_showing_a_good_one() -> None:
    text = '[deny]\npackages = ["event-stream@3.3.6", "@evil/*", "lodash@<<4"]'
    assert only_problem(text) == (
        'deny.packages[2]: "lodash@<<4" is not a valid semver range; '
        'write it like "lodash@<4.17.21"'
    )


@pytest.mark.parametrize(
    ("key", "table"),
    [
        ("deny.packages", "[deny]\npackages"),
        ("allow.packages", "[allow]\npackages"),
        ("install_scripts.allow", "[install_scripts]\nallow"),
        ("age.exempt", '[age]\nminimum = "1d"\nexempt'),
        ("private.names", "[private]\nnames"),
        ("private.merge_public", "[private]\nmerge_public"),
    ],
)
def test_every_package_list_reports_a_bad_pattern_by_key_and_index(key: str, table: str) -> None:
    assert only_problem(f'{table} = ["left-pad", "le*ft"]').startswith(f'{key}[1]: "le*ft"')


def test_every_problem_in_a_file_is_reported_at_once() -> None:
    found = problems(
        """
        [integrity]
        minimum = "md5"
        [age]
        minimum = "soon"
        [deny]
        packages = ["lodash@<<4", 7]
        [install_scripts]
        blok = true
        """
    )
    assert [problem.split(":", 1)[0] for problem in found] == [
        "install_scripts.blok",
        "integrity.minimum",
        "age.minimum",
        "deny.packages[0]",
        "deny.packages[1]",
    ]


# --- modes and exceptions ---------------------------------------------------------------------


def test_an_exception_without_an_end_a_reason_or_who_asked_is_an_error() -> None:
    assert problems('[[exception]]\npackage = "left-pad"\n') == [
        "exception[0].until: is required: an exception says which package, until when, why "
        "and who asked for it",
        "exception[0].reason: is required: an exception says which package, until when, why "
        "and who asked for it",
        "exception[0].by: is required: an exception says which package, until when, why and "
        "who asked for it",
    ]


def test_an_exception_names_only_policy_rules() -> None:
    assert only_problem('[[exception]]\npackage = "left-pad"\nuntil = 2030-01-01\n'
                        'reason = "r"\nby = "b"\nrules = ["integrity-presence"]\n').startswith(
        "exception[0].rules: should be a list of the rules it lifts, from ")


def test_an_exception_that_has_ended_is_a_warning_and_lifts_nothing() -> None:
    rules = parse_rules('[deny]\npackages = ["left-pad"]\n\n[[exception]]\npackage = '
                        '"left-pad"\nuntil = 2020-01-01\nreason = "r"\nby = "alice"\n')
    now = datetime(2026, 12, 1, tzinfo=UTC)

    [warning] = rules.warnings(now)
    assert "ended at 2020-01-01T00:00:00Z and lifts nothing" in warning
    assert rules.exception_for("deny-list", Subject("left-pad", "1.0.0"), now) is None


def test_a_mode_is_enforce_or_report_for_the_file_or_a_table() -> None:
    rules = parse_rules('mode = "report"\n\n[deny]\nmode = "enforce"\npackages = ["x"]\n')
    assert rules.mode_of("deny") == "enforce"
    assert rules.mode_of("age") == "report"
    assert only_problem('mode = "dry-run"\n') == (
        'mode: "dry-run" is not one of "enforce" or "report"')
