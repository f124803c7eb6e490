"""The advisory rules: what is denied, the sentence a person reads, and the fast lane.

Each denial is the attack it stops: a known-malicious release, a version with a published
vulnerability at or above the chosen severity. The reason names the advisory ids, their
summaries and the version to upgrade to, because "denied" alone sends a person to a search
engine.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from mirrorgate.rules import Rules, RulesError, evaluate, parse_rules, rules_summary
from tests.advisories.builders import advisory_rules
from tests.advisories.records import malware, record, semver_range
from tests.rules.builders import NOW, OLD, manifest


def verdict(rules: Rules, name: str, version: str,
            published: str | None = OLD) -> tuple[str | None, str | None]:
    found = evaluate(rules, name, version, manifest(name, version), published, NOW)
    return found.rule, found.reason


def test_the_table_with_only_a_source_takes_the_documented_defaults(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, load=False)
    assert rules_summary(rules)["advisories"] == {
        "source": str(tmp_path / "osv-npm.zip"), "refresh": "1 hour", "malware": "deny",
        "severity": "high", "unavailable": "admit", "max_age": "3 days", "ignore": [],
        "fast_lane": True, "by_default": False,
    }


def test_a_relative_source_is_read_beside_the_rules_file() -> None:
    rules = parse_rules('[advisories]\nsource = "osv.zip"\n', "/etc/mirrorgate/rules.toml")
    assert rules.advisories is not None
    assert rules.advisories.source == "/etc/mirrorgate/osv.zip"


def test_every_bad_key_in_the_table_is_named() -> None:
    with pytest.raises(RulesError) as raised:
        parse_rules('[advisories]\nsource = "http://example.com/osv.zip"\nseverity = "hi"\n'
                    'unavailable = "maybe"\nrefresh = "soon"\nignore = "GHSA-1"\nmalwar = 1\n')
    keys = [problem.split(":")[0] for problem in raised.value.problems]
    assert keys == ["advisories.malwar", "advisories.source", "advisories.refresh",
                    "advisories.severity", "advisories.unavailable", "advisories.ignore"]
    assert "https only" in raised.value.problems[1]


def test_a_table_without_a_source_is_refused() -> None:
    with pytest.raises(RulesError, match=r"advisories\.source: is required"):
        parse_rules('[advisories]\nseverity = "high"\n')


def test_a_known_malicious_release_is_denied_naming_the_mal_record(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path)
    rule, reason = verdict(rules, "adv-evil", "1.0.0")
    assert rule == "advisory-malware"
    assert reason == ("adv-evil@1.0.0 is malware according to MAL-2026-1001 (Malicious code in "
                      "adv-evil (npm); malware; no fixed version); no version fixes every one "
                      "of them: choose another package or version")


def test_a_scoped_malicious_version_is_denied_and_its_neighbour_admitted(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path)
    assert verdict(rules, "@adv/typo", "2.0.1")[0] == "advisory-malware"
    assert verdict(rules, "@adv/typo", "2.0.0") == (None, None)


def test_a_high_vulnerability_is_denied_with_its_summary_and_the_version_that_fixes_it(
    tmp_path: Path,
) -> None:
    rules = advisory_rules(tmp_path)
    rule, reason = verdict(rules, "adv-high", "1.1.0")
    assert rule == "advisory-severity"
    assert reason == ("adv-high@1.1.0 is affected by GHSA-v3hi-0000-0001 (Prototype pollution "
                      "in adv-high; high severity; fixed in 1.2.0); upgrade to 1.2.0 or later")
    assert verdict(rules, "adv-high", "1.2.0") == (None, None)


def test_a_critical_v4_vulnerability_with_no_fix_says_so(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path)
    rule, reason = verdict(rules, "adv-crit", "2.3.1")
    assert rule == "advisory-severity"
    assert reason is not None
    assert "critical severity; no fixed version" in reason


def test_several_advisories_on_one_version_are_all_named_and_the_upgrade_clears_them_all(
    tmp_path: Path,
) -> None:
    rules = advisory_rules(tmp_path, records=[
        record("GHSA-aaaa", "multi", summary="first", label="HIGH",
               ranges=[semver_range(("introduced", "0"), ("fixed", "1.0.3"))]),
        record("GHSA-bbbb", "multi", summary="second", label="CRITICAL",
               ranges=[semver_range(("introduced", "0"), ("fixed", "1.1.0"))]),
    ])
    _, reason = verdict(rules, "multi", "1.0.0")
    assert reason == ("multi@1.0.0 is affected by GHSA-aaaa (first; high severity; fixed in "
                      "1.0.3); GHSA-bbbb (second; critical severity; fixed in 1.1.0); upgrade "
                      "to 1.1.0 or later")


@pytest.mark.parametrize(("severity", "moderate", "high", "critical"), [
    ("low", True, True, True),
    ("medium", True, True, True),
    ("high", False, True, True),
    ("critical", False, False, True),
    ("none", False, False, False),
])
def test_the_severity_threshold_denies_at_or_above_it(
    tmp_path: Path, severity: str, moderate: bool, high: bool, critical: bool,
) -> None:
    rules = advisory_rules(tmp_path, f'severity = "{severity}"')
    assert (verdict(rules, "adv-moderate", "1.0.1")[0] is not None) is moderate
    assert (verdict(rules, "adv-high", "1.0.0")[0] is not None) is high
    assert (verdict(rules, "adv-crit", "2.0.0")[0] is not None) is critical
    assert verdict(rules, "adv-evil", "1.0.0")[0] == "advisory-malware"  # severity aside


def test_malware_admit_lets_mal_records_through(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, 'malware = "admit"')
    assert verdict(rules, "adv-evil", "1.0.0") == (None, None)


def test_an_ignored_advisory_is_admitted_by_its_id_or_an_alias(tmp_path: Path) -> None:
    by_id = advisory_rules(tmp_path, 'ignore = ["GHSA-v3hi-0000-0001", "MAL-2026-1001"]')
    assert verdict(by_id, "adv-high", "1.0.0") == (None, None)
    assert verdict(by_id, "adv-evil", "1.0.0") == (None, None)
    assert verdict(by_id, "adv-crit", "2.0.0")[0] == "advisory-severity"
    by_alias = advisory_rules(tmp_path, 'ignore = ["CVE-2026-0001"]')
    assert verdict(by_alias, "adv-high", "1.0.0") == (None, None)


def test_before_the_first_load_unavailable_admit_admits(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, 'unavailable = "admit"', load=False)
    assert verdict(rules, "adv-evil", "1.0.0") == (None, None)


def test_before_the_first_load_unavailable_deny_denies_every_public_version(
    tmp_path: Path,
) -> None:
    rules = advisory_rules(tmp_path, 'unavailable = "deny"', load=False)
    rule, reason = verdict(rules, "left-pad", "1.3.0")
    assert rule == "advisory-unavailable"
    assert reason == ("left-pad@1.3.0 cannot be checked against known advisories: no advisory "
                      "data has been loaded yet, and the rules deny when it is unavailable")


def test_data_older_than_max_age_denies_under_unavailable_deny(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, 'unavailable = "deny"\nmax_age = "3d"',
                           modified=NOW - timedelta(days=4))
    rule, reason = verdict(rules, "left-pad", "1.3.0")
    assert rule == "advisory-unavailable"
    assert reason is not None
    assert "the advisory data is 4 days old, older than max_age 3 days" \
        in reason


def test_stale_data_under_unavailable_admit_still_denies_what_it_knows(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, 'unavailable = "admit"\nmax_age = "3d"',
                           modified=NOW - timedelta(days=30))
    assert verdict(rules, "left-pad", "1.3.0") == (None, None)
    assert verdict(rules, "adv-evil", "1.0.0")[0] == "advisory-malware"


FRESH = (NOW - timedelta(hours=2)).isoformat()


def test_the_fast_lane_lets_a_fresh_fix_through_the_minimum_age(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, extra='[age]\nminimum = "3d"\n')
    assert verdict(rules, "adv-high", "1.2.0", FRESH) == (None, None)
    assert verdict(rules, "adv-high", "1.2.1", FRESH)[0] == "minimum-age"
    assert verdict(rules, "adv-moderate", "2.1.0", FRESH) == (None, None)


def test_without_the_fast_lane_a_fresh_fix_waits_out_the_minimum_age(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, "fast_lane = false", extra='[age]\nminimum = "3d"\n')
    assert verdict(rules, "adv-high", "1.2.0", FRESH)[0] == "minimum-age"


def test_the_fast_lane_never_admits_a_fix_that_is_itself_affected(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, extra='[age]\nminimum = "3d"\n', records=[
        record("GHSA-old", "chain", label="HIGH",
               ranges=[semver_range(("introduced", "0"), ("fixed", "2.0.0"))]),
        malware("MAL-2026-7", "chain", ["2.0.0"]),
    ])
    assert verdict(rules, "chain", "2.0.0", FRESH)[0] == "advisory-malware"


def test_the_deny_list_still_wins_over_an_advisory(tmp_path: Path) -> None:
    rules = advisory_rules(tmp_path, extra='[deny]\npackages = ["adv-evil"]\n')
    assert verdict(rules, "adv-evil", "1.0.0")[0] == "deny-list"
