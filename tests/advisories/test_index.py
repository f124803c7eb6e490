"""What the index says is affected: OSV ranges and lists read with npm's ordering, severity
from CVSS vectors or the record's label, malware, withdrawn and other ecosystems left out."""

from __future__ import annotations

import pytest

from mirrorgate.advisories import AdvisoryIndex, IndexBuilder, parse_record
from tests.advisories.records import (
    CVSS3_HIGH,
    CVSS3_MEDIUM,
    CVSS4_CRITICAL,
    fixture_records,
    record,
    semver_range,
)


@pytest.fixture(scope="module")
def index() -> AdvisoryIndex:
    builder = IndexBuilder()
    builder.extend(parse_record(document) for document in fixture_records())
    return builder.build()


def ids(index: AdvisoryIndex, name: str, version: str) -> list[str]:
    return [hit.advisory.id for hit in index.hits(name, version)]


def test_the_fixture_export_loads_seven_records_and_skips_the_withdrawn_and_the_pypi_one(
    index: AdvisoryIndex,
) -> None:
    assert index.records == 7
    assert index.skipped == 2


@pytest.mark.parametrize("version", ["0.0.1", "1.0.0", "99.0.0", "1.0.0-rc.1"])
def test_a_malware_record_with_introduced_zero_affects_every_version(
    index: AdvisoryIndex, version: str,
) -> None:
    hits = index.hits("adv-evil", version)
    assert [hit.advisory.id for hit in hits] == ["MAL-2026-1001"]
    assert hits[0].advisory.malware
    assert hits[0].fixed is None


def test_a_version_that_is_not_semver_is_still_covered_by_an_every_version_record(
    index: AdvisoryIndex,
) -> None:
    assert ids(index, "adv-evil", "latest-build") == ["MAL-2026-1001"]
    assert ids(index, "adv-high", "not-semver") == []


def test_a_scoped_malware_record_lists_only_the_versions_it_names(index: AdvisoryIndex) -> None:
    assert ids(index, "@adv/typo", "2.0.1") == ["MAL-2026-1002"]
    assert ids(index, "@adv/typo", "2.0.0") == []
    assert ids(index, "adv/typo", "2.0.1") == []


@pytest.mark.parametrize(("version", "affected"), [
    ("0.1.0", True), ("1.1.9", True), ("1.2.0-beta.1", True), ("1.2.0", False), ("1.3.0", False),
])
def test_introduced_zero_to_fixed_is_everything_below_the_fix_prereleases_included(
    index: AdvisoryIndex, version: str, affected: bool,
) -> None:
    hits = index.hits("adv-high", version)
    assert bool(hits) is affected
    if affected:
        assert hits[0].fixed == "1.2.0"


@pytest.mark.parametrize(("version", "affected"), [
    ("1.9.9", False), ("2.0.0", True), ("2.3.1", True), ("2.3.2", False),
])
def test_last_affected_includes_its_own_version_and_nothing_after(
    index: AdvisoryIndex, version: str, affected: bool,
) -> None:
    assert bool(index.hits("adv-crit", version)) is affected


@pytest.mark.parametrize(("version", "fixed"), [
    ("0.9.0", None), ("1.0.0", "1.0.5"), ("1.0.4", "1.0.5"), ("1.0.5", None),
    ("2.0.0-alpha", "2.1.0"), ("2.0.9", "2.1.0"), ("2.1.0", None),
])
def test_two_intervals_in_one_range_each_name_their_own_fix(
    index: AdvisoryIndex, version: str, fixed: str | None,
) -> None:
    hits = index.hits("adv-moderate", version)
    assert (hits[0].fixed if hits else None) == fixed
    assert bool(hits) is (fixed is not None)


def test_an_explicit_version_list_affects_exactly_those_versions(index: AdvisoryIndex) -> None:
    assert ids(index, "adv-listed", "3.0.0") == ["GHSA-list-0000-0004"]
    assert ids(index, "adv-listed", "3.0.1") == ["GHSA-list-0000-0004"]
    assert ids(index, "adv-listed", "3.0.2") == []


