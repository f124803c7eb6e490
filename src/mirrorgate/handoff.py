"""The tarballs the serve path verified, handed to the worker of the same process.

In `mirrorgate serve` with its worker, every public tarball a client pulls is downloaded,
hashed against the admitted digest and spooled by the relay, and a moment later the worker
would download the same bytes again to mirror them: twice the egress per cold install. The
relay offers the verified bytes here as it enqueues the job, and the worker takes them instead
of downloading, still hashing them against its own job's digest before it publishes: the
handoff saves a download, never a check. A sidecar worker has no handoff and downloads as
before. docs/serving.md ("One download per version") tells the story.

Bounded by bytes (`max_bytes`) and by age (`MAX_AGE`): a job the queue lost, or a worker far
behind, costs a download later, never memory. When it is full, the newest offer is refused
(the queue's own policy): the worker takes jobs oldest first, so the oldest bytes are the ones
it needs next.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mirrorgate.integrity import Digest, same_digest

__all__ = ["MAX_AGE", "Handoff"]

MAX_AGE = 600.0
"""Seconds an offered tarball waits for its job, at most."""


@dataclass(frozen=True, slots=True)
class _Held:
    body: bytes
    digest: Digest
    """What the relay matched the bytes against."""
    at: float


class Handoff:
    """Verified tarballs by their public URL, waiting for the worker's job."""

    def __init__(self, max_bytes: int, *, max_age: float = MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # oldest first
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._held)

    def room_for(self, size: int) -> bool:
        """Whether an offer of `size` bytes would be kept (asked before the bytes are joined)."""
        self._expire()
        return self._bytes + size <= self.max_bytes

    def offer(self, url: str, body: bytes, digest: Digest) -> bool:
        """Keep `body`, which matched `digest`, for the job of `url`; False when it does not
        fit (the worker downloads it)."""
        self._expire()
        old = self._held.pop(url, None)
        if old is not None:
            self._bytes -= len(old.body)
        if self._bytes + len(body) > self.max_bytes:
            return False
        self._held[url] = _Held(body, digest, self.clock())
        self._bytes += len(body)
        return True

    def discard(self, url: str) -> None:
        """The job of `url` was not sent after all: its bytes go."""
        held = self._held.pop(url, None)
        if held is not None:
            self._bytes -= len(held.body)

    def take(self, url: str, digests: tuple[Digest, ...]) -> bytes | None:
        """The bytes offered for `url`, when they were matched against one of `digests` (the
        job's, re-gated): gone from here either way. None: download them."""
        self._expire()
        held = self._held.pop(url, None)
        if held is None:
            return None
        self._bytes -= len(held.body)
        # bytes admitted under another digest (public's metadata changed since the pull) are
        # not this job's: the worker downloads what public describes now
        if not any(same_digest(held.digest, digest) for digest in digests):
            return None
        return held.body

    def _expire(self) -> None:
        now = self.clock()
        while self._held:
            url, oldest = next(iter(self._held.items()))
            if now - oldest.at < self.max_age:
                return
            del self._held[url]
            self._bytes -= len(oldest.body)
