"""mirrorgate's verdict and DataDog's GuardDog side by side, on the same tarballs: recall on real
malicious releases (by kind) and on the 2018-2026 incident shapes rebuilt on real predecessors,
false positives on real updates, and CPU per tarball.

By hand, never in CI (it reaches the registry npm is configured with); GuardDog in its own
environment (`python3 -m venv /work/guarddog-venv && /work/guarddog-venv/bin/pip install
guarddog`). `PYTHONPATH=$PWD/src .venv/bin/python -m bench.side_by_side --cache DIR --guarddog
/work/guarddog-venv/bin/guarddog --samples OWNER/NAME=PATH --label main --json main.json`;
the tree on PYTHONPATH is the one measured; `--render a.json b.json` sets two runs side by
side. Nothing is installed or run. The figures: docs/serving.md, "Measured side by side".
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from bench.corpus import KINDS, UPDATE, Case
from bench.gate_verdicts import POLICIES, Judged, judge_cases, policy_from
from bench.guarddog_scan import Scanned, scan, version_of
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
from bench.side_by_side_report import Record, details, guarddog_on_updates, merge, table
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


def records(cases: list[Case], judged: Mapping[str, Mapping[tuple[str, str], Judged]],
            scanned: Mapping[Path, Scanned], label: str) -> list[Record]:
    """The run's results, a record per case (`bench.side_by_side_report`); `label` prefixes
    the mirrorgate columns (`main: defaults`)."""
    prefix = f"{label}: " if label else ", "

    def verdict(one: Judged) -> dict[str, Any]:
        return {"refused": one.refused, "rule": one.rule, "reason": one.reason,
                "error": one.error, "cpu": one.cpu}

    def scan(path: Path) -> dict[str, Any] | None:
        found = scanned.get(path)
        return None if found is None else {"label": found.label, "issues": found.issues,
                                           "rules": list(found.rules), "cpu": found.cpu,
                                           "error": found.error}

    return [{"kind": case.kind, "label": case.label, "source": case.source,
             "malicious": case.malicious,
             "releases": [{"name": name, "version": version, "tarball": path.name,
                           "size": path.stat().st_size,
                           "mirrorgate": {f"{prefix}{policy}".lstrip(", "): verdict(
                               verdicts[(name, version)]) for policy, verdicts in judged.items()},
                           "guarddog": scan(path)}
                          for name, version, path in case.judged_tarballs()]}
            for case in cases]


def report(found: list[Record]) -> str:
    return "\n".join([table(found), guarddog_on_updates(found), "", details(found)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, help="keeps packuments, tarballs and GuardDog's "
                        "results between runs")
    parser.add_argument("--guarddog", default="guarddog", help="GuardDog's executable, in its "
                        "own environment; `none`: mirrorgate alone")
    parser.add_argument("--samples", action="append", default=[],
                        help="OWNER/NAME=PATH: a local copy of a repository the manifest names")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--only", type=lambda text: text.split(","), default=list(PARTS),
                        help=f"parts of the corpus, of {','.join(PARTS)}")
    parser.add_argument("--updates", type=int, default=2400, help="real updates judged")
    parser.add_argument("--policy", action="append", default=[],
                        help="NAME=RULES_FILE: another policy to measure mirrorgate on")
    parser.add_argument("--label", default="", help="prefixes this run's mirrorgate columns "
                        "(the tree measured: `main`, a branch's name)")
    parser.add_argument("--concurrency", type=int, default=8, help="downloads at once")
    parser.add_argument("--guarddog-processes", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="every verdict, as records")
    parser.add_argument("--render", type=Path, nargs="+", default=None,
                        help="instead: one table from these runs' --json records")
    args = parser.parse_args()
    if args.render is not None:
        print(report(merge(json.loads(path.read_text(encoding="utf-8"))
                           for path in args.render)))
        return
    if args.cache is None:
        parser.error("--cache is required (or --render)")
    configure_logging("error", "json")
    now = datetime.now(UTC)
    started = time.monotonic()
    cases = asyncio.run(gather(args, now))
    counts = {kind: sum(1 for case in cases if case.kind == kind) for kind in KINDS}
    print(f"corpus: {len(cases)} cases ({json.dumps(counts)}), gathered in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    policies = {**POLICIES, **dict(policy_from(text) for text in args.policy)}
    judged = asyncio.run(mirrorgate_all(cases, policies))
    scanned = ({} if args.guarddog == "none" else
               guarddog_all(cases, args.guarddog, args.cache / "guarddog",
                            args.guarddog_processes))
    found = records(cases, judged, scanned, args.label)
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=1), encoding="utf-8")
    version = "not run" if args.guarddog == "none" else version_of(args.guarddog)
    print(f"GuardDog {version}; mirrorgate from "
          f"{Path(sys.modules['mirrorgate'].__file__ or '?').parent}; "
          f"{counts[UPDATE]} real updates judged")
    print(report(found))


if __name__ == "__main__":
    main()
