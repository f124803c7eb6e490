"""The range matcher agrees with npm: node runs npm's own `semver` package over a table.

npm decides which versions a range covers with the `semver` package it bundles, so that package
is the oracle, run once per session over every (version, range) pair of the table below:
prereleases, `x` ranges, hyphen ranges, `||`, caret and tilde on 0.x, build metadata, invalid
input. The table is a cross product, so each range is also checked against every prerelease
that npm must exclude. Without node or npm's `semver` the tests fail under CI and skip elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.npm.versions import parse_range, parse_version
from tests.servers.availability import unavailable

VERSIONS = [
    "0.0.0", "0.0.0-0", "0.0.1", "0.0.2", "0.0.3-alpha", "0.1.0", "0.1.1", "0.1.2-beta.1",
    "0.2.0", "0.2.3", "0.3.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta", "1.0.0-rc.1",
    "1.0.0", "1.0.1", "1.1.0", "1.2.0", "1.2.2", "1.2.3-alpha", "1.2.3-beta.2", "1.2.3",
    "1.2.4-rc.1", "1.2.4", "1.2.9", "1.3.0-0", "1.3.0", "1.9.9", "2.0.0-0", "2.0.0-rc.1",
    "2.0.0", "2.0.1", "2.1.0", "2.5.0-x.7.z.92", "3.0.0", "3.1.4", "3.3.6", "4.17.20",
    "4.17.20-beta.1", "4.17.21-beta", "4.17.21", "4.18.0", "10.0.0", "1.2.3+build.5",
    "1.2.3-beta.2+meta", "v1.2.3", " 1.2.3 ",
    # prerelease precedence: numbers numerically, before words; words in ASCII order; a prefix
    # before its extensions
    "1.2.3-1", "1.2.3-2", "1.2.3-10", "1.2.3-0a", "1.2.3-A", "1.2.3-a", "1.2.3-alpha.2",
    "1.2.3-alpha.10", "1.2.3-alpha.beta", "1.2.3-alpha.1.1", "1.2.3--", "1.2.3-rc.1.x",
    # npm refuses these as versions: no range covers them.
    "=1.2.3", "01.2.3", "1.2", "1.2.3.4", "1.2.3-", "1.2.3+", "1.2.3-beta.02", "1.2.3-be_ta",
    "1.2.3-a..b", "1.2.9007199254740993", "\u0661.2.3", "latest", "",
]

RANGES = [
    # wildcards and x ranges
    "*", "x", "1", "1.x", "1.2", "1.2.x", "1.2.*", "2.x.x", "*.*.*", ">=1.x", "<2.x", ">1",
    ">=1.2", "<1.2", ">1.2", "<=1.2", "^1.x", "^0.x", "~0.x", "~1.2.x",
    # caret and tilde, including 0.x and prereleases
    "^1.2.3", "^1.2.3-beta.1", "~1.2.3", "~1.2", "~1", "^0.1.2", "^0.0.1", "^0.0", "^0",
    "~0.1.2", "^0.1.2-beta.0", "^0.0.3-alpha", "~0.0.3-alpha", "~1.2.3-beta.2", "^2.0.0-0",
    "^4.17.21-beta", "^0.0.0", "~0.0.0", "^0.0.0-0", "~> 1.2", "^ 1.2.3", "  ^1.2.3  ",
    # primitives and intersections
    ">=1.2.3", "<1.2.3", ">1.2.3-alpha", "<2.0.0", "<=2.0.0", ">=1.0.0 <2.0.0",
    ">=1.0.0-0 <2.0.0-0", ">=1.2.3-alpha <1.2.3", "<4.17.21", ">=4.17.21", "~4.17.20",
    "<1.2.3-beta", ">1.2.3-alpha.1", ">=0.0.0", "<0.0.1", ">1.0.0 <1.0.1", "^1.2.3 <1.2.9",
    ">= 1.2.3", "> 1 < 3", "<2.0.0-rc.2", ">2.0.0-0 <2.0.0-rc.2", "<=1.2.3-beta",
    "<0.0.0-0", ">=0.0.0-0", ">=4.17.20-0 <4.17.21", "3.3.6", "=1.2.3", "v1.2.3",
    "1.2.3-beta.2", "=1.2.3+build.5", "^1.2.3+build", "1.2.3-beta.2+x",
    # hyphen ranges
    "1.2.3 - 2.0.0", "1.2 - 2", "1.2.3-alpha - 1.2.3", "1 - 2", "1.2.3-beta - 2",
    "1.2 - 2.3.4-rc.1",
    # unions
    "^1.2.3 || ^2.0.0", "<1.0.0 || >=3.0.0", "1.2.3 || 2.0.0-rc.1", "1.x || >=2.5.0-x.7.z.92",
    ">=1.0.0 || <0.1.0",
    # invalid: npm refuses these
    "<<4", "lodash", "1.2.3.4", ">=a", "1.2.03", ">=01.2.3", "^1.2.3 foo", "1.2.3 -",
    "- 1.2.3", "1.2.3 - 2.0.0 - 3", ">=1 <=", "x.y.z", "01", "1.2.3-01", "1.x.3",
    ">=9007199254740992", "latest", "1 2",
]

# Ranges npm accepts that mirrorgate refuses when it loads a rules file, and why: a rules file
# that says something doubtful is an error at start-up, not a guess.
STRICTER = {
    "": "empty: in a rules file, leave the range out to mean every version",
    "^1.2.3 ||": "an empty || alternative means any version to npm",
    "1.2.3 || || 2.0.0": "an empty || alternative means any version to npm",
    "^1.x.3": "a number after a wildcard is refused everywhere, not only in plain ranges",
    "^1.2.3-20240101123456789": "a 17-digit number is past what npm can count exactly",
}

ORACLE = r"""
const semver = require(process.argv[1]);
let input = '';
process.stdin.on('data', chunk => { input += chunk; });
process.stdin.on('end', () => {
  const {versions, ranges} = JSON.parse(input);
  const out = {
    semver: require(process.argv[1] + '/package.json').version,
    valid: versions.map(v => semver.valid(v) !== null),
    ranges: {},
  };
  for (const r of ranges) {
    const valid = semver.validRange(r) !== null;
    out.ranges[r] = {valid, satisfies: valid ? versions.map(v => semver.satisfies(v, r)) : null};
  }
  process.stdout.write(JSON.stringify(out));
});
"""


def _npm_semver() -> Path | None:
    """npm's bundled `semver`, found from the npm on PATH (no network, no install)."""
    candidates: list[Path] = []
    npm = shutil.which("npm")
    if npm is not None:
        candidates.append(Path(npm).resolve().parent.parent / "node_modules" / "semver")
        try:
            root = subprocess.run(
                [npm, "root", "-g"], capture_output=True, text=True, timeout=30, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            root = ""
        if root:
            candidates.append(Path(root) / "npm" / "node_modules" / "semver")
    for candidate in candidates:
        if (candidate / "package.json").is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def oracle() -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        unavailable("the semver oracle is unavailable: node is not on PATH")
    package = _npm_semver()
    if package is None:
        unavailable("the semver oracle is unavailable: npm's bundled semver package was not "
                    "found next to npm")
    everything = RANGES + list(STRICTER)
    done = subprocess.run(
        [node, "-e", ORACLE, str(package)],
        input=json.dumps({"versions": VERSIONS, "ranges": everything}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"node's semver oracle failed: {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _accepts(text: str) -> bool:
    try:
        parse_range(text)
    except ValueError:
        return False
    return True


def test_a_version_npm_refuses_is_not_a_version_and_one_it_accepts_is(
    oracle: dict[str, Any],
) -> None:
    wrong = [
        f"{version!r}: npm says {'valid' if valid else 'invalid'}"
        for version, valid in zip(VERSIONS, oracle["valid"], strict=True)
        if (parse_version(version) is not None) != valid
    ]
    assert not wrong, f"disagreements with npm's semver {oracle['semver']}:\n" + "\n".join(wrong)


def test_a_range_npm_refuses_is_refused(oracle: dict[str, Any]) -> None:
    wrong = [text for text in RANGES if not oracle["ranges"][text]["valid"] and _accepts(text)]
    assert not wrong, f"accepted, but npm's semver {oracle['semver']} refuses: {wrong}"


def test_a_range_npm_accepts_is_accepted_unless_documented_as_stricter(
    oracle: dict[str, Any],
) -> None:
    wrong = [text for text in RANGES if oracle["ranges"][text]["valid"] and not _accepts(text)]
    assert not wrong, f"refused, but npm's semver {oracle['semver']} accepts: {wrong}"


def test_every_stricter_range_is_one_npm_accepts_and_mirrorgate_refuses(
    oracle: dict[str, Any],
) -> None:
    for text, why in STRICTER.items():
        assert oracle["ranges"][text]["valid"], f"{text!r} is not a departure: npm refuses it"
        assert not _accepts(text), f"{text!r} should be refused: {why}"


def test_every_version_and_range_in_the_table_matches_as_npm_matches(
    oracle: dict[str, Any],
) -> None:
    wrong: list[str] = []
    pairs = 0
    for text in RANGES:
        expected = oracle["ranges"][text]["satisfies"]
        if expected is None:
            continue
        compiled = parse_range(text)
        for version, want in zip(VERSIONS, expected, strict=True):
            parsed = parse_version(version)
            got = parsed is not None and compiled.includes(parsed)
            pairs += 1
            if got != want:
                wrong.append(f"{version!r} in {text!r}: npm says {want}, mirrorgate {got}")
    assert pairs > 5000
    assert not wrong, (
        f"{len(wrong)} of {pairs} pairs disagree with npm's semver {oracle['semver']}:\n"
        + "\n".join(wrong)
    )
