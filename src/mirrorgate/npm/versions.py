"""Version ordering as npm does it, for choosing `dist-tags.latest` among survivors.

`highest` is the rule npm registries follow when a tag must be repointed: the highest stable
version, or, when there is none, the highest prerelease. Ordering is node-semver's (a
maintained port of npm's own `semver`); strings it cannot parse are never chosen.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cmp_to_key

import nodesemver

__all__ = ["highest", "is_prerelease", "nearest"]


def _parsed(version: str) -> nodesemver.SemVer | None:
    try:
        return nodesemver.make_semver(version, loose=True)
    except (ValueError, TypeError):
        return None


def is_prerelease(version: str) -> bool:
    parsed = _parsed(version)
    return parsed is not None and bool(parsed.prerelease)


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
