"""What a lockfile reader answers: the locked registry versions, the entries it skipped and
why, and the error a malformed file raises (with its file and line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorgate.errors import MirrorgateError

__all__ = ["LockedEntry", "Lockfile", "LockfileError", "SkippedEntry"]


class LockfileError(MirrorgateError):
    """A lockfile that cannot be read as its kind: `path`, `line` (1-based; 0 when the problem
    is the whole file) and what is wrong."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class LockedEntry:
    """One registry version a lockfile pins.

    `name` is the real package name (an `npm:` alias resolved; `alias` keeps the name it is
    installed under), `ranges` the ranges the lockfile records asking for it (empty when the
    format keeps none for it, as pnpm's for indirect dependencies), `line` and `key` where it
    is written, `integrity` the SRI string the lockfile holds (None for yarn berry, whose
    checksum is yarn's own) and `resolved` the tarball URL when the lockfile has one."""

    name: str
    version: str
    lockfile: Path
    line: int
    key: str
    ranges: tuple[str, ...] = ()
    alias: str | None = None
    integrity: str | None = None
    resolved: str | None = None

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def where(self) -> str:
        return f"{self.lockfile}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "lockfile": str(self.lockfile),
                "line": self.line, "key": self.key, "ranges": list(self.ranges),
                "alias": self.alias, "integrity": self.integrity, "resolved": self.resolved}


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """An entry no registry rule can judge (git, file, link, workspace, a tarball URL):
    `name`, the `source` it pins and `reason` in a few words."""

    name: str
    source: str
    reason: str
    lockfile: Path
    line: int
    key: str

    @property
    def where(self) -> str:
        return f"{self.lockfile}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "reason": self.reason,
                "lockfile": str(self.lockfile), "line": self.line, "key": self.key}


@dataclass(slots=True)
class Lockfile:
    """A lockfile read: its `path`, `kind` (`npm-v3`, `pnpm-v9`, `yarn-classic`...), the
    locked registry versions (one per name and version, first occurrence's place) and the
    skipped entries."""

    path: Path
    kind: str
    entries: list[LockedEntry] = field(default_factory=list)
    skipped: list[SkippedEntry] = field(default_factory=list)
