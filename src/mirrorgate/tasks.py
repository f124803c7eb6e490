"""The process's background tasks, watched: one that dies is logged, counted and started again
after a backoff, and `/readyz` answers 503 while it is down.

Every long-lived loop (the store's poll, the pull log's writer, the exposure warnings, the
advisory feed, the rules' and the client tokens' watchers, the notifier's sender) is started
through the process's one `Tasks`: before it, one row PostgreSQL refused killed the pull log's
writer unseen, and no pull was logged again (docs/operations.md, "Background tasks").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from mirrorgate.metrics import Metrics

__all__ = ["FIRST_BACKOFF", "LONGEST_BACKOFF", "SETTLED", "Tasks"]

log = structlog.get_logger("mirrorgate.tasks")

FIRST_BACKOFF = 1.0
"""Seconds before a task that died is started again; doubled at each death in a row."""
LONGEST_BACKOFF = 30.0
"""The longest wait: a task that dies at every start is tried twice a minute."""
SETTLED = 60.0
"""Seconds a task must have run for its next death to start the backoff afresh."""

Loop = Callable[[], Coroutine[Any, Any, None]]


class Tasks:
    """The tasks `keep` started, each under a keeper task that starts it again when it raises
    or is cancelled by anything but its keeper. A task that returns is done. `stop` (the
    process's) cuts a backoff short: the task then starts once more and sees the stop, so
    what it does on the way out (a last write) still happens; one that dies after the stop
    is not started again."""

    def __init__(self, metrics: Metrics | None = None, *, stop: asyncio.Event | None = None,
                 first: float = FIRST_BACKOFF, longest: float = LONGEST_BACKOFF,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.stop = stop
        """The process's stop event (the process sets it once it has one)."""
        self.first = first
        self.longest = longest
        self.clock = clock
        self.restarts: Counter[str] = Counter()
        self._keepers: dict[str, asyncio.Task[None]] = {}
        self._down: dict[str, tuple[str, float]] = {}  # name -> (why, when it starts again)

    def keep(self, name: str, run: Loop) -> asyncio.Task[None]:
        """Run `run()` as the task `name`, started again each time it dies. Returns its
        keeper: cancelling it (or `drop`) ends the task for good. A task kept under the same
        name before is cancelled first (a new advisory feed replaces the old)."""
        if self.metrics is not None:  # the series at 0 from the start: an alert's
            self.metrics.task_restarts.labels(name)  # `increase()` then sees the first death
        old = self._keepers.get(name)
        if old is not None and not old.done():
            old.cancel()
        keeper = asyncio.get_running_loop().create_task(self._keep(name, run),
                                                        name=f"{name} (kept)")
        self._keepers[name] = keeper
        return keeper

    async def drop(self, name: str) -> None:
        """End the task `name` (cancelled), and wait for it."""
        keeper = self._keepers.pop(name, None)
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def join(self) -> None:
        """Wait for every task to return (each ends when the process's stop event is set)."""
        keepers = list(self._keepers.values())
        if keepers:
            await asyncio.gather(*keepers, return_exceptions=True)

    async def cancel(self) -> None:
        """End every task still running, and wait for them."""
        for name in list(self._keepers):
            await self.drop(name)

    def problem(self) -> str | None:
        """Why the process is not ready because of its tasks: the first one down, or None."""
        for name, (why, restart_at) in self._down.items():
            left = max(0.0, restart_at - self.clock())
            return (f"the background task {name} stopped ({why}); it starts again in "
                    f"{left:.1f} s (restart {self.restarts[name]} since start)")
        return None

    async def _keep(self, name: str, run: Loop) -> None:
        backoff = self.first
        while True:
            started = self.clock()
            task = asyncio.get_running_loop().create_task(run(), name=name)
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:  # the keeper itself: the task ends for good
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise
            if task.cancelled():
                error: BaseException | None = None
                why = "cancelled by something other than the process's stop"
            else:
                error = task.exception()
                if error is None:
                    return  # it returned: done
                why = f"{type(error).__name__}: {error}"[:300]
            if self.stop is not None and self.stop.is_set():  # dying on its way out: done
                log.error("task_died", task=name, reason=why, retry_in=None, exc_info=error)
                return
            if self.clock() - started >= SETTLED:
                backoff = self.first
            self.restarts[name] += 1
            if self.metrics is not None:
                self.metrics.task_restarts.labels(name).inc()
            log.error("task_died", task=name, reason=why, restarts=self.restarts[name],
                      retry_in=backoff, exc_info=error)
            self._down[name] = (why, self.clock() + backoff)
            try:
                await self._pause(backoff)
            finally:
                self._down.pop(name, None)
            backoff = min(backoff * 2, self.longest)

    async def _pause(self, seconds: float) -> None:
        if self.stop is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
