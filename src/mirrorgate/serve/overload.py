"""Admission: a bound on the requests doing upstream work, so overload sheds instead of stalling.

Past its capacity a proxy without a bound slows every request together until clients time out;
with one, some requests are told to come back (503, `Retry-After`) and the rest stay fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import structlog

from mirrorgate.metrics import Metrics
from mirrorgate.serve.refusals import Refused

__all__ = ["WAIT", "Admission"]

log = structlog.get_logger("mirrorgate.admission")

WAIT = 1.0
"""Seconds a request waits for a slot before it is shed (a burst is absorbed)."""
RETRY_AFTER = "1"
LOG_EVERY = 100  # `request_shed` is logged on the first shed, then every LOG_EVERYth
# Tarball streams are long-lived (as long as the client takes to read), packument fills short:
# tarballs may hold at most this share of MIRRORGATE_MAX_IN_FLIGHT, so the rest is always there
# for the metadata an install needs first.
TARBALL_SHARE = 0.75


class Admission:
    """Slots for the requests that do upstream work: packument misses and refreshes, version
    documents, tarballs. A warm packument hit never takes one: answered from the cache in one
    step of the event loop, it holds nothing a slot would protect, so shedding it would free
    nothing; it is never counted and never shed, however slow the work that holds the bound."""

    def __init__(self, limit: int, metrics: Metrics, *, wait: float = WAIT) -> None:
        self.limit = limit
        self.tarball_limit = max(1, int(limit * TARBALL_SHARE))
        self._all = asyncio.Semaphore(limit)
        self._tarballs = asyncio.Semaphore(self.tarball_limit)
        self._wait = wait
        self._metrics = metrics
        self._shed = 0

    @asynccontextmanager
    async def slot(self, route: str) -> AsyncIterator[None]:
        """Hold one slot (two for a tarball: its share and the total) for the block; raises
        `Refused(503)` when none frees up within the wait."""
        async with AsyncExitStack() as held:
            try:
                async with asyncio.timeout(self._wait):
                    if route == "tarball":
                        await self._tarballs.acquire()
                        held.callback(self._tarballs.release)
                    await self._all.acquire()
                    held.callback(self._all.release)
            except TimeoutError:
                raise self._refuse(route) from None
            yield

    def _refuse(self, route: str) -> Refused:
        """The 503 with `Retry-After` and a JSON reason, counted in
        `mirrorgate_shed_total{route}`."""
        self._shed += 1
        self._metrics.shed.labels(route).inc()
        if self._shed == 1 or self._shed % LOG_EVERY == 0:
            log.warning("request_shed", route=route, shed=self._shed, limit=self.limit)
        return Refused(503, f"mirrorgate is at its limit of {self.limit} requests doing "
                       f"upstream work (MIRRORGATE_MAX_IN_FLIGHT); retry in {RETRY_AFTER} s",
                       reason="overloaded", headers={"Retry-After": RETRY_AFTER})
