"""Who already has a version that turned bad: the warning sent once per version and cause
when a version the pull log says was served becomes refused.

`ExposureWarnings` hears of a version turning bad (a withdrawal seen by this process), writes
the pull log's buffer, reads who was served it (`Store.pulled`: served pulls alone, summed per
client, so no number of refusals or of pulls hides one), and, when anyone was, claims the
warning in the store (`Store.claim`: one replica of a fleet wins) before one `version_exposed`
line and one `dev.mirrorgate.exposure` notification.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from mirrorgate.events import Alert
from mirrorgate.gate.kept.facts import RETRY
from mirrorgate.gate.pulls.log import PullLog
from mirrorgate.gate.records import Gated
from mirrorgate.metrics import Metrics
from mirrorgate.rules import (
    ADVISORY_MALWARE,
    ADVISORY_SEVERITY,
    DENY_LIST,
    PROVENANCE_CONTINUITY,
    PUBLISHER_CHANGE,
)
from mirrorgate.rules.releasetable import RELEASE_SIGNALS
from mirrorgate.store import Exposure, StoreUnavailableError

__all__ = ["SENT", "Exposure", "ExposureWarnings", "document", "iso"]

log = structlog.get_logger("mirrorgate.exposure")

SENT = "exposure-sent"
"""Fact kind: `name@version#cause` warned about (value: when), so a fleet warns once."""
_CLIENTS_LISTED = 50  # in one notification; the rest are counted (`mirrorgate exposure` lists all)
_CLIENTS_READ = 100_000  # clients of one version read for a warning (each a summed row)
_PENDING = 1_000  # versions waiting to be checked; a flood past it is logged, not queued
TURNED_BAD = frozenset({DENY_LIST, ADVISORY_MALWARE, ADVISORY_SEVERITY, PUBLISHER_CHANGE,
                        PROVENANCE_CONTINUITY, *RELEASE_SIGNALS})
"""Rules whose denial of a version says something is wrong with it (a deny entry, a malware or
qualifying advisory, a takeover's marks, a release signal: flagged in report mode and served,
then enforced), not merely that it is held back (too young, unsigned): those are checked
against the log."""
_CHECKED = 100_000  # (version, rule) pairs this process already checked, the oldest forgotten


def document(exposure: Exposure) -> dict[str, object]:
    """One client's pulls of one version as `mirrorgate exposure --json` prints it."""
    return {"client": exposure.client, "name": exposure.name, "version": exposure.version,
            "first": iso(exposure.first), "last": iso(exposure.last), "pulls": exposure.pulls,
            "sources": list(exposure.sources), "integrity": list(exposure.integrity)}


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class TurnedBad:
    name: str
    version: str
    cause: str
    """"withdrawn" (by the public registry), or the rule that now denies it."""
    reason: str


class ExposureWarnings:
    """Versions that turned bad, checked against the pull log in the background."""

    def __init__(self, pulls: PullLog, metrics: Metrics,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.pulls = pulls
        self.metrics = metrics
        self.now = now
        # held by the object, not by `run`: a run started again after a death (`tasks`)
        # finds what was heard meanwhile
        self._queue: asyncio.Queue[TurnedBad] = asyncio.Queue()
        self._checked: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def gated(self, gated: Gated) -> None:
        """A packument just gated: each version a `TURNED_BAD` rule denies is checked once per
        process (then the claim in the store keeps a restart or a replica from warning again).
        A version denied from its first sight was never served, and costs one read."""
        if not self.pulls.enabled or not any(rule in TURNED_BAD for rule in gated.denials):
            return
        name = gated.name.full
        for record in gated.versions.values():
            denial = record.denial
            if denial is None or denial.rule not in TURNED_BAD:
                continue
            key = (name, record.version, denial.rule)
            if key in self._checked:
                continue
            self._checked[key] = None
            while len(self._checked) > _CHECKED:
                self._checked.popitem(last=False)
            self.turned_bad(name, record.version, denial.rule, denial.reason)

    def turned_bad(self, name: str, version: str, cause: str, reason: str) -> None:
        """Heard on a request's path: queued, never awaited."""
        if not self.pulls.enabled:
            return
        event = TurnedBad(name, version, cause, reason)
        if self._queue.qsize() < _PENDING:
            self._queue.put_nowait(event)
        else:
            log.warning("exposure_unchecked", package=name, version=version, cause=cause,
                        reason="too many versions turned bad at once; ask `mirrorgate "
                        "exposure` for this one")

    async def run(self, stop: asyncio.Event) -> None:
        if not self.pulls.enabled:
            return
        while not stop.is_set():
            getting = asyncio.ensure_future(self._queue.get())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not getting.done():
                getting.cancel()
                return
            event = getting.result()
            while not stop.is_set():
                try:
                    await self.check(event)
                    break
                except StoreUnavailableError as error:  # the facts' loop reports the outage
                    log.debug("exposure_check_waits", package=event.name, reason=str(error))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), RETRY)

    async def check(self, event: TurnedBad) -> bool:
        """Warn about `event` when the log says the version was served and no replica has
        warned about it for this cause yet; True when this call warned."""
        store = self.pulls.facts.store
        if store is None:
            raise StoreUnavailableError("the state store is not open yet")
        await self.pulls.flush()  # this process's last second of pulls counts too
        served = await store.pulled(name=event.name, version=event.version,
                                    limit=_CLIENTS_READ)
        if not served:
            return False
        label = f"{event.name}@{event.version}"
        if not await store.claim(SENT, f"{label}#{event.cause}", iso(self.now())):
            return False  # another replica (or an earlier run) warned
        clients = [{"client": e.client, "first": iso(e.first), "last": iso(e.last),
                    "pulls": e.pulls} for e in served]
        log.critical("version_exposed", security=True, package=event.name,
                     version=event.version, cause=event.cause, reason=event.reason,
                     clients=clients[:_CLIENTS_LISTED], client_count=len(clients))
        self.metrics.exposures.labels(event.cause).inc()
        named = ", ".join(f"{c['client']} ({c['pulls']} pull{'s' if c['pulls'] != 1 else ''}, "
                          f"last {c['last']})" for c in clients[:10])
        more = f" and {len(clients) - 10} more" if len(clients) > 10 else ""
        turned = (f"was withdrawn {event.reason}" if event.cause == "withdrawn"
                  else f"is now denied by the {event.cause} rule ({event.reason})")
        self.metrics.events.alert(Alert(
            "exposure", label,
            f"{label} {turned}, after mirrorgate served it to "
            f"{len(clients)} client{'s' if len(clients) != 1 else ''}: {named}{more}",
            event.name, event.version,
            {"cause": event.cause, "reason": event.reason,
             "clients": clients[:_CLIENTS_LISTED], "client_count": len(clients)},
            key=f"{label}#{event.cause}"))
        return True
