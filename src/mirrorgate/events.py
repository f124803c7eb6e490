"""What happened lately, for the status page: a bounded in-memory ring of notable events.

Denials, tamper verdicts, upstream failures and job outcomes are recorded by one-line calls
where they happen. Nothing is persisted (a restart empties the ring) and at most `CAPACITY` are
kept; totals live in the Prometheus counters, this only answers "what, lately, and why".

The security events a person must act on also go out as an `Alert`, through the same object
every component already holds (`metrics.events.alert(...)`): the composition root points it
at the notifier (`notify`) when `MIRRORGATE_NOTIFY_URL` is set; otherwise an alert goes nowhere.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["ALERT_KINDS", "CAPACITY", "WINDOW_SECONDS", "Alert", "Event", "Recent"]

CAPACITY = 200
"""Events the ring keeps per kind; older ones are dropped."""
WINDOW_SECONDS = 3600
"""Job outcomes are also counted per minute over this window ("the last hour")."""
_MINUTE = 60


@dataclass(frozen=True, slots=True)
class Event:
    at: datetime
    kind: str
    """denied | tampered | upstream_failed | job | published (a client's write, `publishing`) |
    pulled (a tarball a signed-in client fetched, `access`)"""
    subject: str
    """A package (`name` or `name@version`), or an upstream's label."""
    detail: str
    client: str | None = None
    """The client it was about, for a pull: who may read it (`serve.ui.readers`)."""


ALERT_KINDS = ("tampered", "malware", "quarantine", "takeover", "forged-job", "forged-mark",
               "install-scripts", "withdrawn", "release-signal", "waiver-granted",
               "waiver-revoked", "exposure")
"""What a security team is told about (the CloudEvents type is `dev.mirrorgate.<kind>`):
bytes that did not match the admitted digest; a version denied as malware; a takeover signal
that quarantined or denied a version; a queue message that is not a job the proxy wrote (unsigned,
forged, stale); a client publish carrying the mirror mark; a tarball whose own package.json runs
code the manifest hid; a mirrored version withdrawn from the public registry; a release signal
that refused a version read from its bytes (`gate.verdicts.judge`); an operator's waiver granted or
revoked (`mirrorgate allow`), which admits a version past every rule; a version already served
to clients that turned bad afterwards, with who pulled it (`gate.pulls.exposure`)."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One security event for people: `text` is the one line a chat shows, `data` the fields a
    program reads. Repeats are recognised by (`kind`, `key`), `subject` unless given (a flood
    of unsigned messages is one alert, not one per message)."""

    kind: str
    subject: str
    text: str
    package: str | None = None
    version: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ALERT_KINDS:
            raise ValueError(f"unknown alert kind {self.kind!r}; one of {ALERT_KINDS}")

    @property
    def repeat_key(self) -> tuple[str, str]:
        return self.kind, self.key if self.key is not None else self.subject


def _wall() -> datetime:
    return datetime.now(UTC)


def _nowhere(_alert: Alert) -> None:
    return None


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
        self._alerts: Callable[[Alert], None] = _nowhere

    def send_alerts_to(self, sink: Callable[[Alert], None]) -> None:
        """Where `alert` hands security events from now on (the notifier's `post`, which never
        waits and never raises)."""
        self._alerts = sink

    def alert(self, alert: Alert) -> None:
        """A security event for people (see `ALERT_KINDS`); the ring is not touched, the
        caller records what the status page shows as before."""
        self._alerts(alert)

    def withdrawn(self, package: str, version: str, reason: str, **data: Any) -> None:
        """A mirrored version the public registry withdrew (unpublished, or replaced by a
        security placeholder): the call the fill makes when it first sees one. The mirror
        refuses it from then on; its copy is still in the private registry, for a person to
        delete (docs/withdrawals.md)."""
        self.record("denied", f"{package}@{version}", f"public-withdrawn: {reason}")
        self.alert(Alert("withdrawn", f"{package}@{version}",
                         f"{package}@{version} was withdrawn from the public registry; the "
                         f"mirror no longer serves its copy, which is still in the private "
                         f"registry: {reason}", package, version, {"reason": reason, **data}))

    def record(self, kind: str, subject: str, detail: str, client: str | None = None) -> None:
        event = Event(self._now(), kind, subject, detail[:500], client)
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
