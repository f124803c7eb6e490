"""One upstream download per tarball, however many clients read it, and however slowly.

Fifty CI jobs starting on a new lockfile ask for each tarball fifty times at once; a client on
a slow link reads a 40 MB tarball for minutes. Relayed straight through, each request is its own
upstream download, holding an admission slot and an upstream connection for as long as its
client takes. A `Spool` is one download written down as it arrives: every request for the same
bytes reads from it, at its own pace, and the download (with its slot) ends when the upstream
body does. Bounded by `Spools.max_bytes`, in memory up to `MEMORY_BYTES`, the rest in unnamed
files; docs/serving.md ("One download per tarball") tells the story. This module holds the
storage and the waiting, nothing about HTTP or verdicts.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

import structlog

from mirrorgate.integrity import Verified

__all__ = ["LINGER", "MAX_FILES", "MAX_SPOOLS", "MEMORY_BYTES", "SMALL", "SPOOL_DIR", "Spool",
           "SpoolOutcome", "Spools"]

log = structlog.get_logger("mirrorgate.serve")

SPOOL_DIR = "spool"
"""The spool files' directory, under MIRRORGATE_DATA_DIR."""
SMALL = 4 * 1024 * 1024
"""A download of at most this many bytes is spooled in memory (nearly every tarball is)."""
MEMORY_BYTES = 64 * 1024 * 1024
"""Bytes of spools held in memory at once, at most; past it, small ones go to a file too."""
LINGER = 30.0
"""Seconds a finished, verified spool is kept after its last reader leaves, for the requests
of a fleet that arrive just after."""
MAX_SPOOLS = 4096
"""Spools at once, at most (a lingering one goes first to make room)."""
MAX_FILES = 256
"""Spools in files at once, at most: each holds a file descriptor."""
WINDOW = 256 * 1024
"""Bytes of a spool in a file also held in memory, its newest: what a reader keeping up with
the download reads (256 of them: 64 MiB at most)."""


class SpoolOutcome(enum.Enum):
    FILLING = "filling"
    COMPLETE = "complete"  # every byte read, and what the download checked them against held
    FAILED = "failed"  # the upstream broke off, or the bytes were refused: every reader is cut


