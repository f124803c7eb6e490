"""A monotonic clock the test moves by hand, for the code that takes a `clock` parameter.

The packument cache's TTL, the proxy's cache and the worker's heartbeat all read monotonic
seconds from an injected callable, so a test crosses a deadline by `advance()` instead of
sleeping. It starts at 1,000 s, not 0, so "no time yet" is never confused with "at start".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ManualClock"]


@dataclass
class ManualClock:
    """Monotonic seconds that move only when a test says so."""

    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
