"""The pull log's writer: every tarball served or refused, one `Pull`, written off the
request path.

A request only appends to a bounded buffer in memory; a background loop writes the buffer to
the state store in one transaction every `FLUSH` seconds and prunes what is older than the
retention every `PRUNE` seconds. A `kill -9` loses what the buffer held: at most the last
`FLUSH` seconds of pulls (docs/exposure.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog

from mirrorgate.gate.facts import KeptFacts
from mirrorgate.metrics import Metrics
from mirrorgate.store import PullRow, StoreUnavailableError

__all__ = ["FLUSH", "MAX_BUFFERED", "PRUNE", "PullLog"]

log = structlog.get_logger("mirrorgate.pulls")

FLUSH = 1.0
"""Seconds between writes: the most a kill -9 can lose, for one transaction a second however
busy the proxy is (a warm replay of thousands of tarballs costs a few inserts, not one each)."""
MAX_BUFFERED = 50_000
"""Records held while the store does not answer; past it the oldest is dropped and counted."""
PRUNE = 3600.0
"""Seconds between prunes of the records older than the retention."""
_DROP_REPORT = 1000  # the first drop is logged, then every 1000th


class PullLog:
    """The records waiting to be written, and the loop writing them through `facts`' store
    (the one connection the process already holds); `facts` kept in memory only (no store)
    leaves the log off."""

    def __init__(self, facts: KeptFacts, *, retention_days: int, metrics: Metrics | None = None,
                 flush: float = FLUSH, prune: float = PRUNE, max_buffered: int = MAX_BUFFERED,
                 now: Callable[[], datetime] | None = None) -> None:
        self.facts = facts
        self.retention = timedelta(days=retention_days)
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
        self._max = max_buffered
        self._dropped = 0

    @property
    def enabled(self) -> bool:
        return self.facts.persistent

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def record(self, client: str, name: str, version: str, integrity: str, source: str,
               request_id: str, client_name: str | None = None,
               repository: str | None = None, ref: str | None = None,
               workflow: str | None = None, sha1: str | None = None,
               license: str | None = None, verdict: str | None = None) -> None:
        """One pull, kept for the next write; never awaited, never raises. The fields after
        `request_id` are what a bill of materials reads (`store.Pull`)."""
        if not self.enabled:
            return
        if len(self._buffer) >= self._max:
            self._buffer.popleft()
            self._dropped += 1
            if self.metrics is not None:
                self.metrics.pulls_logged.labels("dropped").inc()
            if self._dropped == 1 or self._dropped % _DROP_REPORT == 0:
                log.warning("pull_log_dropped", dropped=self._dropped, cap=self._max,
                            reason=self.facts.problem or "the state store is behind")
        self._buffer.append((client, name, version, integrity, source, self._stamp(),
                             request_id, client_name, repository, ref, workflow, sha1, license,
                             verdict))

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: write the buffer every `flush_every` seconds, prune now and then;
        what is left is written on the way out."""
        if not self.enabled:
            return
        pruned_at: float | None = None  # pruned once at start-up, then every `prune_every`
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.flush_every)
            await self.flush()
            due = pruned_at is None or loop.time() - pruned_at >= self.prune_every
            if due and self.facts.store is not None:
                pruned_at = loop.time()
                await self.prune()

    async def flush(self) -> int:
        """Write what is buffered in one transaction; on a store that does not answer the
        records stay for the next attempt (the facts' loop reports the outage)."""
        store = self.facts.store
        if not self._buffer or store is None or not self.facts.ready:
            return 0
        batch, self._buffer = list(self._buffer), deque()
        try:
            await store.append_pulls(batch)
        except StoreUnavailableError as error:
            # back in front of those appended meanwhile, the oldest dropped past the cap
            self._buffer.extendleft(reversed(batch))
            while len(self._buffer) > self._max:
                self._buffer.popleft()
                self._dropped += 1
                if self.metrics is not None:
                    self.metrics.pulls_logged.labels("dropped").inc()
            log.debug("pull_log_unwritten", pending=len(self._buffer), reason=str(error))
            return 0
        if self.metrics is not None:
            self.metrics.pulls_logged.labels("written").inc(len(batch))
        return len(batch)

    async def prune(self) -> int:
        store = self.facts.store
        if store is None:
            return 0
        try:
            gone = await store.prune_pulls(self.now() - self.retention)
        except StoreUnavailableError as error:
            log.debug("pull_log_unpruned", reason=str(error))
            return 0
        if gone:
            log.info("pull_log_pruned", records=gone, retention_days=self.retention.days)
        return gone
