"""Which release a version's bytes are compared with: the nearest one published before it
whose own verdict is clean, judged first when it never was (to a bounded depth); the nearest
below it in version order where the publish times cannot order them.

Two bad releases published together must not vouch for each other, and a version published
below the whole history (`0.0.1` after 1.x) still has a release before it. The choice, the
bound and what an old release is trusted for: docs/verdicts.md#the-baseline. The walk reads
the releases through a `History`: a whole packument's gating (`Whole`), or the versions gated
one at a time as it reaches them (`gate.packuments.lazyhistory`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from mirrorgate.gate.packuments.times import order_contradicted
from mirrorgate.gate.records import Gated, VersionRecord, readable
from mirrorgate.moments import moment
from mirrorgate.npm.versions import order_key

__all__ = ["DEPTH", "Baseline", "Budget", "History", "Unsettled", "Whole", "choose_baseline",
           "earlier_releases", "lower_releases"]

DEPTH = 3
"""Releases never judged that are read and judged first for one verdict, at most: enough for
a burst of bad releases published together, small enough that a pull waits for few reads."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The release compared with (None: no earlier release, a first version), and the
    releases passed over because their own verdict was not clean."""

    record: VersionRecord | None
    passed_over: tuple[str, ...] = ()
    doubts: tuple[str, ...] = ()
    """Why version order chose it, not publish time (the times contradict it, or the version
    has none), each a sentence for the verdict's evidence."""


@dataclass(frozen=True, slots=True)
class Unsettled:
    """No clean release could be found within the bound: a refusal, never an admission."""

    reason: str


def _readable(gated: Gated, version: str) -> dict[str, VersionRecord]:
    """The releases of `gated` `version` may be compared with (`readable`)."""
    return {text: record for text, record in gated.versions.items()
            if readable(record, version)}


def lower_releases(gated: Gated, version: str) -> list[VersionRecord]:
    """The readable releases below `version` in version order, nearest first."""
    own = order_key(version)
    if own is None:
        return []
    lower = [(key, record) for text, record in _readable(gated, version).items()
             if (key := order_key(text)) is not None and key < own]
    lower.sort(key=lambda item: item[0], reverse=True)
    return [record for _, record in lower]


def earlier_releases(gated: Gated, version: str) -> list[VersionRecord]:
    """The readable releases published before `version`, nearest first by the packument's
    `time` (ties: the lower version first); none without a time for `version`."""
    readable = _readable(gated, version)
    published = moment(gated.time.get(version))
    if published is None:
        return []
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


class History(Protocol):
    """The releases of one package as the walk reads them."""

    def time(self, version: str) -> str | None:
        """`version`'s time in the gated packument (None: denied, or none readable)."""

    def earlier(self, version: str) -> Iterable[VersionRecord]:
        """`earlier_releases`: nearest first."""

    def lower(self, version: str) -> Iterable[VersionRecord]:
        """`lower_releases`: nearest first."""

    def doubts(self) -> tuple[str, ...]:
        """Where the gated packument's times contradict its version order
        (`gate.packuments.times.order_contradicted`)."""

    def gated(self, version: str) -> Gated:
        """A gating that holds `version`'s record, for a release judged first."""


class Whole:
    """A whole packument's gating as the walk's `History`."""

    def __init__(self, gated: Gated) -> None:
        self.whole = gated
        self._doubts: tuple[str, ...] | None = None

    def time(self, version: str) -> str | None:
        return self.whole.time.get(version)

    def earlier(self, version: str) -> list[VersionRecord]:
        return earlier_releases(self.whole, version)

    def lower(self, version: str) -> list[VersionRecord]:
        return lower_releases(self.whole, version)

    def doubts(self) -> tuple[str, ...]:
        if self._doubts is None:
            self._doubts = order_contradicted(self.whole.time)
        return self._doubts

    def gated(self, version: str) -> Gated:
        return self.whole


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


