"""The tarballs the serve path verified, handed to the worker of the same process.

In `mirrorgate serve` with its worker, the worker takes the bytes the relay just downloaded and
verified instead of downloading them a second time, with the digest the relay matched them
against: a claim only this object carries (never a queue message or a file's name), which the
worker weighs against its own re-gated job and checks the bytes read back with the sha1 it
computes for the publish anyway. They wait on disk, in unnamed files, bounded by bytes and age.
docs/serving.md ("One download per version") and docs/untrusted-queue.md tell the story.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from mirrorgate.integrity import Digest, same_digest

__all__ = ["HANDOFF_DIR", "MAX_AGE", "MAX_SEGMENTS", "SEGMENT_BYTES", "Handed", "Handoff"]

log = structlog.get_logger("mirrorgate")

HANDOFF_DIR = "handoff"
"""The files' directory, under MIRRORGATE_DATA_DIR."""
MAX_AGE = 600.0
"""Seconds an offered tarball waits for its job, at most."""
SEGMENT_BYTES = 64 * 1024 * 1024
"""Bytes appended to one file before the next is begun."""
MAX_SEGMENTS = 64
"""Files at once, at most (each a descriptor; a file lives while one tarball in it waits)."""


class _Segment:
    __slots__ = ("fd", "live", "size")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = 0
        self.live = 0  # tarballs in it still waiting


@dataclass(frozen=True, slots=True)
class _Held:
    segment: _Segment
    offset: int
    length: int
    digest: Digest
    """What the relay matched the bytes against."""
    at: float
    license_read: bool = False


@dataclass(frozen=True, slots=True)
class Handed:
    """Bytes the relay of this process verified, read back, and the digest they matched there
    (`matched`: the relay's hash of the very chunks it relayed and wrote, not a re-hash)."""

    body: bytes
    matched: Digest
    license_read: bool = False
    """The relay's license rule read these bytes' own package.json and found the license
    their manifest declares: the worker need not read them again for it."""