class Spool:
    """The bytes of one download, as they arrive. The downloader `append`s, marks `safe` (the
    bytes a reader may send before the end: all but the last chunk, which waits for the
    verdict), and ends with `complete()` or `fail(outcome)`; readers `read` what is there and
    `await changed()` for more."""

    def __init__(self, key: Hashable, size: int, *, in_memory: bool,
                 directory: Path) -> None:
        self.key = key
        self.size = size
        """The declared size (Content-Length) reserved for it."""
        self.filled = 0
        self.safe = 0
        self.outcome = SpoolOutcome.FILLING
        self.failure = ""
        """For a failed spool: the reason readers are cut (`aborted`, `tampered`, `denied`)."""
        self.readers = 0
        self.left_at = 0.0
        self.verified: Verified | None = None
        """What the bytes matched, once complete (None: not verified, a private copy)."""
        self.withheld = False
        """Readers send nothing, not even the status line, until the download's verdict: a
        refusal is then a 403 with its reason instead of a cut (`relay.HOLD_AT_MOST`)."""
        self.refusal: tuple[str | None, str] | None = None
        """(rule, reason) a withheld download was refused for, when its reading said so (the
        rule None: the release signals, whose check remembers it)."""
        self.in_memory = in_memory
        # the chunks held in memory, as they arrived (a reader sends them without a copy),
        # and where each starts: all of them for an in-memory spool, the last `WINDOW` bytes
        # for one in a file (a reader that keeps up never reads the file back; older chunks
        # are written to it as they leave the window)
        self._chunks: list[bytes] = []
        self._starts: list[int] = []
        self._held = 0
        self._directory = directory
        self._file: int | None = None
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def done(self) -> bool:
        return self.outcome is not SpoolOutcome.FILLING

    @property
    def readable(self) -> int:
        """Bytes a reader may send now: all of a complete spool, the safe part of one still
        filling, none of a failed one (its readers are cut where they are)."""
        if self.outcome is SpoolOutcome.COMPLETE:
            return self.filled
        return self.safe if self.outcome is SpoolOutcome.FILLING else 0

    def append(self, chunk: bytes, *, hold_last: bool) -> None:
        """Add the next chunk. With `hold_last`, readers may send everything before it only:
        the verdict on the whole body comes before its last bytes leave. Raises OSError when
        the spool's file cannot be written."""
        if self._closed or not chunk:  # dropped at shutdown while the download ran
            return
        start = self.filled
        self._chunks.append(chunk)
        self._starts.append(start)
        self._held += len(chunk)
        if not self.in_memory:
            while self._held - len(self._chunks[0]) >= WINDOW:
                self._write(self._chunks[0], self._starts[0])
                self._held -= len(self._chunks[0])
                del self._chunks[0], self._starts[0]
        self.filled += len(chunk)
        self.safe = start if hold_last else self.filled
        self._wake()

    def complete(self) -> None:
        self.outcome = SpoolOutcome.COMPLETE
        self._wake()

    def fail(self, failure: str) -> None:
        self.outcome = SpoolOutcome.FAILED
        self.failure = failure
        self._wake()

    def read(self, offset: int, most: int) -> bytes:
        """Up to `most` readable bytes from `offset` (a chunk as it arrived, where the reader
        is at one's start and may have it all). Raises OSError when the file cannot be read."""
        end = min(self.readable, offset + most)
        if end <= offset or self._closed:
            return b""
        if self._starts and offset >= self._starts[0]:
            index = bisect.bisect_right(self._starts, offset) - 1
            chunk, start = self._chunks[index], self._starts[index]
            if offset == start and len(chunk) <= end - offset:
                return chunk
            return chunk[offset - start:end - start]
        assert self._file is not None
        # from the page cache, written a moment ago: a short read on the loop, like a socket's
        return os.pread(self._file, min(end, self._starts[0] if self._starts else end) - offset,
                        offset)

    def contents(self) -> list[bytes] | None:
        """The whole body of a complete spool, in order, as the chunks it holds (what the
        worker beside the proxy takes instead of downloading it again, `handoff`, which
        writes them as they are: no joined copy); None for one not complete, or closed.
        Raises OSError when the file cannot be read."""
        if self.outcome is not SpoolOutcome.COMPLETE or self._closed:
            return None
        if self.in_memory:
            return list(self._chunks)
        head = self._starts[0] if self._starts else self.filled
        assert self._file is not None or head == 0
        written = os.pread(self._file, head, 0) if self._file is not None and head else b""
        return [written, *self._chunks]

    def changed(self) -> asyncio.Future[None]:
        """Wait until more bytes are readable, or the spool is done. The wait begins when this
        is called, not when it is first awaited: a change in between is not missed."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def close(self) -> None:
        self._closed = True
        self._chunks, self._starts = [], []
        if self._file is not None:
            with contextlib.suppress(OSError):
                os.close(self._file)
            self._file = None
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _write(self, chunk: bytes, offset: int) -> None:
        if self._file is None:
            if not self._directory.is_dir():
                self._directory.mkdir(parents=True, exist_ok=True)
            # an unnamed file (O_TMPFILE where the filesystem has it): nothing to clean up
            # after a crash, and no name another process could open
            handle = tempfile.TemporaryFile(dir=self._directory, prefix="spool-")  # noqa: SIM115
            self._file = os.dup(handle.fileno())
            handle.close()
        view = memoryview(chunk)
        while view:
            written = os.pwrite(self._file, view, offset)
            view, offset = view[written:], offset + written


class Spools:
    """The spools of one process: at most one per key (a download in progress, or a finished
    one lingering), their bytes bounded by `max_bytes`, their number by `MAX_SPOOLS` (and
    `MAX_FILES` of them in files: each holds a file descriptor)."""

    def __init__(self, directory: Path, max_bytes: int, *,
                 memory_bytes: int = MEMORY_BYTES, linger: float = LINGER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.memory_bytes = memory_bytes
        self.linger = linger
        self.clock = clock
        self._spools: dict[Hashable, Spool] = {}
        # the spools no one reads and no download fills, oldest first: what lingers, and
        # what goes first when room is needed (each step is O(1), however many there are)
        self._idle: OrderedDict[Hashable, Spool] = OrderedDict()
        self._reserved = 0
        self._in_memory = 0
        self._files = 0
        self._broken = False

    @property
    def reserved(self) -> int:
        return self._reserved

    def __len__(self) -> int:
        return len(self._spools)

    def find(self, key: Hashable) -> Spool | None:
        """The spool of `key` a reader may join: filling, or complete (a failed one is
        dropped, so the next request downloads again)."""
        self._expire()
        spool = self._spools.get(key)
        if spool is None or spool.outcome is SpoolOutcome.FAILED:
            return None
        return spool

    def make(self, key: Hashable, size: int) -> Spool | None:
        """A new spool for `size` bytes, or None when the bounds cannot take it (after making
        room from lingering spools) or the spool directory is unusable: the caller streams."""
        if self._broken or size > self.max_bytes:
            return None
        self._expire()
        failed = self._spools.get(key)
        if failed is not None:  # a failed one its last readers still hold: theirs alone
            self._drop(failed)
        in_memory = size <= SMALL and self._in_memory + size <= self.memory_bytes
        while self._idle and (self._reserved + size > self.max_bytes
                              or len(self._spools) >= MAX_SPOOLS
                              or (not in_memory and self._files >= MAX_FILES)):
            self._drop(next(iter(self._idle.values())))
            in_memory = size <= SMALL and self._in_memory + size <= self.memory_bytes
        if (self._reserved + size > self.max_bytes or len(self._spools) >= MAX_SPOOLS
                or (not in_memory and self._files >= MAX_FILES)):
            return None
        spool = Spool(key, size, in_memory=in_memory, directory=self.directory)
        self._spools[key] = spool
        self._reserved += size
        if in_memory:
            self._in_memory += size
        else:
            self._files += 1
        return spool

    def join(self, spool: Spool) -> None:
        spool.readers += 1
        self._idle.pop(spool.key, None)

    def leave(self, spool: Spool) -> None:
        spool.readers -= 1
        self._settle(spool)

    def settled(self, spool: Spool) -> None:
        """The download has ended."""
        self._settle(spool)

    def unusable(self, error: OSError) -> None:
        """The spool directory cannot be written: from now on every tarball streams."""
        if not self._broken:
            log.warning("spool_unwritable", path=str(self.directory),
                        detail=error.strerror or type(error).__name__,
                        consequence="tarballs stream from the upstream per request")
        self._broken = True

    def close(self) -> None:
        for spool in list(self._spools.values()):
            self._forget(spool)
            spool.close()

    def _settle(self, spool: Spool) -> None:
        """A reader left or the download ended: an unread, finished spool lingers (a complete
        one) or goes (a failed one, or one already forgotten)."""
        if spool.readers > 0 or not spool.done:
            return
        if spool.outcome is SpoolOutcome.FAILED or self._spools.get(spool.key) is not spool:
            self._drop(spool)
            return
        spool.left_at = self.clock()
        self._idle[spool.key] = spool
        self._idle.move_to_end(spool.key)
        self._expire()

    def _expire(self) -> None:
        now = self.clock()
        while self._idle:
            oldest = next(iter(self._idle.values()))
            if now - oldest.left_at < self.linger:
                return
            self._drop(oldest)

    def _forget(self, spool: Spool) -> None:
        """Out of the registry, its bytes given back to the bounds (its readers, if any, read
        on until they leave)."""
        if self._idle.get(spool.key) is spool:
            del self._idle[spool.key]
        if self._spools.get(spool.key) is spool:
            del self._spools[spool.key]
            self._reserved -= spool.size
            if spool.in_memory:
                self._in_memory -= spool.size
            else:
                self._files -= 1

    def _drop(self, spool: Spool) -> None:
        self._forget(spool)
        if spool.readers == 0:
            spool.close()
