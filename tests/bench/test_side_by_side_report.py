"""The side-by-side table made of records: recall counts a case refused when any of its
releases is, false positives count real updates, and two runs' records (main's tree and a
branch's) merge into one row per case with both runs' columns."""

from __future__ import annotations

from typing import Any

from bench.corpus import NEW_PACKAGE, SHAPE, UPDATE
from bench.side_by_side_report import Record, merge, table


def _release(name: str, refused: bool, column: str = "main: defaults",
             guarddog: str | None = "no_risks_detected", issues: int = 0) -> dict[str, Any]:
    return {"name": name, "version": "1.0.1", "tarball": f"{name}.tgz", "size": 2_000_000,
            "mirrorgate": {column: {"refused": refused, "rule": "r" if refused else None,
                                    "reason": None, "error": None, "cpu": 0.004}},
            "guarddog": None if guarddog is None else {
                "label": guarddog, "issues": issues, "rules": ["x"] * bool(issues),
                "cpu": 1.0, "error": None}}


def _record(kind: str, label: str, *releases: dict[str, Any]) -> Record:
    return {"kind": kind, "label": label, "source": "", "malicious": kind != UPDATE,
            "releases": list(releases)}


def test_an_incident_is_refused_when_any_of_its_releases_is_and_updates_count_apart() -> None:
    found = [
        _record(SHAPE, "event-stream", _release("event-stream", False),
                _release("flatmap-stream", True, guarddog="suspicious", issues=2)),
        _record(SHAPE, "colors", _release("colors", False)),
        _record(NEW_PACKAGE, "lodashs", _release("lodashs", True, guarddog="high_risk",
                                                 issues=2)),
        _record(UPDATE, "left-pad", _release("left-pad", False, guarddog="low", issues=1)),
    ]

    lines = table(found).splitlines()

    assert lines[0] == ("|  | cases | mirrorgate main: defaults | GuardDog, any rule | "
                        "GuardDog, suspicious or worse | GuardDog, high risk |")
    assert "| recall: malicious new package | 1 | 1/1 (100.0%) | 1/1 (100.0%) | 1/1 (100.0%) "\
        "| 1/1 (100.0%) |" in lines
    assert "| recall: rebuilt incident shape | 2 | 1/2 (50.0%) | 1/2 (50.0%) | 1/2 (50.0%) "\
        "| 0/2 (0.0%) |" in lines
    assert "| false positives: real updates | 1 | 0/1 (0.0%) | 1/1 (100.0%) | 0/1 (0.0%) "\
        "| 0/1 (0.0%) |" in lines
    assert "| CPU per tarball, mean (median) | 5 | 4 ms (4 ms) | 1000 ms (1000 ms) | " \
        "1000 ms (1000 ms) | 1000 ms (1000 ms) |" in lines
    assert "| CPU per MB of tarball | 10 MB | 2.0 ms | 500 ms | 500 ms | 500 ms |" in lines


def test_two_runs_merge_into_one_row_per_case_with_both_runs_columns() -> None:
    main = [_record(SHAPE, "chalk", _release("chalk", False))]
    branch = [_record(SHAPE, "chalk", _release("chalk", True, "capabilities: defaults",
                                               guarddog=None))]

    merged = merge([main, branch])

    assert len(merged) == 1
    assert set(merged[0]["releases"][0]["mirrorgate"]) == {"main: defaults",
                                                           "capabilities: defaults"}
    assert merged[0]["releases"][0]["guarddog"]["label"] == "no_risks_detected"
    assert "| recall: rebuilt incident shape | 1 | 0/1 (0.0%) | 1/1 (100.0%) |" in table(merged)
