"""Admission: a bound on the requests doing upstream work, so overload sheds instead of stalling.

Past its capacity a proxy without a bound slows every request together until clients time out;
with one, some requests are told to come back (503, `Retry-After`) and the rest stay fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog

from mirrorgate.metrics import Metrics
from mirrorgate.serve.refusals import Refused

__all__ = ["TARBALL_WAIT", "WAIT", "Admission", "Slot"]

log = structlog.get_logger("mirrorgate.admission")

WAIT = 1.0
"""Seconds a metadata request waits for a slot before it is shed (a burst is absorbed)."""
TARBALL_WAIT = 30.0
"""Seconds a tarball request waits for a slot. npm waits minutes for an answer (its
fetch-timeout is 5 minutes) and CI often turns its retries off, while a tarball slot frees
when its upstream download ends, every few seconds under load: a 1 s wait sheds requests that
a short wait would have served, and a 503 to a build with retries off fails the build."""
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

    def __init__(self, limit: int, metrics: Metrics, *, wait: float = WAIT,
                 tarball_wait: float = TARBALL_WAIT) -> None:
        self.limit = limit
        self.tarball_limit = max(1, int(limit * TARBALL_SHARE))
        self._all = asyncio.Semaphore(limit)
        self._tarballs = asyncio.Semaphore(self.tarball_limit)
        self._wait = wait
        self._tarball_wait = tarball_wait
        self._metrics = metrics
        self._shed = 0

    @asynccontextmanager
    async def slot(self, route: str) -> AsyncIterator[Slot]:
        """Hold one slot (two for a tarball: its share and the total) for the block, or until
        it is released or handed over (`Slot`); raises `Refused(503)` when none frees up
        within the wait (`TARBALL_WAIT` for a tarball, `WAIT` for the rest)."""
        held = Slot()
        try:
            async with asyncio.timeout(self._tarball_wait if route == "tarball"
                                       else self._wait):
                if route == "tarball":
                    await self._tarballs.acquire()
                    held.add(self._tarballs.release)
                await self._all.acquire()
                held.add(self._all.release)
        except TimeoutError:
            held.release()
            raise self._refuse(route) from None
        try:
            yield held
        finally:
            if not held.handed:
                held.release()

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


class Slot:
    """The semaphores one request holds. `release()` gives them back early (a tarball read
    from a spool does no upstream work); `hand_over()` passes them to whatever goes on doing
    the upstream work (a spool's download), which releases them with the function returned:
    the request's end then releases nothing."""

    def __init__(self) -> None:
        self._releases: list[Callable[[], None]] = []
        self.handed = False

    def add(self, release: Callable[[], None]) -> None:
        self._releases.append(release)

    def release(self) -> None:
        releases, self._releases = self._releases, []
        for release in releases:
            release()

    def hand_over(self) -> Callable[[], None]:
        self.handed = True
        return self.release
