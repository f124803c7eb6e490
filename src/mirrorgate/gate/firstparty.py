"""The names mirrorgate has learned are first-party, remembered across outages and restarts.

While the private upstream fails, its answer cannot say whether a name is the organisation's;
this memory can, so a first-party name is served from the stale cache or refused (503), never
from public alone.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import structlog

__all__ = ["FILENAME", "MAX_NAMES", "FirstPartyNames"]

log = structlog.get_logger("mirrorgate.serve")

FILENAME = "first-party-names"
MAX_NAMES = 100_000
"""Names remembered; an organisation publishing more has a [private].names scope to say so."""
_MAX_LINE = 300  # a package name is at most 214 characters


class FirstPartyNames:
    """A bounded set of package names (least recently filled forgotten first), persisted at
    `path` (None: this process only) as an append-only file of `+name` and `-name` lines,
    compacted when it grows.

    Writes are one short append per change of status, rare next to fills, so they are made
    in place on the event loop; a file that cannot be written leaves the memory in-process
    (logged once), never a failed request.
    """

    def __init__(self, path: Path | None, *, limit: int = MAX_NAMES) -> None:
        self.path = path
        self.limit = limit
        self._names: OrderedDict[str, None] = OrderedDict()
        self._lines = 0
        self._broken = False
        if path is not None:
            self._load(path)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def remember(self, name: str) -> None:
        if name in self._names:
            self._names.move_to_end(name)
            return
        self._names[name] = None
        while len(self._names) > self.limit:
            self._names.popitem(last=False)
        self._append(f"+{name}")

    def forget(self, name: str) -> None:
        if self._names.pop(name, False) is not False:
            self._append(f"-{name}")

    def _load(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as error:
            log.warning("first_party_names_unreadable", path=str(path),
                        detail=f"{type(error).__name__}; starting with none remembered")
            return
        for line in text.splitlines():
            name = line[1:]
            if not name or len(line) > _MAX_LINE:
                continue
            if line[0] == "+":
                self._names[name] = None
                self._names.move_to_end(name)
            elif line[0] == "-":
                self._names.pop(name, None)
            self._lines += 1
        while len(self._names) > self.limit:
            self._names.popitem(last=False)
        if self._lines > 2 * len(self._names) + 1000:
            self._compact(path)

    def _compact(self, path: Path) -> None:
        partial = path.with_name(path.name + ".tmp")
        try:
            partial.write_text("".join(f"+{name}\n" for name in self._names), encoding="utf-8")
            os.replace(partial, path)
            self._lines = len(self._names)
        except OSError as error:
            self._failed(error)

    def _append(self, line: str) -> None:
        if self.path is None or self._broken:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line + "\n")
            self._lines += 1
        except OSError as error:
            self._failed(error)
            return
        if self._lines > 2 * len(self._names) + 1000:
            self._compact(self.path)

    def _failed(self, error: OSError) -> None:
        self._broken = True
        log.warning("first_party_names_unwritable", path=str(self.path),
                    detail=error.strerror or type(error).__name__,
                    consequence="first-party names are remembered by this process only")