def test_a_withdrawn_record_affects_nothing(index: AdvisoryIndex) -> None:
    assert ids(index, "adv-withdrawn", "1.0.0") == []


def test_a_record_for_another_ecosystem_is_not_read_for_npm(index: AdvisoryIndex) -> None:
    assert ids(index, "adv-high", "5.0.0") == []


def test_a_name_no_advisory_mentions_costs_one_lookup_and_has_no_hits(
    index: AdvisoryIndex,
) -> None:
    assert index.hits("lodash", "4.17.21") == []
    assert index.entries("lodash") == ()


@pytest.mark.parametrize(("vectors", "label", "severity", "score"), [
    ({"CVSS_V3": CVSS3_HIGH}, None, "high", 7.5),
    ({"CVSS_V4": CVSS4_CRITICAL}, None, "critical", 9.3),
    ({"CVSS_V3": CVSS3_MEDIUM}, "CRITICAL", "medium", 4.6),  # the vector wins over the label
    ({"CVSS_V3": CVSS3_MEDIUM, "CVSS_V4": CVSS4_CRITICAL}, None, "critical", 9.3),
    ({}, "MODERATE", "medium", None),
    ({}, "LOW", "low", None),
    ({"CVSS_V3": "CVSS:3.1/AV:BOGUS"}, "HIGH", "high", None),  # a bad vector falls to the label
    ({}, None, "unknown", None),
])
def test_severity_comes_from_the_highest_cvss_vector_else_the_records_label(
    vectors: dict[str, str], label: str | None, severity: str, score: float | None,
) -> None:
    parsed = parse_record(record("GHSA-sev", "pkg", vectors=vectors, label=label,
                                 ranges=[semver_range(("introduced", "0"))]))
    assert parsed is not None
    assert parsed.advisory.severity == severity
    assert parsed.advisory.cvss_score == score


def test_a_mal_alias_makes_a_ghsa_record_malware() -> None:
    parsed = parse_record(record("GHSA-malw", "pkg", aliases=["MAL-2026-9"],
                                 ranges=[semver_range(("introduced", "0"))]))
    assert parsed is not None
    assert parsed.advisory.malware
    assert parsed.advisory.severity == "critical"


def test_a_summary_with_control_characters_is_escaped_for_a_terminal() -> None:
    parsed = parse_record(record("GHSA-ansi", "pkg", summary="bad\x1b[31m red\nline",
                                 ranges=[semver_range(("introduced", "0"))]))
    assert parsed is not None
    assert parsed.advisory.summary == "bad\\x1b[31m red line"


@pytest.mark.parametrize("document", [
    None, [], {"id": 5}, {"id": "X", "affected": "nope"},
    {"id": "X", "affected": [{"package": {"ecosystem": "npm"}}]},
    {"id": "X", "affected": [{"package": {"ecosystem": "npm", "name": "a"},
                              "ranges": [{"type": "GIT", "events": [{"introduced": "0"}]}]}]},
])
def test_a_record_that_cannot_be_used_is_skipped_not_raised(document: object) -> None:
    assert parse_record(document) is None


def test_the_npm_range_for_audit_joins_every_interval_and_listed_version(
    index: AdvisoryIndex,
) -> None:
    (moderate,) = index.entries("adv-moderate")
    assert moderate.npm_range() == ">=1.0.0 <1.0.5 || >=2.0.0-0 <2.1.0"
    (crit,) = index.entries("adv-crit")
    assert crit.npm_range() == ">=2.0.0 <=2.3.1"
    (high,) = index.entries("adv-high")
    assert high.npm_range() == "<1.2.0"


def test_a_fixed_version_is_known_as_a_fix_for_the_fast_lane(index: AdvisoryIndex) -> None:
    assert index.is_fix("adv-high", "1.2.0")
    assert index.is_fix("adv-moderate", "2.1.0")
    assert not index.is_fix("adv-high", "1.2.1")
    assert not index.is_fix("adv-crit", "2.3.1")  # last_affected names no fix
