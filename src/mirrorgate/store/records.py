"""What the state store keeps, as the gate reads and writes it: facts about names and versions,
release verdicts, and the pull log; and the one interface both stores implement (`Store`).

Facts and verdicts carry a change number (`seq`) from one counter, so a process holding them in
memory asks only for what changed since the last number it saw (`Store.changes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from mirrorgate.errors import MirrorgateError

__all__ = [
    "FIRST_PARTY",
    "IDENTITY_COLUMNS",
    "INSTALLED",
    "KINDS",
    "PULL_COLUMNS",
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
    "identity_filters",
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
    """The rules generation the verdict was reached under."""
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
    client_name: str | None = None
    """The tokens file's name for the client (`client` adds a CI job's identity to it)."""
    repository: str | None = None
    ref: str | None = None
    workflow: str | None = None
    """A CI job's identity, where its ID token carries them (docs/ci-identity.md)."""
    sha1: str | None = None
    """The hex sha1 (`dist.shasum`) the version was admitted with, beside `integrity`."""
    license: str | None = None
    """The license its manifest declares, as npm reads it."""
    verdict: str | None = None
    """What the rules said as it was served: `admitted`, or with what they would have denied,
    the exceptions that let it through, `weak` (docs/licenses.md)."""

    def row(self) -> PullRow:
        return (self.client, self.name, self.version, self.integrity, self.source,
                self.at.timestamp(), self.request_id, self.client_name, self.repository,
                self.ref, self.workflow, self.sha1, self.license, self.verdict)


PullRow = tuple[str, str, str, str, str, float, str, str | None, str | None, str | None,
                str | None, str | None, str | None, str | None]
"""A pull as it is written: `Pull`'s fields in order, its time in seconds since the epoch (the
request path builds a tuple, not an object, per tarball: bench/pull_log.py)."""
PULL_COLUMNS = ("client", "name", "version", "integrity", "source", "at", "request_id",
                "client_name", "repository", "ref", "workflow", "sha1", "license", "verdict")
"""The pulls table's columns in `PullRow`'s order."""
IDENTITY_COLUMNS = ("client_name", "repository", "ref", "workflow")
"""The columns `Store.pulls(identity=...)` filters on."""


def identity_filters(identity: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """`Store.pulls`' `identity` as (column, value) pairs; a column that is not one of
    `IDENTITY_COLUMNS` raises ValueError, so no other name ever reaches the SQL."""
    pairs = list((identity or {}).items())
    for column, _value in pairs:
        if column not in IDENTITY_COLUMNS:
            raise ValueError(f"the pull log is not filtered by {column!r}")
    return pairs


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
                    limit: int = 10_000, until: datetime | None = None,
                    identity: Mapping[str, str] | None = None) -> list[Pull]:
        """The pulls matching every filter given, oldest first: `since` included, `until`
        not; `identity`, columns of `IDENTITY_COLUMNS` and the value each must have."""

    async def prune_pulls(self, before: datetime) -> int:
        """Drop the pulls older than `before` (the retention); returns how many went."""

    async def close(self) -> None: ...
