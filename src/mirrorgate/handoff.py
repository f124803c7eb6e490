"""The tarballs the serve path verified, handed to the worker of the same process.

In `mirrorgate serve` with its worker, the worker takes the bytes the relay just downloaded and
verified instead of downloading them a second time, with the digest the relay matched them
against: a claim only this object carries (never a queue message or a file's name), which the
worker weighs against its own re-gated job and checks the bytes read back with the sha1 it
computes for the publish anyway. They wait on disk, an unnamed file a tarball, bounded by bytes,
files and age; a file store beside them links the checked file in as the stored tarball.
docs/serving.md ("One download per version") and docs/untrusted-queue.md tell the story.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from mirrorgate.integrity import Digest, same_digest

__all__ = ["HANDOFF_DIR", "MAX_AGE", "MAX_FILES", "MIN_FILES", "Handed", "Handoff", "files_for"]

log = structlog.get_logger("mirrorgate")

HANDOFF_DIR = "handoff"
"""The files' directory, under MIRRORGATE_DATA_DIR."""
MAX_AGE = 600.0
"""Seconds an offered tarball waits for its job, at most."""
MAX_FILES = 8192
"""Tarballs waiting at once, at most: each is a file, and holds a descriptor (`files_for`)."""
MIN_FILES = 512
"""Tarballs waiting at once, at least, whatever the limit on descriptors (the bound before it
was sized from the limit). A cold install of the scale tree (1,917 versions) had the worker up
to a thousand jobs behind: with 512 at most, 994 offers were refused and the worker
downloaded those tarballs again (1.58x public's tarball bytes, against 1.00x)."""


