"""What every operator command prints, and the exit codes a CI step reads (0 good, 1 findings,
2 usage or configuration error): a progress bar on a terminal (plain lines otherwise), then a
table and a summary, or one JSON document with `--json`. Standard output carries the result
alone; progress, notes and errors go to standard error, so `--json > out.json` stays parseable.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "Outcome", "Progress", "Report",
           "render_table", "usage_error"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2

_BAR_WIDTH = 30


@dataclass(frozen=True, slots=True)
class Outcome:
    """One result line: `package`@`version` got `status` (`admitted`, `denied`, `published`...);
    `finding` makes the command exit 1. `reason` (the rule, or why) and `detail` (what to do:
    the nearest admitted version...) are for people; `where` is the lockfile and line; `data`
    adds fields to the JSON alone."""

    package: str
    version: str
    status: str
    finding: bool = False
    reason: str = ""
    detail: str = ""
    where: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "status": self.status,
                "finding": self.finding, "reason": self.reason, "detail": self.detail,
                "where": self.where, **self.data}


class Progress:
    """`step(what)` once per item: on a terminal one bar redrawn in place, otherwise one plain
    line per item (a CI log keeps every line; carriage returns would garble it)."""

    def __init__(self, total: int, label: str, stream: TextIO, *, tty: bool) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream
        self.tty = tty
        self.done = 0

    def step(self, what: str) -> None:
        self.done += 1
        if self.tty:
            filled = _BAR_WIDTH * self.done // self.total if self.total else _BAR_WIDTH
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            # \x1b[K clears what a longer previous name left on the line
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {what}\x1b[K")
        else:
            self.stream.write(f"{self.label}: {self.done}/{self.total} {what}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.done:
            self.stream.write("\n")
            self.stream.flush()


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, a header underlined with dashes."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
                         ).rstrip()

    return "\n".join([line(headers), line(["-" * width for width in widths]),
                      *(line(row) for row in rows)]) + "\n"


def usage_error(message: str, stream: TextIO | None = None) -> int:
    """Say what is wrong (and what to do) on standard error; answer `EXIT_USAGE`."""
    print(f"mirrorgate: {message}", file=stream or sys.stderr)
    return EXIT_USAGE


class Report:
    """The results of one command run. `progress(total)` for the bar, `add(outcome)` per
    result, `note(text)` for what is worth saying but is no result (a skipped git
    dependency), then `finish()` prints and answers the exit code."""

    def __init__(self, command: str, *, as_json: bool, out: TextIO | None = None,
                 err: TextIO | None = None, tty: bool | None = None) -> None:
        self.command = command
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = self.err.isatty() if tty is None else tty
        self.outcomes: list[Outcome] = []
        self.notes: list[str] = []

    def progress(self, total: int, label: str | None = None) -> Progress:
        return Progress(total, label or self.command, self.err, tty=self.tty)

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def findings(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.finding]

    def exit_code(self) -> int:
        return EXIT_FINDINGS if self.findings else EXIT_OK

    def summary(self) -> dict[str, int]:
        return dict(Counter(outcome.status for outcome in self.outcomes))

    def finish(self) -> int:
        code = self.exit_code()
        if self.as_json:
            document = {"command": self.command, "exit_code": code,
                        "summary": self.summary(), "findings": len(self.findings),
                        "results": [outcome.to_json() for outcome in self.outcomes],
                        "notes": self.notes}
            self.out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
            return code
        for text in self.notes:
            self.err.write(f"note: {text}\n")
        findings = self.findings
        if findings:
            self.out.write(render_table(
                ["PACKAGE", "VERSION", "STATUS", "REASON", "DETAIL", "WHERE"],
                [[o.package, o.version, o.status, o.reason, o.detail, o.where]
                 for o in findings]))
            self.out.write("\n")
        counts = self.summary()
        self.out.write(render_table(["STATUS", "COUNT"],
                                    [[status, str(counts[status])] for status in sorted(counts)]))
        self.out.write(f"{self.command}: {len(findings)} finding(s) in "
                       f"{len(self.outcomes)} result(s)\n")
        return code
