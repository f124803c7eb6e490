"""What the state store keeps, as the gate reads and writes it: facts about names and versions,
release verdicts, and the pull log; and the one interface both stores implement (`Store`).

Facts and verdicts carry a change number (`seq`) from one counter, so a process holding them in
memory asks only for what changed since the last number it saw (`Store.changes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from mirrorgate.errors import MirrorgateError

__all__ = [
    "FIRST_PARTY",
    "INSTALLED",
    "KINDS",
    "WITHDRAWN",
    "Changes",
    "Fact",
    "MigrationError",
    "Pull",
    "PullRow",
    "Store",
    "StoreInfo",
    "StoreSetupError",
    "StoreUnavailableError",
    "Verdict",
]

FIRST_PARTY = "first-party"
"""A name learned first-party (value: empty)."""
WITHDRAWN = "withdrawn"
"""`name@version` the public registry was seen to withdraw (value: when first seen, ISO 8601)."""
INSTALLED = "installed"
"""A name the organisation installs (value: its pull count, written at 1, 2, 4, 8...)."""
KINDS = (FIRST_PARTY, WITHDRAWN, INSTALLED)


class StoreUnavailableError(MirrorgateError):
    """The store did not answer (a server down, a file locked or unwritable); the message says
    which store and why, without the URL's password."""


class StoreSetupError(MirrorgateError):
    """The store cannot be used as configured (a missing driver, a migration that cannot run):
    start-up stops with this message."""


class MigrationError(StoreSetupError):
    """A schema migration that cannot run: start-up stops with this message, which names it."""


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact of a `kind`; `value` None is a fact forgotten (kept as a tombstone so every
    replica forgets it too)."""

    kind: str
    key: str
    value: str | None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The release signals' verdict on one version's bytes, kept as a record of the version."""

    name: str
    version: str
    integrity: str
    verdict: str
    evidence: str
    """JSON text: what the signals found, enough to judge again under other rules."""
    compared_with: str | None
    generation: str
    """The signals in force the bytes were read under (`gate.releasefacts.signals_text`); a
    verdict kept by an earlier release holds its rules generation number here instead."""
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Pull:
    """One tarball served or refused (the pull log, docs/state-store.md)."""

    client: str
    name: str
    version: str
    integrity: str
    source: str
    """Where the bytes came from ("mirror", "public"), or "refused:<rule>"."""
    at: datetime
    request_id: str

    def row(self) -> PullRow:
        return (self.client, self.name, self.version, self.integrity, self.source,
                self.at.timestamp(), self.request_id)


PullRow = tuple[str, str, str, str, str, float, str]
"""A pull as it is written: `Pull`'s fields in order, its time in seconds since the epoch (the
request path builds a tuple, not an object, per tarball: bench/pull_log.py)."""


@dataclass(frozen=True, slots=True)
class Changes:
    """Facts and verdicts written after a cursor, in the order they were written; `cursor` is
    the number to ask from next time."""

    facts: list[Fact]
    verdicts: list[Verdict]
    cursor: int


@dataclass(frozen=True, slots=True)
class StoreInfo:
    kind: str
    """"sqlite" or "postgresql"."""
    where: str
    """The file, or the URL with its password redacted."""
    schema: int


class Store(Protocol):
    """The state store: what the gate must not forget, shared by every process that opens it."""

    @property
    def info(self) -> StoreInfo: ...

    async def put_facts(self, facts: Sequence[Fact]) -> None:
        """Write `facts` (a value of None forgets one) in one transaction; durable on return."""

    async def put_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        """Write `verdicts`, each replacing the one with its (name, version, integrity)."""

    async def changes(self, after: int, limit: int = 10_000) -> Changes:
        """Facts and verdicts written after `after` (0: everything), at most `limit` of them."""

    async def claim(self, kind: str, key: str, value: str) -> bool:
        """Write the fact (`kind`, `key`) = `value` unless it exists: True for the one caller
        of a fleet that wrote it (a notification sent once, whichever replica saw the event)."""

    async def append_pulls(self, rows: Sequence[PullRow]) -> None:
        """Append `rows` to the pull log in one transaction."""

    async def pulls(self, *, name: str | None = None, version: str | None = None,
                    client: str | None = None, since: datetime | None = None,
                    limit: int = 10_000) -> list[Pull]:
        """The pulls matching every filter given, oldest first."""

    async def prune_pulls(self, before: datetime) -> int:
        """Drop the pulls older than `before` (the retention); returns how many went."""

    async def close(self) -> None: ...