async def choose_baseline(history: History | Gated, version: str, *, judged: Judged,
                          judge_first: JudgeFirst, budget: Budget, settled_after: timedelta,
                          now: datetime | None = None,
                          doubts: tuple[str, ...] = ()) -> Baseline | Unsettled:
    """The nearest earlier release whose verdict is clean. A release never judged that was
    published at least `settled_after` before `version` (it stood public through a whole
    quarantine) is the floor, compared with as it is; a younger one is read and judged first
    while the budget lasts, and past it the version is unsettled. Where the times cannot
    order them (`doubts`: they contradict version order, `gate.packuments.times`; or `version`
    has none), by version order instead (`_by_version`)."""
    releases = Whole(history) if isinstance(history, Gated) else history
    published = moment(releases.time(version))
    if published is None or doubts:
        return await _by_version(
            releases, version, judged=judged, judge_first=judge_first, budget=budget,
            settled_after=settled_after, now=now, doubts=doubts or (
                f"{version} has no publish time mirrorgate can read",))
    passed: list[str] = []
    chosen = await _walk(
        releases.earlier(version), passed, judged=judged, judge_first=judge_first,
        budget=budget, doubts=(),
        floor=lambda when: published - when >= settled_after,
        unsettled="{}, published just before it, was never judged, and more than {} "
                  "releases published with it would have to be read first", history=releases)
    return chosen if chosen is not None else Baseline(None, tuple(passed))


async def _walk(candidates: Iterable[VersionRecord], passed: list[str], *, judged: Judged,
                judge_first: JudgeFirst, budget: Budget, doubts: tuple[str, ...],
                floor: Callable[[datetime], bool], unsettled: str,
                history: History) -> Baseline | Unsettled | None:
    """The first of `candidates` whose verdict is clean, one never judged taken as it is when
    its time is past the `floor`, else read and judged first on the budget; None when each
    was passed over (named in `passed`)."""
    for record in candidates:
        clean = judged(record)
        if clean is None:
            when = moment(history.time(record.version))
            if when is not None and floor(when):
                return Baseline(record, tuple(passed), doubts)
            if not budget.take():
                return Unsettled(unsettled.format(record.version, DEPTH))
            clean = await judge_first(record)
            if clean is None:
                # unread (public failing, its tarball over the bound): compared with as it
                # is, so the version says why (`unchecked`, or `unreadable-release` when the
                # publisher's shape is the cause), never a first version
                return Baseline(record, tuple(passed), doubts)
        if clean:
            return Baseline(record, tuple(passed), doubts)
        passed.append(record.version)
    return None


async def _by_version(history: History, version: str, *, judged: Judged, judge_first: JudgeFirst,
                      budget: Budget, settled_after: timedelta, now: datetime | None,
                      doubts: tuple[str, ...]) -> Baseline | Unsettled:
    """The walk where publish times cannot order the releases (a registry in front stamping
    versions with the day it copied them): the nearest release below `version` whose verdict
    is clean, one never judged read first while the budget lasts, unless it stood public a
    whole quarantine window before `now` (its place against `version` in time is unknown, so
    its own age is what the floor measures). Only a lower version is ever judged first, so
    walks never wait on each other in a circle."""
    def settled(when: datetime) -> bool:
        return now is not None and now - when >= settled_after

    passed: list[str] = []
    chosen = await _walk(
        history.lower(version), passed, judged=judged, judge_first=judge_first,
        budget=budget, doubts=doubts, floor=settled,
        unsettled="{}, the release below it, was never judged, and more than {} releases "
                  "below it would have to be read first", history=history)
    if chosen is not None:
        return chosen
    # nothing below it vouches (it is the lowest, or every one below was refused): the
    # release published just before it, as in the time walk (a version published below the
    # whole history is still compared), but only one judged clean or standing public a
    # quarantine window: none is judged first here, which could lead a walk back up to it
    skipped = False
    for record in history.earlier(version):
        if record.version in passed:
            continue
        clean = judged(record)
        when = moment(history.time(record.version))
        if clean or (clean is None and when is not None and settled(when)):
            return Baseline(record, tuple(passed), doubts)
        skipped = skipped or clean is None
        if clean is False:
            passed.append(record.version)
    if skipped:
        return Unsettled("no release below it, and none published before it that was judged "
                         "clean or stood public a whole quarantine window, could be compared "
                         "with while its registry's times contradict its version order")
    return Baseline(None, tuple(passed), doubts)
