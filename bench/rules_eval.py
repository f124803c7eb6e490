"""What evaluating the admission rules costs per version, the serve path's packument rebuild.

The serve path runs `evaluate` over every public version when it (re)builds a cache entry, and
large packuments hold thousands of versions. This builds a synthetic packument of 1,000 versions
(releases, prereleases, install scripts, sha1-only and sha512 digests, publish times old and
fresh), then times evaluating all of them under three policies: the defaults, the README's
example, and a heavy file whose lists all name the package with ranges; once for the package the
lists name and once for a package they do not (the common case). Printed per version (median of
the rounds, and the slowest round) in microseconds. Target: a few microseconds per version.

    .venv/bin/python -m bench.rules_eval
"""

from __future__ import annotations

import base64
import hashlib
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from mirrorgate.rules import DEFAULT_RULES, Rules, evaluate, parse_rules

VERSIONS = 1_000
ROUNDS = 30
NOW = datetime(2026, 12, 1, 15, 0, 0, tzinfo=UTC)
NAME = "lodash"
UNNAMED = "lodash-like"

EXAMPLE = """
[age]
minimum = "3d"
exempt = ["@acme/*"]
[deny]
packages = ["event-stream@3.3.6", "@evil/*", "lodash@<4.17.21"]
[install_scripts]
block = true
allow = ["esbuild", "@prisma/engines"]
"""

HEAVY = """
[integrity]
minimum = "sha1"
[age]
minimum = "36h"
missing_time = "deny"
exempt = ["lodash@>=900.0.0 <950.0.0 || ^990.0.0"]
[deny]
packages = [
  "lodash@<4.17.21", "lodash@>=100.0.0 <100.5.0", "lodash@~200.1.0 || ~300.2.0",
  "lodash@1.2.3 - 1.9.9", "@evil/*", "left-pad", "event-stream@3.3.6",
]
[allow]
packages = ["lodash@>=1.0.0-0", "@acme/*", "react@^18.0.0"]
[install_scripts]
block = true
allow = ["lodash@^500.0.0", "esbuild"]
"""


def _sri(algorithm: str, data: bytes) -> str:
    return f"{algorithm}-{base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


def packument(count: int) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """The versions in order, `versions` and `time`, shaped like a real packument's."""
    order: list[str] = []
    versions: dict[str, Any] = {}
    times: dict[str, str] = {}
    for i in range(count):
        version = f"{i}.{i % 7}.{i % 3}" + ("-beta.1" if i % 10 == 0 else "")
        data = version.encode()
        dist: dict[str, Any] = {
            "shasum": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
            "tarball": f"http://127.0.0.1:9/{NAME}/-/{NAME}-{version}.tgz",
        }
        if i % 5:
            dist["integrity"] = _sri("sha512", data)
        manifest: dict[str, Any] = {
            "name": NAME,
            "version": version,
            "dependencies": {f"dep-{k}": f"^{k}.0.0" for k in range(5)},
            "dist": dist,
        }
        if i % 4 == 0:
            manifest["scripts"] = {"test": "jest", "postinstall": "node setup.js"}
        order.append(version)
        versions[version] = manifest
        if i % 50:
            times[version] = (NOW - timedelta(hours=count - i)).isoformat().replace("+00:00", "Z")
    return order, versions, times


def time_policy(rules: Rules, name: str, order: list[str], versions: dict[str, Any],
                times: dict[str, str]) -> tuple[float, float, int]:
    """Median and worst microseconds per version over the rounds, and the admitted count."""
    per_version: list[float] = []
    admitted = 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        admitted = 0
        for version in order:
            verdict = evaluate(rules, name, version, versions[version], times.get(version), NOW)
            admitted += verdict.admitted
        per_version.append((time.perf_counter() - start) / len(order) * 1e6)
    return statistics.median(per_version), max(per_version), admitted


def main() -> None:
    order, versions, times = packument(VERSIONS)
    policies = {
        "defaults": DEFAULT_RULES,
        "README example": parse_rules(EXAMPLE, "example"),
        "heavy (ranges on every list)": parse_rules(HEAVY, "heavy"),
    }
    print(f"rules evaluation: {VERSIONS} versions, {ROUNDS} rounds each; {NAME} is named by the "
          f"lists, {UNNAMED} is not")
    for label, rules in policies.items():
        for name in (NAME, UNNAMED):
            median, worst, admitted = time_policy(rules, name, order, versions, times)
            print(f"  {label:28} {name:11} median {median:6.2f} us/version, "
                  f"worst round {worst:6.2f} us, admitted {admitted}/{VERSIONS}")


if __name__ == "__main__":
    main()
