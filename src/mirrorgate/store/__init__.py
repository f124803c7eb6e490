"""The state store: what the gate learns and must not forget, in one place for every process.

`backend_of` is the one place a store is chosen from settings (the store's slice,
`config.StoreSettings`): PostgreSQL when MIRRORGATE_DATABASE_URL is set (a fleet), else the
embedded SQLite file under MIRRORGATE_DATA_DIR; the `Backend` it returns describes, probes and
opens itself (`store.backend`), importing its driver only then (asyncpg is the `postgres` extra).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mirrorgate.config import StoreSettings
from mirrorgate.store.backend import Backend, PostgresBackend, SqliteBackend
from mirrorgate.store.records import (
    FIRST_PARTY,
    IDENTITY_COLUMNS,
    INSTALLED,
    KINDS,
    PULL_COLUMNS,
    WITHDRAWN,
    Changes,
    Exposure,
    Fact,
    MigrationError,
    Pruned,
    Pull,
    PullRow,
    RefusalRow,
    Store,
    StoreInfo,
    StoreRefusedError,
    StoreSetupError,
    StoreUnavailableError,
    Verdict,
    storable_row,
)

__all__ = [
    "FIRST_PARTY",
    "IDENTITY_COLUMNS",
    "INSTALLED",
    "KINDS",
    "PULL_COLUMNS",
    "WITHDRAWN",
    "Backend",
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
    "backend_of",
    "open_store",
    "probe_store",
    "read_store",
    "storable_row",
]

T = TypeVar("T")


def backend_of(settings: StoreSettings) -> Backend:
    """The store `settings` choose, not opened: PostgreSQL when MIRRORGATE_DATABASE_URL is set,
    else the SQLite file under MIRRORGATE_DATA_DIR. The one place settings are asked."""
    if settings.database_url is not None:
        return PostgresBackend(settings.data_dir, settings.database_url)
    from mirrorgate.store.sqlite import FILENAME

    return SqliteBackend(settings.data_dir, settings.data_dir / FILENAME)


async def probe_store(settings: StoreSettings) -> dict[str, object]:
    """For check-config: `Backend.probe` of the store `settings` choose."""
    return await backend_of(settings).probe()


async def read_store(settings: StoreSettings, read: Callable[[Store], Awaitable[T]]) -> T | None:
    """`Backend.read` of the store `settings` choose. Raises StoreUnavailableError."""
    return await backend_of(settings).read(read)


async def open_store(settings: StoreSettings) -> Store:
    """`Backend.open` of the store `settings` choose: connected and migrated."""
    return await backend_of(settings).open()
