"""mirrorgate's verdict and DataDog's GuardDog side by side, on the same tarballs: recall on real
malicious releases (by kind) and on the 2018-2026 incident shapes rebuilt on real predecessors,
false positives on real updates, and CPU per tarball.

Run by hand from the repository root (it reaches the registry npm is configured with; never
in CI). GuardDog goes in an environment of its own, never the project's:

    python3 -m venv /work/guarddog-venv && /work/guarddog-venv/bin/pip install guarddog
    PYTHONPATH=$PWD/src .venv/bin/python -m bench.side_by_side --cache /tmp/side-by-side \\
        --guarddog /work/guarddog-venv/bin/guarddog \\
        --samples jnicastro-Sonatype/Malicious-NPM-Packages=/work/.mirror/...+.../repo \\
        [--updates 2400] [--only shapes,samples,updates] [--json FILE]

mirrorgate judges as the gate does (`bench.gate_verdicts`), on its defaults and with every
release signal on (`--policy NAME=RULES_FILE` adds one); the tree measured is the one on
PYTHONPATH. GuardDog scans each tarball judged (`bench.guarddog_scan`). The corpus:
`bench.incident_shapes`, `bench.malware_samples`, `bench.real_updates`. Nothing is installed
or run: tarballs are only read. docs/verdicts.md#measured-side-by-side has the table.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from bench.corpus import KINDS, MALICIOUS_KINDS, UPDATE, Case
from bench.gate_verdicts import POLICIES, Judged, judge_cases, policy_from
from bench.guarddog_scan import THRESHOLDS, Scanned, flagged, scan, version_of
from bench.incident_shapes import build_shapes
from bench.malware_samples import (
    MANIFEST,
    REGISTRY,
    read_manifest,
    registry_sample,
    sample_bytes,
    sample_case,
)
from bench.real_updates import gather_updates
from bench.release_signals import Reader, registry
from mirrorgate.logs import configure_logging
from mirrorgate.rules import Rules

PARTS = ("shapes", "samples", "updates")


def _copies(pairs: list[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pair in pairs:
        repository, _, path = pair.partition("=")
        if not path:
            sys.exit(f"--samples wants OWNER/NAME=PATH, not {pair!r}")
        found[repository] = Path(path)
    return found


async def gather(args: argparse.Namespace, now: datetime) -> list[Case]:
    """The corpus: every part asked for, each case's tarballs in the bench's store."""
    store = args.cache / "tarballs"
    cases: list[Case] = []
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        reader = Reader(session, registry(), args.cache / "registry")
        if "shapes" in args.only:
            cases += await build_shapes(reader, store, now)
        if "samples" in args.only:
            cases += await _samples(args, reader, store, now)
        if "updates" in args.only:
            cases += await gather_updates(reader, store, args.updates, now, args.concurrency)
    return cases


async def _samples(args: argparse.Namespace, reader: Reader, store: Path,
                   now: datetime) -> list[Case]:
    copies = _copies(args.samples)
    found: list[Case] = []
    for sample in read_manifest(args.manifest.read_text(encoding="utf-8")):
        try:
            tarball = (await registry_sample(sample, reader) if sample.repository == REGISTRY
                       else sample_bytes(sample, copies))
            digest = hashlib.sha256(tarball).hexdigest()
            if digest != sample.sha256:
                raise ValueError(f"sha256 {digest}, the manifest says {sample.sha256}")
            found.append(await sample_case(sample, tarball, reader, store, now))
        except (LookupError, ValueError, OSError) as error:
            print(f"sample {sample.label} left out: {error}", file=sys.stderr)
    return found


def guarddog_all(cases: list[Case], executable: str, cache: Path,
                 concurrency: int) -> dict[Path, Scanned]:
    """GuardDog over every tarball judged, `concurrency` processes at a time."""
    tarballs = sorted({path for case in cases for _n, _v, path in case.judged_tarballs()})
    done: dict[Path, Scanned] = {}
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for path, scanned in zip(tarballs, pool.map(
                lambda path: scan(executable, path, cache), tarballs), strict=True):
            done[path] = scanned
            if len(done) % 50 == 0 or len(done) == len(tarballs):
                print(f"guarddog: {len(done)}/{len(tarballs)}", file=sys.stderr, flush=True)
    return done


async def mirrorgate_all(cases: list[Case], policies: Mapping[str, Rules],
                         ) -> dict[str, dict[tuple[str, str], Judged]]:
    found: dict[str, dict[tuple[str, str], Judged]] = {}
    for name, rules in policies.items():
        count = 0

        def progress(judged: Judged, policy: str = name) -> None:
            nonlocal count
            count += 1
            if judged.refused or count % 100 == 0:
                mark = f"REFUSED {judged.rule}" if judged.refused else "admitted"
                print(f"mirrorgate [{policy}] {count}: {judged.name}@{judged.version} {mark}",
                      file=sys.stderr, flush=True)

        found[name] = await judge_cases(cases, rules, progress)
    return found


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})" if whole else "-"


def _ms(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    mean, median = statistics.fmean(seconds), statistics.median(seconds)
    return f"{mean * 1e3:.0f} ms ({median * 1e3:.0f} ms)"


def _refused_by(verdicts: Mapping[tuple[str, str], Judged]) -> Callable[[Case], bool]:
    def refuses(case: Case) -> bool:
        return any(verdicts[(name, version)].refused
                   for name, version, _path in case.judged_tarballs())
    return refuses


def _flagged_at(scanned: Mapping[Path, Scanned], threshold: str) -> Callable[[Case], bool]:
    def flags(case: Case) -> bool:
        return any(flagged(scanned[path], threshold)
                   for _name, _version, path in case.judged_tarballs())
    return flags


def outcomes(judged: Mapping[str, Mapping[tuple[str, str], Judged]],
             scanned: Mapping[Path, Scanned]) -> dict[str, Callable[[Case], bool]]:
    """Each column of the table: whether it refuses (or flags) a case, any of its releases."""
    columns = {f"mirrorgate, {policy}": _refused_by(verdicts)
               for policy, verdicts in judged.items()}
    columns.update({f"GuardDog, {threshold}": _flagged_at(scanned, threshold)
                    for threshold in THRESHOLDS})
    return columns


def table(cases: list[Case], judged: Mapping[str, Mapping[tuple[str, str], Judged]],
          scanned: Mapping[Path, Scanned]) -> str:
    columns = outcomes(judged, scanned)
    head = ["", "cases", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    by_kind = {kind: [case for case in cases if case.kind == kind] for kind in KINDS}
    rows: list[tuple[str, list[Case]]] = [
        (f"recall: {kind}", by_kind[kind]) for kind in MALICIOUS_KINDS if by_kind[kind]]
    malicious = [case for case in cases if case.malicious and case.kind in MALICIOUS_KINDS]
    if malicious:
        rows.append(("recall: every real malicious release", malicious))
    rows += [(f"recall: {kind}", by_kind[kind]) for kind in KINDS
             if kind not in MALICIOUS_KINDS and kind != UPDATE and by_kind[kind]]
    if by_kind[UPDATE]:
        rows.append(("false positives: real updates", by_kind[UPDATE]))
    for title, members in rows:
        cells = [_share(sum(1 for case in members if refuses(case)), len(members))
                 for refuses in columns.values()]
        lines.append(f"| {title} | {len(members)} | " + " | ".join(cells) + " |")
    cpu = [_ms([j.cpu for j in verdicts.values()]) for verdicts in judged.values()]
    guard = _ms([s.cpu for s in scanned.values() if s.error is None])
    lines.append("| CPU per tarball, mean (median) | " + f"{len(scanned)} | "
                 + " | ".join([*cpu, *[guard] * len(THRESHOLDS)]) + " |")
    megabytes = sum(path.stat().st_size for path in scanned) / 1e6
    per_mb = [f"{sum(j.cpu for j in verdicts.values()) * 1e3 / megabytes:.1f} ms"
              for verdicts in judged.values()]
    guard_mb = f"{sum(s.cpu for s in scanned.values()) * 1e3 / megabytes:.0f} ms"
    lines.append(f"| CPU per MB of tarball | {megabytes:.0f} MB | "
                 + " | ".join([*per_mb, *[guard_mb] * len(THRESHOLDS)]) + " |")
    return "\n".join(lines)


def guarddog_on_updates(cases: list[Case], scanned: Mapping[Path, Scanned]) -> str:
    """Which of GuardDog's rules fire on the real updates it rates suspicious or worse, and on
    how many of them; and the errors it gave."""
    flagged_rules: Counter[str] = Counter()
    count = 0
    for case in cases:
        if case.kind != UPDATE:
            continue
        for _name, _version, path in case.judged_tarballs():
            if flagged(scanned[path], "suspicious or worse"):
                count += 1
                flagged_rules.update(scanned[path].rules)
    errors = sum(1 for found in scanned.values() if found.error)
    top = ", ".join(f"{rule} {n}" for rule, n in flagged_rules.most_common(12))
    return (f"GuardDog rated {count} real updates suspicious or worse; the rules on them: "
            f"{top or 'none'}; {errors} tarballs GuardDog could not scan")


def details(cases: list[Case], judged: Mapping[str, Mapping[tuple[str, str], Judged]],
            scanned: Mapping[Path, Scanned]) -> str:
    """Every malicious case and shape with each verdict, then every refused update."""
    lines: list[str] = []
    for case in cases:
        if not case.malicious and not any(
                j[(n, v)].refused for j in judged.values() for n, v, _p in case.judged_tarballs()):
            continue
        lines.append(f"- {case.kind}: {case.label}")
        for name, version, path in case.judged_tarballs():
            for policy, verdicts in judged.items():
                one = verdicts[(name, version)]
                said = (f"refused by {one.rule}: {(one.reason or '')[:240]}" if one.refused
                        else f"admitted{' (' + one.error + ')' if one.error else ''}")
                lines.append(f"    {name}@{version} mirrorgate [{policy}]: {said}")
            found = scanned[path]
            lines.append(f"    {name}@{version} GuardDog: {found.label}, {found.issues} "
                         f"findings ({', '.join(found.rules) or 'none'})"
                         f"{' ERROR ' + found.error if found.error else ''}")
    return "\n".join(lines)


def as_json(cases: list[Case], judged: Mapping[str, Mapping[tuple[str, str], Judged]],
            scanned: Mapping[Path, Scanned]) -> list[dict[str, Any]]:
    return [{"kind": case.kind, "label": case.label, "source": case.source,
             "releases": [{"name": name, "version": version, "tarball": path.name,
                           "mirrorgate": {policy: {"refused": v[(name, version)].refused,
                                                   "rule": v[(name, version)].rule,
                                                   "reason": v[(name, version)].reason,
                                                   "error": v[(name, version)].error,
                                                   "cpu": v[(name, version)].cpu}
                                          for policy, v in judged.items()},
                           "guarddog": {"label": scanned[path].label,
                                        "issues": scanned[path].issues,
                                        "rules": list(scanned[path].rules),
                                        "cpu": scanned[path].cpu,
                                        "error": scanned[path].error}}
                          for name, version, path in case.judged_tarballs()]}
            for case in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True,
                        help="keeps packuments, tarballs and GuardDog's results between runs")
    parser.add_argument("--guarddog", default="guarddog", help="GuardDog's executable, in its "
                        "own environment")
    parser.add_argument("--samples", action="append", default=[],
                        help="OWNER/NAME=PATH: a local copy of a repository the manifest names")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--only", type=lambda text: text.split(","), default=list(PARTS),
                        help=f"parts of the corpus, of {','.join(PARTS)}")
    parser.add_argument("--updates", type=int, default=2400, help="real updates judged")
    parser.add_argument("--policy", action="append", default=[],
                        help="NAME=RULES_FILE: another policy to measure mirrorgate on")
    parser.add_argument("--concurrency", type=int, default=8, help="downloads at once")
    parser.add_argument("--guarddog-processes", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="every verdict, as JSON")
    args = parser.parse_args()
    configure_logging("error", "json")
    now = datetime.now(UTC)
    started = time.monotonic()
    cases = asyncio.run(gather(args, now))
    counts = {kind: sum(1 for case in cases if case.kind == kind) for kind in KINDS}
    print(f"corpus: {len(cases)} cases ({json.dumps(counts)}), gathered in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    policies = {**POLICIES, **dict(policy_from(text) for text in args.policy)}
    judged = asyncio.run(mirrorgate_all(cases, policies))
    scanned = guarddog_all(cases, args.guarddog, args.cache / "guarddog",
                           args.guarddog_processes)
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(cases, judged, scanned), indent=1),
                             encoding="utf-8")
    print(f"GuardDog {version_of(args.guarddog)}; mirrorgate from "
          f"{Path(sys.modules['mirrorgate'].__file__ or '?').parent}; "
          f"{sum(1 for c in cases if c.kind == UPDATE)} real updates judged")
    print(table(cases, judged, scanned))
    print(guarddog_on_updates(cases, scanned))
    print()
    print(details(cases, judged, scanned))


if __name__ == "__main__":
    main()
