"""What a version string may be, and version order as npm has it (for `latest` and "nearest").

Every module that receives a version (a packument key, a URL, a job, a file name) asks
`is_version_string`, so the gate never admits what the worker or the file store would refuse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cmp_to_key

import nodesemver

__all__ = ["highest", "is_prerelease", "is_version_string", "nearest"]

# semver's alphabet, led by a letter or digit, at most 256 long. Looser than semver itself:
# registries hold versions only loose parsing reads ("v1.2", "1.2.3.4") and those are still
# served and mirrored; what it keeps out is whatever could be a path or a query ("..", "/").
_VERSION_STRING = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,255}")


def is_version_string(text: str) -> bool:
    return _VERSION_STRING.fullmatch(text) is not None and ".." not in text


def _parsed(version: str) -> nodesemver.SemVer | None:
    try:
        return nodesemver.make_semver(version, loose=True)
    except (ValueError, TypeError):
        return None


def is_prerelease(version: str) -> bool:
    parsed = _parsed(version)
    return parsed is not None and bool(parsed.prerelease)


# `highest` is the rule npm registries follow when a tag must be repointed: the highest stable
# version, or, when there is none, the highest prerelease. Ordering is node-semver's (a
# maintained port of npm's own `semver`); strings it cannot parse are never chosen.
def highest(versions: Iterable[str]) -> str | None:
    stable: list[nodesemver.SemVer] = []
    pre: list[nodesemver.SemVer] = []
    for version in versions:
        parsed = _parsed(version)
        if parsed is None:
            continue
        (pre if parsed.prerelease else stable).append(parsed)
    pool = stable or pre
    if not pool:
        return None
    best = max(pool, key=cmp_to_key(_compare))
    return str(best.raw)


def nearest(version: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest below `version` (the newest one older than it), else the closest
    above: what to use instead of a denied version. None when nothing parses."""
    wanted = _parsed(version)
    pool = [p for p in map(_parsed, candidates) if p is not None]
    if wanted is None or not pool:
        return None
    below = [p for p in pool if _compare(p, wanted) < 0]
    if below:
        return str(max(below, key=cmp_to_key(_compare)).raw)
    above = [p for p in pool if _compare(p, wanted) > 0]
    return str(min(above, key=cmp_to_key(_compare)).raw) if above else None


def _compare(a: nodesemver.SemVer, b: nodesemver.SemVer) -> int:
    return int(a.compare(b))