def files_for(open_files: int) -> int:
    """Tarballs the handoff holds at most under a limit of `open_files` descriptors: a quarter
    of it (the rest for clients' sockets, upstream pools, spool files and the store), between
    `MIN_FILES` and `MAX_FILES`."""
    return max(MIN_FILES, min(MAX_FILES, open_files // 4))


@dataclass(frozen=True, slots=True)
class _Held:
    fd: int
    length: int
    digest: Digest
    """What the relay matched the bytes against."""
    at: float
    license_read: bool = False


@dataclass(slots=True)
class Handed:
    """Bytes the relay of this process verified, read back, and the digest they matched there
    (`matched`: the relay's hash of the very chunks it relayed and wrote, not a re-hash).
    `unnamed`: the descriptor of the unnamed file they were read from, which a file store on
    its filesystem links in as the stored tarball once they are checked (`close` when done;
    None once closed, or when the file cannot be linked)."""

    body: bytes
    matched: Digest
    unnamed: int | None = field(default=None)
    license_read: bool = False
    """The relay's license rule read these bytes' own package.json and found the license
    their manifest declares: the worker need not read them again for it."""

    def close(self) -> None:
        if self.unnamed is not None:
            with contextlib.suppress(OSError):
                os.close(self.unnamed)
            self.unnamed = None


class Handoff:
    """Verified tarballs by their public URL, waiting for the worker's job.

    On disk, not in memory: during a cold install the worker runs up to a minute behind the
    clients, and what waits for it is the install's whole tarball volume. Bounded by bytes,
    by files (`max_files`: `files_for` the process's limit on descriptors) and by age: a job the
    queue lost costs a download later, never the disk."""

    def __init__(self, directory: Path, max_bytes: int, *, max_age: float = MAX_AGE,
                 max_files: int = MIN_FILES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_age = max_age
        self.clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # oldest first
        self._bytes = 0
        self._files = 0  # the held ones and the ones being written
        self._broken = False

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def files(self) -> int:
        return self._files

    def __len__(self) -> int:
        return len(self._held)

    def room_for(self, size: int) -> bool:
        """Whether an offer of `size` bytes would be kept (asked before the bytes are read)."""
        self._expire()
        return (not self._broken and self._bytes + size <= self.max_bytes
                and self._files < self.max_files)

    def offer(self, url: str, body: bytes, digest: Digest) -> bool:
        """Keep `body`, which matched `digest`, for the job of `url`; False when it does not
        fit, or cannot be written (the worker downloads it)."""
        place = self.reserve(url, len(body), digest)
        if place is None:
            return False
        return self.commit(url, place, self.write(place, lambda: [body]))

    def reserve(self, url: str, size: int, digest: Digest, *,
                license_read: bool = False) -> _Held | None:
        """A file for `size` bytes of `url`'s tarball, or None; the caller `write`s them (in a
        thread, for a large one: nothing else here is touched there) and then `commit`s.
        `license_read`: what `Handed.license_read` says."""
        self.discard(url)
        # full, the newest offer is refused (the memory queue's own policy): the worker takes
        # jobs oldest first, so the oldest bytes are the ones it needs next
        if not self.room_for(size):
            return None
        try:
            fd = _unnamed(self.directory)
        except OSError as error:
            self._unusable(error)
            return None
        self._files += 1
        self._bytes += size
        return _Held(fd, size, digest, self.clock(), license_read)

    @staticmethod
    def write(place: _Held, body: Callable[[], list[bytes] | None]) -> OSError | bool:
        """Write the parts `body` returns, in order, into `place`: True, False (no bytes, or
        not the size reserved), or the error. Safe in a thread."""
        try:
            parts = body()
            if parts is None or sum(len(part) for part in parts) != place.length:
                return False
            _write_all(place.fd, parts, 0)
        except OSError as error:
            return error
        return True

    def commit(self, url: str, place: _Held, written: OSError | bool) -> bool:
        """What `write` said of `place`: kept for the job of `url` when written."""
        if written is True and not self._broken:
            self._held[url] = place
            return True
        if isinstance(written, OSError):
            self._unusable(written)
        self._release(place)
        return False

    def discard(self, url: str) -> None:
        """The job of `url` will not come (the queue did not take it): its bytes go."""
        held = self._held.pop(url, None)
        if held is not None:
            self._release(held)

    def take(self, url: str, digests: tuple[Digest, ...]) -> Handed | None:
        """The bytes offered for `url` and the digest they matched, when it is one of
        `digests` (the job's, re-gated): gone from here either way, their file with the
        `Handed` (the taker closes it). None: download them."""
        self._expire()
        held = self._held.pop(url, None)
        if held is None:
            return None
        self._bytes -= held.length
        self._files -= 1
        handed = Handed(b"", held.digest, held.fd, held.license_read)
        try:
            # bytes admitted under another digest (public's metadata changed since the pull)
            # are not this job's: the worker downloads what public describes now
            if not any(same_digest(held.digest, digest) for digest in digests):
                handed.close()
                return None
            handed.body = os.pread(held.fd, held.length, 0)
        except OSError as error:
            handed.close()
            self._unusable(error)
            return None
        # a short read is a file changed under it; the worker's check would refuse it anyway
        if len(handed.body) != held.length:
            handed.close()
            return None
        return handed

    def close(self) -> None:
        for held in self._held.values():
            with contextlib.suppress(OSError):
                os.close(held.fd)
        self._held.clear()
        self._bytes = 0
        self._files = 0

    def _release(self, held: _Held) -> None:
        self._bytes -= held.length
        self._files -= 1
        with contextlib.suppress(OSError):
            os.close(held.fd)  # the file, and its space, go with its last descriptor

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


def _unnamed(directory: Path) -> int:
    """A new unnamed file in `directory`: O_TMPFILE without O_EXCL, so that once checked it
    can be linked in as the stored tarball (nothing to clean up after a crash, and no name
    another process could open meanwhile); a file named and unlinked at once where the
    filesystem has no O_TMPFILE (never linked: the store writes the bytes instead)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except (OSError, AttributeError):
        with tempfile.TemporaryFile(dir=directory, prefix="handoff-") as handle:
            return os.dup(handle.fileno())


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
