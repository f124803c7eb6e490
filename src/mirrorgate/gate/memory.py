"""What the gate has learned and must not forget when an upstream falls silent: a small
key-value memory kept in a file under the data directory.

Two facts live here (`firstparty`, `withdrawals`), each learned from an upstream's answer and
needed exactly when that upstream stops answering, or after a restart. A replica or a sidecar
that shares the directory (one volume) sees what the others learned within a second.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

__all__ = ["REREAD_EVERY", "DurableMap"]

log = structlog.get_logger("mirrorgate.serve")

REREAD_EVERY = 1.0
"""Seconds between looks at the file for lines another process appended."""
_MAX_LINE = 400  # a package name is at most 214 characters, a version and a time far less


class DurableMap:
    """A bounded map of text keys to text values (the least recently set forgotten first),
    persisted at `path` (None: this process only) as an append-only file of `+key<TAB>value`
    (`+key` for an empty value) and `-key` lines, compacted when it grows.

    Writes are one short append per change, rare next to reads, so they are made in place on
    the event loop; a file that cannot be written leaves the memory in-process (logged once as
    `<what>_unwritable`), never a failed request. Lines other processes append to the same file
    are read at most every `REREAD_EVERY` seconds; a compaction by one of them (the file
    replaced) is read whole. Two processes compacting at the same moment may each drop a line
    the other appended meanwhile: a remembered fact is then learned again from the upstream.
    """

    def __init__(self, path: Path | None, *, what: str, limit: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.what = what
        self.limit = limit
        self.clock = clock
        self._items: OrderedDict[str, str] = OrderedDict()
        self._lines = 0
        self._broken = False
        self._read_at = 0.0
        self._seen: tuple[int, int] = (0, 0)  # (inode, bytes read) of the file
        if path is not None:
            self._reread(force=True)
            if self._lines > 2 * len(self._items) + 1000:
                self._compact()

    @property
    def persistent(self) -> bool:
        """Whether what is learned outlives this process (a file that takes writes)."""
        return self.path is not None and not self._broken

    def get(self, key: str) -> str | None:
        self._reread()
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        self._reread()
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        self._reread()
        return iter(list(self._items))

    def set(self, key: str, value: str = "") -> None:
        """Remember `value` under `key`; written only when it changes."""
        self._reread()
        if self._items.get(key) == value:
            self._items.move_to_end(key)
            return
        self._put(key, value)
        self._append(f"+{key}\t{value}" if value else f"+{key}")

    def delete(self, key: str) -> None:
        self._reread()
        if self._items.pop(key, None) is not None:
            self._append(f"-{key}")

    def _put(self, key: str, value: str) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def _reread(self, *, force: bool = False) -> None:
        if self.path is None or self._broken or (
                not force and self.clock() - self._read_at < REREAD_EVERY):
            return
        self._read_at = self.clock()
        try:
            with self.path.open("rb") as file:
                stat = os.fstat(file.fileno())
                inode = stat.st_ino
                # the same file, grown: read on from where this process stopped; replaced
                # (compacted) or cut short: read whole
                same = inode == self._seen[0] and stat.st_size >= self._seen[1]
                start = self._seen[1] if same else 0
                if start == 0:
                    self._items.clear()
                    self._lines = 0
                file.seek(start)
                data = file.read()
        except FileNotFoundError:
            return
        except OSError as error:
            if force:
                log.warning(f"{self.what}_unreadable", path=str(self.path),
                            detail=f"{type(error).__name__}; starting with none remembered")
            return
        complete = data.rfind(b"\n") + 1  # a line still being appended is read next time
        self._seen = (inode, start + complete)
        for raw in data[:complete].splitlines():
            self._apply(raw)

    def _apply(self, raw: bytes) -> None:
        self._lines += 1
        if len(raw) > _MAX_LINE or len(raw) < 2:
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        key, _, value = line[1:].partition("\t")
        if not key:
            return
        if line[0] == "+":
            self._put(key, value)
        elif line[0] == "-":
            self._items.pop(key, None)

    def _compact(self) -> None:
        assert self.path is not None
        partial = self.path.with_name(self.path.name + ".tmp")
        try:
            partial.write_text("".join(f"+{k}\t{v}\n" if v else f"+{k}\n"
                                       for k, v in self._items.items()), encoding="utf-8")
            os.replace(partial, self.path)
            self._lines = len(self._items)
            self._seen = (os.stat(self.path).st_ino, os.stat(self.path).st_size)
        except OSError as error:
            self._failed(error)

    def _append(self, line: str) -> None:
        if self.path is None or self._broken:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = (line + "\n").encode("utf-8")
            # one write of one line in append mode: lines from several processes interleave
            # whole, never torn
            with self.path.open("ab") as file:
                file.write(data)
                inode, size = os.fstat(file.fileno()).st_ino, file.tell()
            if inode == self._seen[0] and size == self._seen[1] + len(data):
                self._seen = (inode, size)  # nobody else wrote meanwhile: nothing to re-read
            self._lines += 1
        except OSError as error:
            self._failed(error)
            return
        if self._lines > 2 * len(self._items) + 1000:
            self._compact()

    def _failed(self, error: OSError) -> None:
        self._broken = True
        log.warning(f"{self.what}_unwritable", path=str(self.path),
                    detail=error.strerror or type(error).__name__,
                    consequence=f"{self.what.replace('_', ' ')} are remembered by this "
                                "process only")
