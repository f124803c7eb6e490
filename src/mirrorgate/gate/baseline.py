"""Which release a version's bytes are compared with: the nearest one published before it
whose own verdict is clean, judged first when it never was (to a bounded depth).

Two bad releases published together must not vouch for each other, and a version published
below the whole history (`0.0.1` after 1.x) still has a release before it. The choice, the
bound and what an old release is trusted for: docs/verdicts.md#the-baseline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from mirrorgate.gate.records import Gated, VersionRecord
from mirrorgate.moments import moment
from mirrorgate.npm.versions import is_prerelease, order_key, version_before

__all__ = ["DEPTH", "Baseline", "Budget", "Unsettled", "choose_baseline", "earlier_releases"]

DEPTH = 3
"""Releases never judged that are read and judged first for one verdict, at most: enough for
a burst of bad releases published together, small enough that a pull waits for few reads."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The release compared with (None: no earlier release, a first version), and the
    releases passed over because their own verdict was not clean."""

    record: VersionRecord | None
    passed_over: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Unsettled:
    """No clean release could be found within the bound: a refusal, never an admission."""

    reason: str


def earlier_releases(gated: Gated, version: str) -> list[VersionRecord]:
    """The releases published before `version` whose bytes mirrorgate can read from public,
    verified, nearest first by the packument's `time` (ties: the lower version first). A
    prerelease is one only for a prerelease. Without a time for `version`, version order."""
    readable = {text: record for text, record in gated.versions.items()
                if text != version and record.upstream_tarball is not None and record.digests
                and (is_prerelease(version) or not is_prerelease(text))}
    published = moment(gated.time.get(version))
    if published is None:
        before = version_before(readable, version)
        return [readable[before]] if before is not None else []
    own = order_key(version)
    dated: list[tuple[datetime, tuple[object, ...], VersionRecord]] = []
    for text, record in readable.items():
        when = moment(gated.time.get(text))
        key = order_key(text)
        if when is None or key is None:
            continue
        # published together (one second apart, or the same stamp): the lower version first
        if when < published or (when == published and own is not None and key < own):
            dated.append((when, key, record))
    dated.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [record for _, _, record in dated]


Judged = Callable[[VersionRecord], bool | None]
"""A release's kept verdict: True clean, False not clean, None never judged."""
JudgeFirst = Callable[[VersionRecord], Awaitable[bool | None]]
"""Read and judge a release now (its own baseline chosen the same way, on the same budget):
True when its verdict is clean, False when not, None when its bytes could not be read."""


@dataclass(slots=True)
class Budget:
    """The releases one verdict may still read and judge first, shared by the whole walk (a
    release judged first chooses its own baseline from the same budget)."""

    left: int = DEPTH

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


async def choose_baseline(gated: Gated, version: str, *, judged: Judged,
                          judge_first: JudgeFirst, budget: Budget,
                          settled_after: timedelta) -> Baseline | Unsettled:
    """The nearest earlier release whose verdict is clean. A release never judged that was
    published at least `settled_after` before `version` (it stood public through a whole
    quarantine) is the floor, compared with as it is; a younger one is read and judged first
    while the budget lasts, and past it the version is unsettled."""
    published = moment(gated.time.get(version))
    passed: list[str] = []
    for record in earlier_releases(gated, version):
        clean = judged(record)
        if clean is None:
            when = moment(gated.time.get(record.version))
            if published is not None and when is not None and published - when >= settled_after:
                return Baseline(record, tuple(passed))
            if not budget.take():
                return Unsettled(
                    f"{record.version}, published just before it, was never judged, and more "
                    f"than {DEPTH} releases published with it would have to be read first")
            clean = await judge_first(record)
            if clean is None:
                # unread (public failing, its tarball over the bound): compared with as it
                # is, so the version says why (`unchecked`, or `unreadable-release` when the
                # publisher's shape is the cause), never a first version
                return Baseline(record, tuple(passed))
        if clean:
            return Baseline(record, tuple(passed))
        passed.append(record.version)
    return Baseline(None, tuple(passed))
