"""The pull log's writer: every tarball served, one `Pull`; every refusal, added to its
(client, version, rule, hour)'s count; written off the request path, kept within a bound.

A request only appends to bounded buffers in memory; a background loop writes them to the
state store every `FLUSH` seconds, and prunes what is past the retention or past the bound on
records every `PRUNE` seconds and whenever a tenth of the bound was written since. A `kill -9`
loses what the buffers held: at most the last `FLUSH` seconds of pulls (docs/exposure.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.metrics import Metrics
from mirrorgate.store import (
    PULL_COLUMNS,
    PullRow,
    RefusalRow,
    StoreUnavailableError,
    storable_row,
)

__all__ = ["FLUSH", "MAX_BUFFERED", "MAX_RECORDS", "MAX_REFUSALS", "PRUNE", "PullLog"]

log = structlog.get_logger("mirrorgate.pulls")

FLUSH = 1.0
"""Seconds between writes: the most a kill -9 can lose, for one transaction a second however
busy the proxy is (a warm replay of thousands of tarballs costs a few inserts, not one each)."""
MAX_BUFFERED = 50_000
"""Served pulls held while the store does not answer; past it the oldest is dropped and counted."""
MAX_REFUSALS = 10_000
"""Refusal counts held between writes (one per client, version, rule and hour: a loop of one
refused pull is one); past it a new one is dropped and counted, those held still count."""
MAX_RECORDS = 10_000_000
"""The bound on the log's records (served pulls and refusal counts) by default
(MIRRORGATE_PULL_LOG_MAX_RECORDS)."""
PRUNE = 3600.0
"""Seconds between prunes of the records past the retention or the bound."""
_HOUR = 3600
_DROP_REPORT = 1000  # the first drop is logged, then every 1000th
_Row = TypeVar("_Row", PullRow, RefusalRow)
_Held = list[Any]  # a refusal count in memory: integrity, first, last, pulls, request id, until


class PullLog:
    """The records waiting to be written, and the loop writing them through `facts`' store
    (the one connection the process already holds); `facts` kept in memory only (no store)
    leaves the log off."""

    def __init__(self, facts: KeptFacts, *, retention_days: int,
                 max_records: int = MAX_RECORDS, metrics: Metrics | None = None,
                 flush: float = FLUSH, prune: float = PRUNE, max_buffered: int = MAX_BUFFERED,
                 max_refusals: int = MAX_REFUSALS,
                 now: Callable[[], datetime] | None = None) -> None:
        self.facts = facts
        self.retention = timedelta(days=retention_days)
        self.max_records = max_records
        self.metrics = metrics
        self.flush_every = flush
        self.prune_every = prune
        self.now: Callable[[], datetime] = now or (lambda: datetime.now(UTC))
        # a record's time on the request path is the clock's float, not a datetime (the
        # datetime cost more than the rest of a record); a test's own `now` still decides it
        self._stamp: Callable[[], float] = (
            time.time if now is None else lambda: self.now().timestamp())
        # plain tuples, as the store writes them: no object per pull (bench/pull_log.py)
        self._buffer: deque[PullRow] = deque()
        self._refused: dict[tuple[str, str, str, str, float], _Held] = {}
        self._max = max_buffered
        self._max_refusals = max_refusals
        self._dropped = 0
        self._reported = {"escaped": 0, "unwritable": 0}  # records the store refused as given
        self._written_since_prune = 0
        self._writing = 0  # records out of the buffers, in the write under way

    @property
    def enabled(self) -> bool:
        return self.facts.persistent

    @property
    def buffered(self) -> int:
        """Records held in memory: waiting, or in the write under way."""
        return len(self._buffer) + len(self._refused) + self._writing

    def record(self, client: str, name: str, version: str, integrity: str, source: str,
               request_id: str, client_name: str | None = None,
               repository: str | None = None, ref: str | None = None,
               workflow: str | None = None, sha1: str | None = None,
               license: str | None = None, verdict: str | None = None) -> None:
        """One pull served (`source`: "mirror" or "public"), kept for the next write; never
        awaited, never raises. The fields after `request_id` are what a bill of materials
        reads (`store.Pull`)."""
        if not self.enabled:
            return
        if len(self._buffer) >= self._max:
            self._buffer.popleft()
            self._drop()
        self._buffer.append((client, name, version, integrity, source, self._stamp(),
                             request_id, client_name, repository, ref, workflow, sha1, license,
                             verdict))

    def refusal(self, client: str, name: str, version: str, integrity: str, rule: str,
                request_id: str, until: float | None = None) -> None:
        """One pull refused by `rule` (held `until` a moment, seconds since the epoch, for a
        cooldown or a quarantine), added to its hour's count: a client repeating it costs
        memory and the store nothing more (docs/exposure.md)."""
        if not self.enabled:
            return
        at = self._stamp()
        key = (client, name, version, rule, float(int(at) // _HOUR * _HOUR))
        held = self._refused.get(key)
        if held is not None:
            held[2] = at
            held[3] += 1
            held[5] = until  # the latest refusal's word on when it ends
        elif len(self._refused) < self._max_refusals:
            self._refused[key] = [integrity, at, at, 1, request_id, until]
        else:  # a flood of distinct refusals while the store is away: the new ones go
            self._drop()

    def _drop(self) -> None:
        self._dropped += 1
        if self.metrics is not None:
            self.metrics.pulls_logged.labels("dropped").inc()
        if self._dropped == 1 or self._dropped % _DROP_REPORT == 0:
            log.warning("pull_log_dropped", dropped=self._dropped, cap=self._max,
                        refusals_cap=self._max_refusals,
                        reason=self.facts.problem or "the state store is behind")

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: write the buffers every `flush_every` seconds, prune now and then;
        what is left is written on the way out."""
        if not self.enabled:
            return
        pruned_at: float | None = None  # pruned once at start-up, then every `prune_every`
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.flush_every)
            await self.flush()
            due = (pruned_at is None or loop.time() - pruned_at >= self.prune_every
                   or self._written_since_prune >= max(1, self.max_records // 10))
            if due and self.facts.store is not None:
                pruned_at = loop.time()
                await self.prune()

    async def flush(self) -> int:
        """Write what is buffered, served pulls then refusal counts, a transaction each; on
        a store that does not answer the records stay for the next attempt (the facts' loop
        reports the outage). Records the store refuses are found by halving the batch, and
        each is written escaped or dropped: one bad record never holds back the others."""
        store = self.facts.store
        if store is None or not self.facts.ready or not (self._buffer or self._refused):
            return 0
        served, self._buffer = list(self._buffer), deque()
        refused: list[RefusalRow] = [(*key, *held) for key, held in self._refused.items()]
        self._refused = {}
        self._writing = len(served) + len(refused)
        left, unwritten = served, refused
        try:
            written, left = await self._write(store.append_pulls, served)
            if not left:
                counted, unwritten = await self._write(store.add_refusals, refused)
                written += counted
        finally:  # left for the next write: the store stopped answering, or the task was
            # killed mid-write (then a part already written may be written again)
            self._writing = 0
            # back in front of those appended meanwhile, in order, the oldest dropped past
            # the cap
            self._buffer.extendleft(reversed(left))
            while len(self._buffer) > self._max:
                self._buffer.popleft()
                self._drop()
            for row in unwritten:
                self._hold_again(row)
        self._written_since_prune += written
        if self.metrics is not None and written:
            self.metrics.pulls_logged.labels("written").inc(written)
        return written

    def _hold_again(self, row: RefusalRow) -> None:
        """A refusal count not written: folded back into the one counted meanwhile."""
        client, name, version, rule, hour, integrity, first, last, pulls, request_id, until = row
        held = self._refused.get((client, name, version, rule, hour))
        if held is None:
            self._refused[(client, name, version, rule, hour)] = [
                integrity, first, last, pulls, request_id, until]
            return
        held[0], held[1], held[4] = integrity, first, request_id  # the earlier's
        held[3] += pulls

    async def _write(self, write: Callable[[Sequence[_Row]], Awaitable[None]],
                     rows: list[_Row]) -> tuple[int, list[_Row]]:
        """(records written, records left because the store stopped answering)."""
        # a stack of parts: the one to write next is the last; a reason marks a record
        # written again escaped after the store refused it as it was
        parts: list[tuple[list[_Row], str | None]] = [(rows, None)] if rows else []
        written = 0
        while parts:
            part, refused_as_given = parts[-1]
            try:
                await write(part)
            except StoreUnavailableError as error:
                log.debug("pull_log_unwritten", pending=self.buffered, reason=str(error))
                return written, [row for part, _ in reversed(parts) for row in part]
            except Exception as error:  # the records' fault: halve, then each
                if len(part) > 1:
                    half = len(part) // 2
                    parts[-1:] = [(part[half:], None), (part[:half], None)]
                    continue
                reason = f"{type(error).__name__}: {error}"[:300]
                escaped = storable_row(part[0])
                if refused_as_given is None and escaped != part[0]:
                    parts[-1] = ([escaped], reason)  # PostgreSQL's text and a NUL
                    continue
                self._report("unwritable", part[0], reason)
            else:
                written += len(part)
                if refused_as_given is not None:
                    self._report("escaped", part[0], refused_as_given)
            parts.pop()
        return written, []

    def _report(self, outcome: str, row: PullRow | RefusalRow, reason: str) -> None:
        count = self._reported[outcome] = self._reported[outcome] + 1
        if self.metrics is not None:
            self.metrics.pulls_logged.labels(outcome).inc()
        if count == 1 or count % _DROP_REPORT == 0:  # the first, then every 1000th
            integrity = row[3] if len(row) == len(PULL_COLUMNS) else row[5]
            fields = {"package": row[1], "version": row[2], "client": row[0],
                      "integrity": str(integrity)[:200], "count": count, "reason": reason}
            if outcome == "escaped":
                log.error("pull_log_record_escaped", **fields)
            else:
                log.error("pull_log_record_unwritable", **fields)

    async def prune(self) -> None:
        """Drop the records past the retention, then the oldest past the bound (refusal
        counts first: no number of refusals pushes a served pull out)."""
        store = self.facts.store
        if store is None:
            return
        try:
            pruned = await store.prune_pulls(self.now() - self.retention, self.max_records)
        except StoreUnavailableError as error:
            log.debug("pull_log_unpruned", reason=str(error))
            return
        self._written_since_prune = 0
        if self.metrics is not None:
            self.metrics.pull_log_records.set(pruned.kept)
            self.metrics.pull_log_pruned.labels("age").inc(pruned.by_age)
            self.metrics.pull_log_pruned.labels("size").inc(pruned.by_size)
        if pruned.by_age:
            log.info("pull_log_pruned", records=pruned.by_age,
                     retention_days=self.retention.days)
        if pruned.by_size:
            log.warning("pull_log_full", records=pruned.by_size, kept=pruned.kept,
                        max_records=self.max_records)
