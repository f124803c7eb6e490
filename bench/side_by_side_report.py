"""The side-by-side bench's results as records (one per case, JSON as written by `--json`) and
the table made of them: recall by kind, false positives on real updates, CPU per tarball and
per MB, for every mirrorgate column and GuardDog at each threshold.

Records of runs on different trees (main's, a branch's: each run's `--label` prefixes its
columns) are merged case by case (`merge`), so one table sets them side by side. Pure.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bench.corpus import KINDS, MALICIOUS_KINDS, UPDATE
from bench.guarddog_scan import THRESHOLDS, Scanned, flagged

__all__ = ["Record", "details", "guarddog_on_updates", "merge", "table"]

Record = dict[str, Any]
"""{"kind", "label", "source", "malicious", "releases": [{"name", "version", "tarball",
"size", "mirrorgate": {column: {"refused", "rule", "reason", "error", "cpu"}},
"guarddog": {"label", "issues", "rules", "cpu", "error"} or None}]}"""


def _scanned(found: Mapping[str, Any]) -> Scanned:
    return Scanned(found["label"], found["issues"], tuple(found["rules"]), found["cpu"],
                   found.get("error"))


def merge(runs: Iterable[list[Record]]) -> list[Record]:
    """One record per case, with every run's mirrorgate columns and the first GuardDog
    verdict any run has; a case missing from a run has no verdict in its columns."""
    merged: dict[tuple[str, str], Record] = {}
    for records in runs:
        for record in records:
            key = (record["kind"], record["label"])
            into = merged.setdefault(key, {**record, "releases": [
                {**release, "mirrorgate": {}} for release in record["releases"]]})
            by_release = {(r["name"], r["version"]): r for r in into["releases"]}
            for release in record["releases"]:
                target = by_release.get((release["name"], release["version"]))
                if target is None:
                    continue
                target["mirrorgate"].update(release["mirrorgate"])
                if target.get("guarddog") is None:
                    target["guarddog"] = release.get("guarddog")
    return list(merged.values())


def _columns(records: list[Record]) -> list[str]:
    found: dict[str, None] = {}
    for record in records:
        for release in record["releases"]:
            found.update(dict.fromkeys(release["mirrorgate"]))
    return list(found)


def _refuses(column: str) -> Callable[[Record], bool]:
    def refuses(record: Record) -> bool:
        return any((release["mirrorgate"].get(column) or {}).get("refused")
                   for release in record["releases"])
    return refuses


def _flags(threshold: str) -> Callable[[Record], bool]:
    def flags(record: Record) -> bool:
        return any(release.get("guarddog") is not None
                   and flagged(_scanned(release["guarddog"]), threshold)
                   for release in record["releases"])
    return flags


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})" if whole else "-"


def _ms(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    mean, median = statistics.fmean(seconds), statistics.median(seconds)
    return f"{mean * 1e3:.0f} ms ({median * 1e3:.0f} ms)"


def _rows(records: list[Record]) -> list[tuple[str, list[Record]]]:
    by_kind = {kind: [r for r in records if r["kind"] == kind] for kind in KINDS}
    rows = [(f"recall: {kind}", by_kind[kind]) for kind in MALICIOUS_KINDS if by_kind[kind]]
    malicious = [r for r in records if r["kind"] in MALICIOUS_KINDS]
    if malicious:
        rows.append(("recall: every real malicious release", malicious))
    rows += [(f"recall: {kind}", by_kind[kind]) for kind in KINDS
             if kind not in MALICIOUS_KINDS and kind != UPDATE and by_kind[kind]]
    if by_kind[UPDATE]:
        rows.append(("false positives: real updates", by_kind[UPDATE]))
    return rows


def table(records: list[Record]) -> str:
    """The table, a markdown one: a row per kind, a column per mirrorgate policy (of each
    run) and per GuardDog threshold, then CPU per tarball (mean, median) and per MB."""
    mirrorgate = _columns(records)
    guarded = any(release.get("guarddog") for r in records for release in r["releases"])
    columns: dict[str, Callable[[Record], bool]] = {
        f"mirrorgate {column}": _refuses(column) for column in mirrorgate}
    if guarded:
        columns.update({f"GuardDog, {t}": _flags(t) for t in THRESHOLDS})
    head = ["", "cases", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for title, members in _rows(records):
        cells = [_share(sum(1 for r in members if refuses(r)), len(members))
                 for refuses in columns.values()]
        lines.append(f"| {title} | {len(members)} | " + " | ".join(cells) + " |")
    releases = {(rel["name"], rel["version"]): rel for r in records for rel in r["releases"]}
    megabytes = sum(rel["size"] for rel in releases.values()) / 1e6
    cpu = [[(rel["mirrorgate"].get(column) or {}).get("cpu", 0.0) for rel in releases.values()]
           for column in mirrorgate]
    scans = [rel["guarddog"] for rel in releases.values()
             if rel.get("guarddog") and not rel["guarddog"].get("error")]
    guard = [_ms([s["cpu"] for s in scans])] * (len(THRESHOLDS) if guarded else 0)
    guard_mb = ([f"{sum(s['cpu'] for s in scans) * 1e3 / max(megabytes, 1e-9):.0f} ms"]
                * (len(THRESHOLDS) if guarded else 0))
    lines.append(f"| CPU per tarball, mean (median) | {len(releases)} | "
                 + " | ".join([*(_ms(c) for c in cpu), *guard]) + " |")
    lines.append(f"| CPU per MB of tarball | {megabytes:.0f} MB | "
                 + " | ".join([*(f"{sum(c) * 1e3 / max(megabytes, 1e-9):.1f} ms" for c in cpu),
                               *guard_mb]) + " |")
    return "\n".join(lines)


def details(records: list[Record]) -> str:
    """Every malicious case with each verdict, then every update some mirrorgate column
    refused."""
    lines: list[str] = []
    for record in records:
        refused = any(v.get("refused") for rel in record["releases"]
                      for v in rel["mirrorgate"].values())
        if not record["malicious"] and not refused:
            continue
        lines.append(f"- {record['kind']}: {record['label']}")
        for release in record["releases"]:
            label = f"{release['name']}@{release['version']}"
            for column, one in release["mirrorgate"].items():
                said = (f"refused by {one['rule']}: {(one['reason'] or '')[:240]}"
                        if one["refused"] else
                        f"admitted{' (' + one['error'] + ')' if one.get('error') else ''}")
                lines.append(f"    {label} mirrorgate [{column}]: {said}")
            found = release.get("guarddog")
            if found is not None:
                lines.append(f"    {label} GuardDog: {found['label']}, {found['issues']} "
                             f"findings ({', '.join(found['rules']) or 'none'})"
                             f"{' ERROR ' + found['error'] if found.get('error') else ''}")
    return "\n".join(lines)


def guarddog_on_updates(records: list[Record]) -> str:
    """Which of GuardDog's rules fire on the real updates it rates suspicious or worse, on
    how many of them; and how many tarballs it could not scan."""
    rules: Counter[str] = Counter()
    count = errors = 0
    for record in records:
        for release in record["releases"]:
            found = release.get("guarddog")
            if found is None:
                continue
            errors += 1 if found.get("error") else 0
            if record["kind"] == UPDATE and flagged(_scanned(found), "suspicious or worse"):
                count += 1
                rules.update(found["rules"])
    top = ", ".join(f"{rule} {n}" for rule, n in rules.most_common(12))
    return (f"GuardDog rated {count} real updates suspicious or worse; the rules on them: "
            f"{top or 'none'}; {errors} tarballs GuardDog could not scan")
