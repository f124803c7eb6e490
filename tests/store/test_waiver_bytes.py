"""A waiver admits exactly what it names: one version as written (build metadata included) and
the bytes the operator was shown (docs/serving.md#exceptions). Through `mirrorgate allow`, npm
and `mirrorgate serve`: tests/e2e/test_waivers.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from mirrorgate.rules import RuleException
from mirrorgate.rules.patterns import PatternList, Subject, parse_pattern
from mirrorgate.store.waivers import Waiver, WaiverError, parse_bytes, parse_until

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SEEN = "sha512-" + "A" * 86 + "=="
OTHER = "sha512-" + "B" * 86 + "=="
WAIVED = Waiver("wv", "1.0.0", "alice", "the fix", NOW + timedelta(days=7), NOW, SEEN)


def lifted(exception: RuleException, version: str, integrity: str | None) -> bool:
    return exception.lifts("minimum-age", Subject("wv", version, integrity), NOW)


def test_a_waiver_lifts_its_version_and_bytes_alone_not_a_build_metadata_sibling() -> None:
    exception = WAIVED.exception()

    assert lifted(exception, "1.0.0", SEEN)
    assert not lifted(exception, "1.0.0+evil", SEEN)  # a range would take it: semver equal
    assert not lifted(exception, "1.0.0", OTHER)  # bytes listed later as the same version
    assert not lifted(exception, "1.0.0", "")  # a listing with no digest names no bytes
    assert not lifted(exception, "1.0.1", SEEN)


def test_a_rules_file_exception_still_covers_what_its_pattern_covers() -> None:
    # the control: an `[[exception]]` is a pattern an operator wrote (`wv@1.0.0` is a range)
    exception = RuleException(PatternList.of((parse_pattern("wv@1.0.0"),)),
                              NOW + timedelta(days=7), "the fix", "bob")

    assert lifted(exception, "1.0.0", SEEN)
    assert lifted(exception, "1.0.0", OTHER)
    assert lifted(exception, "1.0.0+build.5", None)


def test_a_waiver_an_earlier_release_kept_names_no_bytes_and_lifts_nothing() -> None:
    kept = json.dumps({"by": "alice", "why": "the fix", "until": "2099-01-01T00:00:00Z",
                       "granted": "2026-01-01T00:00:00Z"})

    waiver = Waiver.from_fact("wv@1.0.0", kept)

    assert waiver is not None
    assert (waiver.integrity, waiver.bound) == ("", False)
    assert not lifted(waiver.exception(), "1.0.0", SEEN)
    assert not lifted(waiver.exception(), "1.0.0", "")
    again = Waiver.from_fact("wv@1.0.0", WAIVED.fact().value or "")
    assert again == WAIVED  # the control: one kept with its bytes reads back bound
    assert again is not None
    assert again.bound


def test_integrity_given_by_hand_is_its_strongest_digest_and_nothing_else_passes() -> None:
    assert parse_bytes(f"sha1-{'A' * 27}= {SEEN}") == SEEN
    for text in ("md5-AAAA", "sha512-not base64!", "", "left-pad@1.3.1"):
        with pytest.raises(WaiverError, match="is not an SRI digest mirrorgate can verify"):
            parse_bytes(text)


@pytest.mark.parametrize(("text", "says"), [
    ("9999-12-31T23:59:59-23:59", "past the ends of the calendar"),
    ("0001-01-01T00:00:00+01:00", "past the ends of the calendar"),
    ("9999-12-31", "outside the times mirrorgate reads"),
    ("2026-01-01T00:00:00+99:00", "is not a date or time"),
    ("x" * 200, "longer than any ISO 8601 time"),
])
def test_an_until_no_calendar_can_hold_is_a_sentence_not_a_traceback(text: str,
                                                                      says: str) -> None:
    with pytest.raises(WaiverError, match=says):
        parse_until(text, NOW)