class Handoff:
    """Verified tarballs by their public URL, waiting for the worker's job.

    On disk, not in memory: during a cold install the worker runs up to a minute behind the
    clients, and what waits for it is the install's whole tarball volume. Bounded by bytes
    and by age: a job the queue lost costs a download later, never the disk."""

    def __init__(self, directory: Path, max_bytes: int, *, max_age: float = MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # oldest first
        self._bytes = 0
        self._segments: list[_Segment] = []
        self._broken = False

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def files(self) -> int:
        return len(self._segments)

    def __len__(self) -> int:
        return len(self._held)

    def room_for(self, size: int) -> bool:
        """Whether an offer of `size` bytes would be kept (asked before the bytes are read)."""
        self._expire()
        return not self._broken and self._bytes + size <= self.max_bytes

    def offer(self, url: str, body: bytes, digest: Digest) -> bool:
        """Keep `body`, which matched `digest`, for the job of `url`; False when it does not
        fit, or cannot be written (the worker downloads it)."""
        place = self.reserve(url, len(body), digest)
        if place is None:
            return False
        return self.commit(url, place, self.write(place, lambda: [body]))

    def reserve(self, url: str, size: int, digest: Digest, *,
                license_read: bool = False) -> _Held | None:
        """Room for `size` bytes of `url`'s tarball, or None; the caller `write`s them (in a
        thread, for a large one: nothing else here is touched there) and then `commit`s.
        `license_read`: what `Handed.license_read` says."""
        self.discard(url)
        # full, the newest offer is refused (the memory queue's own policy): the worker takes
        # jobs oldest first, so the oldest bytes are the ones it needs next
        if not self.room_for(size):
            return None
        segment = self._current(size)
        if segment is None:
            return None
        place = _Held(segment, segment.size, size, digest, self.clock(), license_read)
        segment.size += size
        segment.live += 1  # the file stays open while the bytes are written
        self._bytes += size
        return place

    @staticmethod
    def write(place: _Held, body: Callable[[], list[bytes] | None]) -> OSError | bool:
        """Write the parts `body` returns, in order, into `place`: True, False (no bytes, or
        not the size reserved), or the error. Safe in a thread."""
        try:
            parts = body()
            if parts is None or sum(len(part) for part in parts) != place.length:
                return False
            _write_all(place.segment.fd, parts, place.offset)
        except OSError as error:
            return error
        return True

    def commit(self, url: str, place: _Held, written: OSError | bool) -> bool:
        """What `write` said of `place`: kept for the job of `url` when written."""
        if written is True and place.segment in self._segments:
            self._held[url] = place
            return True
        if isinstance(written, OSError):
            self._unusable(written)
        if place.segment in self._segments:
            self._release(place)
        return False

    def discard(self, url: str) -> None:
        """The job of `url` will not come (the queue did not take it): its bytes go."""
        held = self._held.pop(url, None)
        if held is not None:
            self._release(held)

    def take(self, url: str, digests: tuple[Digest, ...]) -> Handed | None:
        """The bytes offered for `url` and the digest they matched, when it is one of
        `digests` (the job's, re-gated): gone from here either way. None: download them."""
        self._expire()
        held = self._held.pop(url, None)
        if held is None:
            return None
        try:
            # bytes admitted under another digest (public's metadata changed since the pull)
            # are not this job's: the worker downloads what public describes now
            if not any(same_digest(held.digest, digest) for digest in digests):
                return None
            body = os.pread(held.segment.fd, held.length, held.offset)
        except OSError as error:
            self._unusable(error)
            return None
        finally:
            self._release(held)
        # a short read is a file changed under it; the worker's check would refuse it anyway
        return (Handed(body, held.digest, held.license_read) if len(body) == held.length
                else None)

    def close(self) -> None:
        self._held.clear()
        for segment in self._segments:
            with contextlib.suppress(OSError):
                os.close(segment.fd)
        self._segments.clear()
        self._bytes = 0

    def _current(self, size: int) -> _Segment | None:
        if self._segments and self._segments[-1].live == 0 and size <= SEGMENT_BYTES:
            # every tarball in the newest file was taken (a worker keeping up): written again
            # from its start, over pages the page cache holds already; a fresh page costs the
            # kernel more than the copy into it
            self._segments[-1].size = 0
            return self._segments[-1]
        if self._segments and self._segments[-1].size + size <= SEGMENT_BYTES:
            return self._segments[-1]
        if self._segments and self._segments[-1].size == 0:
            return self._segments[-1]  # a tarball larger than a segment has one to itself
        if self._segments and self._segments[-1].live == 0:
            self._close(self._segments[-1])  # full, and nothing in it waits
        if len(self._segments) >= MAX_SEGMENTS:
            return None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # unnamed (O_TMPFILE where the filesystem has it): nothing to clean up after a
            # crash, and no name another process could open
            with tempfile.TemporaryFile(dir=self.directory, prefix="handoff-") as handle:
                fd = os.dup(handle.fileno())
        except OSError as error:
            self._unusable(error)
            return None
        self._segments.append(_Segment(fd))
        return self._segments[-1]

    def _release(self, held: _Held) -> None:
        self._bytes -= held.length
        segment = held.segment
        segment.live -= 1
        if segment.live == 0 and (segment is not self._segments[-1]
                                  or segment.size >= SEGMENT_BYTES):
            self._close(segment)

    def _close(self, segment: _Segment) -> None:
        # every tarball in it is gone: the file goes, and its space with it (the newest one
        # stays open while it has room: a worker keeping up opens no file per tarball)
        self._segments.remove(segment)
        with contextlib.suppress(OSError):
            os.close(segment.fd)

    def _expire(self) -> None:
        now = self.clock()
        while self._held:
            url, oldest = next(iter(self._held.items()))
            if now - oldest.at < self.max_age:
                return
            del self._held[url]
            self._release(oldest)

    def _unusable(self, error: OSError) -> None:
        if not self._broken:
            log.warning("handoff_unwritable", path=str(self.directory),
                        detail=error.strerror or type(error).__name__,
                        consequence="the worker downloads every tarball it mirrors")
        self._broken = True


_IOV_MAX = 1024  # Linux's bound on the parts of one pwritev


def _write_all(fd: int, parts: list[bytes], offset: int) -> None:
    # the spool's chunks as they are, in one call (no join: a fresh copy of the whole tarball
    # costs more than writing it, its pages being new)
    pending = [memoryview(part) for part in parts if part]
    while pending:
        written = os.pwritev(fd, pending[:_IOV_MAX], offset)
        offset += written
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            del pending[0]
        if written:
            pending[0] = pending[0][written:]
