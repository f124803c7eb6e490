"""Hashing a relayed public tarball beside the relay: off the event loop, in order, bounded.

sha512 on the event loop costs a CPU-bound relay about a quarter of its throughput, so
`RelayHasher` hands the hash to a thread in batches, where it runs on another core (hashlib
releases the GIL while it hashes); bench/tarball_relay.py and docs/untrusted-queue.md measure it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

from mirrorgate.integrity import StreamVerifier, Verified

__all__ = ["BATCH", "BEHIND_AT_MOST", "OFF_LOOP_ABOVE", "RelayHasher"]

BATCH = 512 * 1024
"""Bytes handed to the hashing thread at once. A hand-over costs the loop about 65 us (the
executor's queue, the wake-up back): per 64 KiB chunk that would be half what hashing it on the
loop costs, per 512 KiB it is a twentieth."""
OFF_LOOP_ABOVE = 64 * 1024
"""What is left to hash when the download ends is hashed on the loop up to this many bytes
(a hand-over would cost more), so a small tarball, most of them, never leaves the loop."""
BEHIND_AT_MOST = 2 * BATCH
"""Bytes relayed but not yet hashed, at most, per download (a batch hashing, the next one
filling): past this the relay waits for the hash, so a starved hashing thread never makes the
proxy hold a whole tarball in memory."""


def _spare_cpu() -> bool:
    """Whether a hashing thread could run beside the event loop: with one CPU to run on, it
    would only take turns with the loop and add the hand-over (bench/tarball_relay.py)."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):  # no affinity on this platform
        return (os.cpu_count() or 1) > 1


def _update_all(verifier: StreamVerifier, chunks: Sequence[bytes]) -> None:
    # one update per batch: the thread takes the GIL back once, not once per chunk (the join
    # copies at memory speed, a tenth of what hashing the same bytes costs)
    verifier.update(chunks[0] if len(chunks) == 1 else b"".join(chunks))


class RelayHasher:
    """Feed it a download's chunks in order; `finish()` waits for the hash and says whether
    the bytes are the admitted ones (`StreamVerifier.finish`).

    Chunks are hashed in batches of `BATCH` bytes on a thread, one batch at a time, so they
    reach the hash in the order they arrived. Only `finish()` knows the digest: a caller holds
    the last chunk back until it returns. `close()` drops what is not hashed yet (a relay that
    stopped early). With one CPU (`_spare_cpu`) every chunk is hashed on the loop as it comes.
    """

    __slots__ = ("_error", "_flight", "_flying", "_offload", "_pending", "_pending_bytes",
                 "verifier")

    def __init__(self, verifier: StreamVerifier) -> None:
        self.verifier = verifier
        self._offload = _spare_cpu()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flight: asyncio.Future[None] | None = None
        self._flying = 0
        self._error: BaseException | None = None

    async def feed(self, chunk: bytes) -> None:
        """Hash `chunk` after every chunk fed before it; waits only when the hash has fallen
        `BEHIND_AT_MOST` bytes behind. Raises what `StreamVerifier.update` raised."""
        self._raise()
        if not self._offload:
            self.verifier.update(chunk)
            return
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._flight is None and self._pending_bytes >= BATCH:
            self._launch()
        while self.behind > BEHIND_AT_MOST and self._flight is not None:
            await self._settle()
        self._raise()

    async def finish(self) -> Verified:
        """Wait for every chunk fed to be hashed, then check the digest (and the size)."""
        while self._flight is not None:
            await self._settle()
        self._raise()
        if self._pending_bytes > OFF_LOOP_ABOVE:
            self._launch()
            await self._settle()
            self._raise()
        elif self._pending:
            _update_all(self.verifier, self._take())
        return self.verifier.finish()

    @property
    def behind(self) -> int:
        """Bytes fed but not hashed yet (at most `BEHIND_AT_MOST` and one chunk)."""
        return self._pending_bytes + self._flying

    def close(self) -> None:
        self._take()

    def _take(self) -> list[bytes]:
        batch, self._pending, self._pending_bytes = self._pending, [], 0
        return batch

    def _launch(self) -> None:
        self._flying = self._pending_bytes
        flight = asyncio.get_running_loop().run_in_executor(None, _update_all, self.verifier,
                                                            self._take())
        flight.add_done_callback(self._landed)
        self._flight = flight

    async def _settle(self) -> None:
        """Wait for the batch in flight, then land it here: its done callback may not have
        run yet (awaiting a finished future does not yield to the loop)."""
        flight = self._flight
        assert flight is not None
        with contextlib.suppress(Exception):  # kept in the future, raised by `_raise`
            await asyncio.shield(flight)
        self._landed(flight)

    def _landed(self, flight: asyncio.Future[None]) -> None:
        if flight is not self._flight:
            return  # landed already (`_settle` and the done callback both come here)
        self._flight = None
        self._flying = 0
        if flight.cancelled():
            return
        error = flight.exception()
        if error is not None:
            self._error = error
            self.close()
        elif self._pending_bytes >= BATCH:
            self._launch()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
