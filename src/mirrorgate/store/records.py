"""What the state store keeps, as the gate reads and writes it: facts about names and versions,
release verdicts, and the pull log (served pulls one a row, refusals folded per hour); and the
one interface both stores implement (`Store`).

Facts and verdicts carry a change number (`seq`) from one counter, so a process holding them in
memory asks only for what changed since the last number it saw (`Store.changes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from mirrorgate.errors import MirrorgateError

__all__ = [
    "FIRST_PARTY",
    "IDENTITY_COLUMNS",
    "INSTALLED",
    "KINDS",
    "PULL_COLUMNS",
    "WITHDRAWN",
    "Changes",
    "Exposure",
    "Fact",
    "MigrationError",
    "Pruned",
    "Pull",
    "PullRow",
    "RefusalRow",
    "Store",
    "StoreInfo",
    "StoreRefusedError",
    "StoreSetupError",
    "StoreUnavailableError",
    "Verdict",
    "identity_filters",
    "storable_row",
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


class StoreRefusedError(MirrorgateError):
    """The store refused the rows it was given, not the connection (a value a column cannot
    hold): the same rows would be refused again, so they are not kept for another try."""


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
    """The signals in force the bytes were read under (`gate.verdicts.findings.signals_text`); a
    verdict kept by an earlier release holds its rules generation number here instead."""
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Pull:
    """One tarball served (the pull log's `pulls` table, docs/exposure.md); a refusal is
    written as a `RefusalRow`, folded into its hour's count."""

    client: str
    name: str
    version: str
    integrity: str
    source: str
    """Where the bytes came from ("mirror", "public"); "refused:<rule>" only on the way in."""
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


RefusalRow = tuple[str, str, str, str, float, str, float, float, int, str, float | None]
"""Refused pulls folded, as they are written: client, name, version, the rule, the hour (its
start, seconds since the epoch), the integrity, the first and last refusal (seconds), how many,
the first refused request's id, and when the refusal said it ends (a cooldown, a quarantine;
None: a denial without an end). A store adds a row to the one of the same (client, name,
version, rule, hour): a loop of refused pulls costs a row an hour, not a row a pull."""

# what a store's text cannot hold: a NUL (PostgreSQL's text), a lone surrogate (UTF-8)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_Row = TypeVar("_Row", PullRow, RefusalRow)


def _escaped(value: object) -> object:
    if not isinstance(value, str):
        return value
    return _UNSTORABLE.sub(lambda found: found.group().encode("unicode_escape").decode(), value)


def storable_row(row: _Row) -> _Row:
    """`row` with each character a store's text cannot hold written as Python escapes it
    (a NUL as the four characters `\\x00`, a lone surrogate as `\\udc80`): the form a
    refused record is written in (`gate.pulls.log`), never needed on the way in."""
    escaped: _Row = tuple(_escaped(value) for value in row)  # type: ignore[assignment]
    return escaped


@dataclass(frozen=True, slots=True)
class Exposure:
    """One client's pulls of one version, served or refused, as the pull log sums them."""

    client: str
    name: str
    version: str
    first: datetime
    last: datetime
    pulls: int
    sources: tuple[str, ...]
    """Where the bytes came from ("mirror", "public"), or "refused:<rule>", each once."""
    integrity: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one prune of the pull log took: records past the retention, then the oldest past
    the bound on its size (refusals first); and the records kept."""

    by_age: int
    by_size: int
    kept: int


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
        """Append `rows`, served pulls, to the pull log in one transaction. Raises
        StoreRefusedError when the rows' own values cannot be written."""

    async def add_refusals(self, rows: Sequence[RefusalRow]) -> None:
        """Fold `rows` into the refusal counts in one transaction: each adds its pulls to the
        row of its (client, name, version, rule, hour), widening its first and last. Raises
        StoreRefusedError when the rows' own values cannot be written."""

    async def pulls(self, *, name: str | None = None, version: str | None = None,
                    client: str | None = None, since: datetime | None = None,
                    limit: int = 10_000, until: datetime | None = None,
                    identity: Mapping[str, str] | None = None) -> list[Pull]:
        """The served pulls matching every filter given, oldest first: `since` included,
        `until` not; `identity`, columns of `IDENTITY_COLUMNS` and the value each must have."""

    async def pulled(self, *, name: str | None = None, version: str | None = None,
                     client: str | None = None, since: datetime | None = None,
                     limit: int = 10_000) -> list[Exposure]:
        """Who was served what: the served pulls matching every filter, summed per (client,
        name, version), ordered by name, version and first pull. Refusals are another table
        (`refused`): no number of them hides a served pull."""

    async def refused(self, *, name: str | None = None, version: str | None = None,
                      client: str | None = None, since: datetime | None = None,
                      limit: int = 10_000) -> list[Exposure]:
        """The refusals matching every filter (`since`: refused in an hour ending after it),
        summed per (client, name, version) across rules and hours, ordered as `pulled`."""

    async def refusal_counts(self, now: datetime) -> tuple[int, int]:
        """(versions refused without an end, versions held until a moment after `now`: a
        cooldown, a quarantine), each counted once across the fleet's refusals kept."""

    async def prune_pulls(self, before: datetime, max_records: int) -> Pruned:
        """Drop the served pulls and refusal counts older than `before` (the retention), then,
        past `max_records` records in all, the oldest refusal counts and then the oldest
        served pulls."""

    async def close(self) -> None: ...
