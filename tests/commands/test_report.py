"""The commands' shared output: a bar on a terminal and plain lines elsewhere, the findings
table and summary, `--json`, and the exit codes CI reads (0 clean, 1 findings, 2 usage)."""

from __future__ import annotations

import io

import orjson

from mirrorgate.commands.report import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    Outcome,
    Report,
    render_table,
    usage_error,
)

DENIED = Outcome("alpha", "1.2.0", "denied", finding=True, reason="deny-list",
                 detail="nearest admitted: 1.0.0", where="package-lock.json:33")
ADMITTED = Outcome("zeta", "1.0.1", "admitted")


def _report(as_json: bool, tty: bool = False) -> tuple[Report, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Report("check", as_json=as_json, out=out, err=err, tty=tty), out, err


def test_a_finding_exits_1_and_is_listed_with_its_reason() -> None:
    report, out, _err = _report(as_json=False)
    report.add(ADMITTED)
    report.add(DENIED)
    assert report.finish() == EXIT_FINDINGS
    text = out.getvalue()
    assert "alpha    1.2.0    denied  deny-list  nearest admitted: 1.0.0  package-lock.json:33" \
        in text
    assert "zeta" not in text  # admitted versions are counted, not listed
    assert "admitted  1" in text
    assert "denied    1" in text
    assert text.endswith("check: 1 finding(s) in 2 result(s)\n")


def test_no_finding_exits_0() -> None:
    report, _out, _err = _report(as_json=False)
    report.add(ADMITTED)
    assert report.finish() == EXIT_OK


def test_json_is_one_document_on_stdout_with_every_result() -> None:
    report, out, err = _report(as_json=True)
    report.add(ADMITTED)
    report.add(DENIED)
    report.note("git-thing: a git repository, skipped")
    assert report.finish() == EXIT_FINDINGS
    document = orjson.loads(out.getvalue())
    assert document["exit_code"] == 1
    assert document["summary"] == {"admitted": 1, "denied": 1}
    assert document["results"][1]["reason"] == "deny-list"
    assert document["notes"] == ["git-thing: a git repository, skipped"]
    assert err.getvalue() == ""


def test_progress_is_plain_lines_without_a_terminal() -> None:
    report, out, err = _report(as_json=False, tty=False)
    progress = report.progress(2)
    progress.step("alpha@1.2.0")
    progress.step("zeta@1.0.1")
    progress.close()
    assert err.getvalue() == "check: 1/2 alpha@1.2.0\ncheck: 2/2 zeta@1.0.1\n"
    assert out.getvalue() == ""


def test_progress_is_one_redrawn_bar_on_a_terminal() -> None:
    report, _out, err = _report(as_json=False, tty=True)
    progress = report.progress(2)
    progress.step("alpha@1.2.0")
    progress.step("zeta@1.0.1")
    progress.close()
    drawn = err.getvalue()
    assert drawn.count("\r") == 2
    assert drawn.endswith("\n")
    assert drawn.count("\n") == 1
    assert "[" + "#" * 30 + "] 2/2 zeta@1.0.1" in drawn


def test_a_usage_error_exits_2_saying_why() -> None:
    err = io.StringIO()
    assert usage_error("no lockfile given", err) == EXIT_USAGE
    assert err.getvalue() == "mirrorgate: no lockfile given\n"


def test_tables_align_columns() -> None:
    assert render_table(["A", "BB"], [["xyz", "1"]]) == "A    BB\n---  --\nxyz  1\n"
