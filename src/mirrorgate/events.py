"""What happened lately, for the status page: a bounded in-memory ring of notable events.

Denials, tamper verdicts, upstream failures and job outcomes are recorded by one-line calls
where they happen. Nothing is persisted (a restart empties the ring) and at most `CAPACITY` are
kept; totals live in the Prometheus counters, this only answers "what, lately, and why".
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["CAPACITY", "WINDOW_SECONDS", "Event", "Recent"]

CAPACITY = 200
"""Events the ring keeps per kind; older ones are dropped."""
WINDOW_SECONDS = 3600
"""Job outcomes are also counted per minute over this window ("the last hour")."""
_MINUTE = 60


@dataclass(frozen=True, slots=True)
class Event:
    at: datetime
    kind: str
    """denied | tampered | upstream_failed | job | published (a client's write, `publishing`)"""
    subject: str
    """A package (`name` or `name@version`), or an upstream's label."""
    detail: str


def _wall() -> datetime:
    return datetime.now(UTC)


class Recent:
    """The ring, one bounded deque per kind (so a burst of job outcomes cannot push the last
    tamper event out), plus per-minute job outcome counts over the last hour."""

    def __init__(self, *, capacity: int = CAPACITY, now: Callable[[], datetime] = _wall,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._now = now
        self._clock = clock
        self._rings: dict[str, deque[Event]] = {}
        self._last_failure: dict[str, Event] = {}
        self._minutes: deque[tuple[int, dict[str, int]]] = deque()

    def record(self, kind: str, subject: str, detail: str) -> None:
        event = Event(self._now(), kind, subject, detail[:500])
        ring = self._rings.get(kind)
        if ring is None:
            ring = self._rings[kind] = deque(maxlen=self.capacity)
        ring.append(event)
        if kind == "upstream_failed":
            self._last_failure[subject] = event

    def denied(self, package: str, rule: str, reason: str) -> None:
        self.record("denied", package, f"{rule}: {reason}")

    def tampered(self, package: str, detail: str) -> None:
        self.record("tampered", package, detail)

    def upstream_failed(self, upstream: str, kind: str, detail: str) -> None:
        self.record("upstream_failed", upstream, f"{kind}: {detail}")

    def job(self, package: str, outcome: str) -> None:
        self.record("job", package, outcome)
        minute = int(self._clock() // _MINUTE)
        if not self._minutes or self._minutes[-1][0] != minute:
            self._minutes.append((minute, {}))
        counts = self._minutes[-1][1]
        counts[outcome] = counts.get(outcome, 0) + 1
        self._expire(minute)

    def _expire(self, minute: int) -> None:
        while self._minutes and self._minutes[0][0] <= minute - WINDOW_SECONDS // _MINUTE:
            self._minutes.popleft()

    def latest(self, kind: str, limit: int = 20) -> list[Event]:
        """The newest events of a kind, newest first."""
        ring = self._rings.get(kind)
        return list(reversed(ring))[:limit] if ring else []

    def last_failures(self) -> dict[str, Event]:
        """The last failure of each upstream that failed since the process started."""
        return dict(self._last_failure)

    def outcomes_last_hour(self) -> dict[str, int]:
        self._expire(int(self._clock() // _MINUTE))
        totals: dict[str, int] = {}
        for _minute, counts in self._minutes:
            for outcome, count in counts.items():
                totals[outcome] = totals.get(outcome, 0) + count
        return totals
