"""What the advisory index costs: loading the npm export, holding it, and gating with it.

Generates an OSV export the size of osv.dev's npm one (200,000 records, most of them `MAL-`:
90% malware records on a name of their own, every version or a listed few; 10% GHSA-style
records with SEMVER ranges, a CVSS v3 or v4 vector or a label, some naming the benchmark's
package), writes it as a zip, then measures in this process: the time to read it into the index
and the resident memory it adds (RSS from /proc, after a full collection). Then the rules
evaluation cost per version (bench.rules_eval's 1,000-version packument) under the README's
rules with and without an `[advisories]` table, for a name the advisories mention and one they
do not. Evaluation runs once per packument cache fill; the warm path never evaluates.

    .venv/bin/python -m bench.advisories [--records 200000]
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.rules_eval import EXAMPLE, NAME, UNNAMED, VERSIONS, packument, time_policy
from mirrorgate.advisories import FeedState
from mirrorgate.advisories.source import read_zip
from mirrorgate.rules import parse_rules

RECORDS = 200_000
MALWARE_SHARE = 0.9
V3 = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N"
V4 = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"


def _record(i: int, rng: random.Random) -> dict[str, Any]:
    if rng.random() < MALWARE_SHARE:
        name = f"mal-pkg-{i}" if i % 10 else f"@typo{i % 997}/mal-{i}"
        affected: dict[str, Any] = {"package": {"ecosystem": "npm", "name": name}}
        if i % 3:
            affected["ranges"] = [{"type": "SEMVER", "events": [{"introduced": "0"}]}]
        else:
            affected["versions"] = [f"1.0.{k}" for k in range(rng.randint(1, 4))]
        return {"schema_version": "1.6.0", "id": f"MAL-2026-{i}",
                "modified": "2026-11-01T00:00:00Z", "summary": f"Malicious code in {name} (npm)",
                "details": "This package was found to exfiltrate credentials. " * 4,
                "affected": [affected],
                "references": [{"type": "WEB", "url": f"https://example.com/reports/{i}"}],
                "database_specific": {"malicious-packages-origins": [{"source": "ossf"}]}}
    name = NAME if i % 2000 == 1 else f"lib-{i % 20_000}"
    major = rng.randint(0, 900)
    events: list[dict[str, str]] = [{"introduced": f"{major}.0.0"},
                                    {"fixed": f"{major}.{rng.randint(1, 6)}.0"}]
    record: dict[str, Any] = {
        "schema_version": "1.6.0", "id": f"GHSA-{i:04x}-bench-{i % 9999:04d}",
        "modified": "2026-11-01T00:00:00Z", "aliases": [f"CVE-2026-{i}"],
        "summary": f"Prototype pollution in {name}", "details": "Details. " * 40,
        "affected": [{"package": {"ecosystem": "npm", "name": name},
                      "ranges": [{"type": "SEMVER", "events": events}]}],
        "references": [{"type": "ADVISORY", "url": f"https://example.com/advisories/{i}"}],
        "database_specific": {"severity": rng.choice(["LOW", "MODERATE", "HIGH", "CRITICAL"]),
                              "cwe_ids": ["CWE-1321"]},
    }
    if i % 3 == 0:
        record["severity"] = [{"type": "CVSS_V3", "score": V3}]
    elif i % 3 == 1:
        record["severity"] = [{"type": "CVSS_V4", "score": V4}]
    return record


def write_export(path: Path, count: int) -> Path:
    rng = random.Random(17)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for i in range(count):
            record = _record(i, rng)
            archive.writestr(f"{record['id']}.json", orjson.dumps(record))
    return path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=RECORDS)
    count = parser.parse_args().records
    with tempfile.TemporaryDirectory() as directory:
        export = write_export(Path(directory) / "osv-npm.zip", count)
        size = export.stat().st_size / 2**20
        # the default feed first (a fresh heap): the same export, its MAL- records alone
        gc.collect()
        before = rss_mib()
        start = time.perf_counter()
        malware = read_zip(export, str(export), malware_only=True)
        seconds = time.perf_counter() - start
        gc.collect()
        after = rss_mib()
        print(f"malware only (the default feed): loaded in {seconds:.1f} s; {malware.records} "
              f"records, {len(malware)} package names; RSS +{after - before:.0f} MiB, "
              f"{malware.packed_bytes / 2**20:.1f} MiB packed")
        del malware
        gc.collect()
        before = rss_mib()
        start = time.perf_counter()
        index = read_zip(export, str(export))
        seconds = time.perf_counter() - start
        gc.collect()
        after = rss_mib()
        print(f"advisory index: {count} records ({size:.1f} MiB zip) loaded in {seconds:.1f} s; "
              f"{index.records} npm records, {len(index)} package names; RSS "
              f"{before:.0f} -> {after:.0f} MiB (+{after - before:.0f} MiB), "
              f"{index.packed_bytes / 2**20:.1f} MiB packed")

        order, versions, times = packument(VERSIONS)
        plain = parse_rules(EXAMPLE, "example")
        gated = parse_rules(EXAMPLE + f'\n[advisories]\nsource = "{export}"\n', "example")
        assert gated.advisories is not None
        # the index just measured, put in force as a load would (no second parse)
        gated.advisories.feed.state = FeedState(index, datetime.now(UTC), 1)
        print(f"rules evaluation per version ({VERSIONS} versions; {NAME} has "
              f"{len(index.entries(NAME))} advisories, {UNNAMED} none):")
        for label, rules in (("README example", plain), ("+ [advisories]", gated)):
            for name in (NAME, UNNAMED):
                median, worst, admitted = time_policy(rules, name, order, versions, times)
                print(f"  {label:16} {name:11} median {median:6.2f} us/version, "
                      f"worst round {worst:6.2f} us, admitted {admitted}/{VERSIONS}")


if __name__ == "__main__":
    main()
