"""An upstream that takes no connection is not asked until a connection to it is made again.

A registry behind a firewall that drops packets fails each call only when its connect timeout
runs out (`upstream.client.CONNECT_WITHIN`, 10 s). Every fill of a cold or offline install asks
public beside private, so without this each name of the install would wait that long: the
offline replay of a mirror would be slower than the internet.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

__all__ = ["DOWN_AFTER", "RETRY_EVERY", "WAITED", "Outage"]

log = structlog.get_logger("mirrorgate.serve")

DOWN_AFTER = 3
"""Calls in a row that waited for a connection and got none before the upstream is held down.
One is an accident; three in a row across a cold install's fills is the upstream."""
WAITED = 1.0
"""Seconds a failed call must have waited to count (half the timeout, when that is shorter). A
connection refused at once made nobody wait: its calls go on being made, each failing as fast
as it would have been answered, and a registry that comes back is asked at once."""
RETRY_EVERY = 1.0
"""Seconds between the connections tried while down (each waits up to the connect timeout).
No client's call is the one that tries: its request would be held that long, one of the
client's few sockets, every time."""

Connect = Callable[[], Awaitable[None]]
"""Open a connection to the upstream and close it; raises when none is made."""


class Outage:
    """Whether one upstream takes connections, from its calls' outcomes. While it is down
    every call is answered at once
    by the caller, as the failure the last ones met, and a task of its own tries a connection
    every `RETRY_EVERY` seconds (`connect`); the first made brings the upstream back, as does
    any call answered meanwhile. A registry that answers errors is up: its errors are the
    calls' own."""

    def __init__(self, label: str, connect: Connect, *, waited: float = WAITED,
                 retry_every: float = RETRY_EVERY) -> None:
        self.label = label
        self.waited = waited
        """Seconds a failed call must have waited to count (`WAITED`)."""
        self._connect = connect
        self._retry_every = retry_every
        self.failures = 0
        """Calls in a row that waited for a connection and got none."""
        self.last_failure = ""
        """What the last of them met (`UpstreamError.detail`), for the answer given to a call
        not made."""
        self.last_kind = "unreachable"
        self.skipped = 0
        """Calls answered without asking since the upstream went down."""
        self.connections_failed = 0
        """Connections tried while down that were not made."""
        self._down_since: float | None = None
        self._trying: asyncio.Task[None] | None = None

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def allows(self) -> bool:
        """Whether a call may be made now; False (counted skipped) while the upstream is down,
        and the caller answers it at once with `refusal()`."""
        if self._down_since is None:
            return True
        self.skipped += 1
        if self._trying is None or self._trying.done():
            self._try()  # a task that ended (its loop closed) leaves none trying: start one
        return False

    def answered(self) -> None:
        """A call got a status line (whatever it was): the upstream takes connections."""
        if not self.failures:
            return  # up, as it was (down is three failures or more): every answer passes here
        if self._down_since is not None:
            log.info("upstream_back", upstream=self.label,
                     down_seconds=round(time.monotonic() - self._down_since, 1),
                     skipped=self.skipped)
            trying, self._trying = self._trying, None
            if trying is not None and trying is not asyncio.current_task():
                trying.cancel()
        self.failures, self.skipped, self.connections_failed = 0, 0, 0
        self._down_since = None

    def failed(self, kind: str, detail: str, waited: float) -> None:
        """A call got no connection after `waited` seconds (the client says which failures
        are that: `Upstream._unanswered`)."""
        if waited < self.waited:
            return  # failed at once: the upstream's own answer, however curt (`WAITED`)
        self.failures += 1
        self.last_kind, self.last_failure = kind, detail
        if self._down_since is not None or self.failures < DOWN_AFTER:
            return
        self._down_since = time.monotonic()
        log.warning("upstream_down", upstream=self.label, failures=self.failures, kind=kind,
                    detail=detail, hint=f"calls are answered at once as {kind} until a "
                    f"connection is made, tried every {self._retry_every:g} s")
        self._try()

    def _try(self) -> None:
        self._trying = asyncio.get_running_loop().create_task(self._try_connections())

    async def _try_connections(self) -> None:
        while self._down_since is not None:
            await asyncio.sleep(self._retry_every)
            try:
                await self._connect()
            except Exception:  # not yet (refused, timed out, unresolved): tried again
                self.connections_failed += 1
            else:
                self.answered()

    async def close(self) -> None:
        """Stop trying connections (the client is closing)."""
        trying, self._trying = self._trying, None
        if trying is not None:
            trying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await trying

    def refusal(self) -> str:
        """Why a call was not made, for its error."""
        return (f"down: {self.failures} calls in a row got no connection (the last: "
                f"{self.last_failure}); not asked until a connection is made, tried every "
                f"{self._retry_every:g} s")
