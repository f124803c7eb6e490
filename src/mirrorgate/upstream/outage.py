"""An upstream that takes no connection is asked one call a second until it answers again.

A registry behind a firewall that drops packets fails each call only when
MIRRORGATE_UPSTREAM_TIMEOUT (30 s) runs out. Every fill of a cold or offline install asks public
beside private, so without this each name of the install would wait out that timeout: the
offline replay of a mirror would be slower than the internet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

import structlog

__all__ = ["DOWN_AFTER", "RETRY_EVERY", "WAITED", "Call", "Outage"]

log = structlog.get_logger("mirrorgate.serve")

DOWN_AFTER = 3
"""Calls in a row that waited for a connection and got none before the upstream is held down.
One is an accident; three in a row across a cold install's fills is the upstream."""
WAITED = 1.0
"""Seconds a failed call must have waited to count (half the timeout, when that is shorter). A
connection refused at once made nobody wait: its calls go on being made, each failing as fast
as it would have been answered, and a registry that comes back is asked at once."""
RETRY_EVERY = 1.0
"""Seconds between the calls let through while down, one at a time: an upstream that comes back
is seen within a second (and the call under way, within the timeout), and a dead one holds one
call at a time for its timeout, not one a name."""


class Outage:
    """Whether one upstream takes connections, from its calls' outcomes (the client says which
    failures count: `Upstream._unanswered`). While it is down a call is let through (to find
    out whether it is back) when no other is under way and the last one let through started
    `RETRY_EVERY` ago; every other call is answered at once by the caller, as the failure the
    last ones met. Any answer at all (a status line, even a 500) brings it back: a registry
    that answers errors is up, and its errors are the calls' own."""

    def __init__(self, label: str, *, waited: float = WAITED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.waited = waited
        """Seconds a failed call must have waited to count (`WAITED`)."""
        self._clock = clock
        self.failures = 0
        """Calls in a row that waited for a connection and got none."""
        self.last_failure = ""
        """What the last of them met (`UpstreamError.kind`, then its detail), for the answer
        given to a call not let through."""
        self.last_kind = "unreachable"
        self.skipped = 0
        """Calls answered without asking since the upstream went down."""
        self._down_since: float | None = None
        self._tried_at = float("-inf")
        self._trying = False

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def call(self) -> Call | None:
        """A call let through now, or None (counted skipped): the caller answers it at once
        with `refusal()`. Used as a context manager around the call."""
        now = self._clock()
        if self._down_since is None:
            return Call(self, now, trying=False)
        if self._trying or now - self._tried_at < RETRY_EVERY:
            self.skipped += 1
            return None
        self._trying, self._tried_at = True, now
        return Call(self, now, trying=True)

    def now(self) -> float:
        return self._clock()

    def tried(self) -> None:
        """The call let through while down has ended: the next may go."""
        self._trying = False

    def answered(self) -> None:
        if self._down_since is not None:
            log.info("upstream_back", upstream=self.label,
                     down_seconds=round(self._clock() - self._down_since, 1),
                     skipped=self.skipped)
        self.failures, self.skipped, self._down_since = 0, 0, None

    def failed(self, kind: str, detail: str, waited: float) -> None:
        if waited < self.waited:
            return  # failed at once: the upstream's own answer, however curt (`WAITED`)
        self.failures += 1
        self.last_kind, self.last_failure = kind, detail
        if self._down_since is None and self.failures >= DOWN_AFTER:
            self._down_since = self._tried_at = self._clock()
            log.warning("upstream_down", upstream=self.label, failures=self.failures,
                        kind=kind, detail=detail,
                        hint=f"calls are answered at once as {kind}, one let through every "
                        f"{RETRY_EVERY:g} s until one is answered")

    def refusal(self) -> str:
        """Why a call was not let through, for its error."""
        return (f"down: {self.failures} calls in a row got no connection (the last: "
                f"{self.last_failure}); not asked, one call every {RETRY_EVERY:g} s is let "
                "through until one is answered")


class Call:
    """One call let through (`Outage.call`): `answered()` once a status line is in, `failed()`
    when none came. A call that ends otherwise (cancelled, refused before it was sent) says
    nothing of the upstream; the next may go once it has ended, whatever its end."""

    __slots__ = ("_outage", "_started", "_trying", "was_answered")

    def __init__(self, outage: Outage, started: float, *, trying: bool) -> None:
        self._outage = outage
        self._started = started
        self._trying = trying
        self.was_answered = False

    def __enter__(self) -> Call:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._trying:
            self._outage.tried()

    def answered(self) -> None:
        self.was_answered = True
        self._outage.answered()

    def failed(self, kind: str, detail: str) -> None:
        outage = self._outage
        outage.failed(kind, detail, outage.now() - self._started)
