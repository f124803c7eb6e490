"""The state store: what the gate learns and must not forget, in one place for every process.

`open_store` is the one place a store is chosen from settings: PostgreSQL when
MIRRORGATE_DATABASE_URL is set (a fleet), else the embedded SQLite file under
MIRRORGATE_DATA_DIR. Each is imported only when chosen (asyncpg is the `postgres` extra).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from mirrorgate.config import Settings
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
from mirrorgate.store.waivers import Waiver

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
    "describe_store",
    "open_store",
    "probe_store",
    "read_store",
    "storable_row",
]

T = TypeVar("T")


def describe_store(settings: Settings) -> tuple[str, str]:
    """(kind, where) of the store `settings` choose, without opening it (password redacted)."""
    if settings.database_url is not None:
        from mirrorgate.store.postgres import redacted

        return "postgresql", redacted(settings.database_url.reveal())
    from mirrorgate.store.sqlite import FILENAME

    return "sqlite", str(settings.data_dir / FILENAME)


async def probe_store(settings: Settings) -> dict[str, object]:
    """For check-config: which store, where (password redacted), its schema version now and
    the one this release migrates it to; read only, nothing created or migrated."""
    from mirrorgate.store.schema import LATEST

    kind, where = describe_store(settings)
    shown: dict[str, object] = {"kind": kind, "where": where, "schema_latest": LATEST}
    try:
        if settings.database_url is not None:
            from mirrorgate.store.postgres import read_schema

            schema = await read_schema(settings.database_url.reveal())
        else:
            from mirrorgate.store.sqlite import read_schema as read_file_schema

            schema = read_file_schema(Path(where))
    except (StoreUnavailableError, ImportError) as error:
        return shown | {"reachable": False, "detail": str(error)}
    shown |= {"reachable": True, "schema": schema}
    if schema == LATEST:  # opening it then migrates nothing: still a read
        from datetime import UTC, datetime

        now = datetime.now(UTC)
        shown["waivers"] = [waiver.shown() | {"active": waiver.active(now)}
                            for waiver in await _stored_waivers(settings)]
    return shown


async def read_store(settings: Settings, read: Callable[[Store], Awaitable[T]]) -> T | None:
    """`read` run on the store `settings` choose, for an operator command that judges as the
    proxy does (`check`, `prewarm`, `audit`); None when the store is not created yet, and
    nothing is created or migrated to find out. Raises StoreUnavailableError."""
    from mirrorgate.store.schema import LATEST

    if (await probe_store_schema(settings)) != LATEST:
        return None
    store = await open_store(settings)
    try:
        return await read(store)
    finally:
        await store.close()


async def probe_store_schema(settings: Settings) -> int:
    if settings.database_url is not None:
        from mirrorgate.store.postgres import read_schema

        return await read_schema(settings.database_url.reveal())
    from mirrorgate.store.sqlite import FILENAME
    from mirrorgate.store.sqlite import read_schema as read_file_schema

    return read_file_schema(Path(settings.data_dir) / FILENAME)


async def _stored_waivers(settings: Settings) -> list[Waiver]:
    from mirrorgate.store.waivers import stored_waivers

    store = await open_store(settings)
    try:
        return await stored_waivers(store)
    finally:
        await store.close()


async def open_store(settings: Settings) -> Store:
    """The store `settings` choose, connected and migrated. Raises StoreUnavailableError when
    it does not answer, StoreSetupError (MigrationError) when it cannot be used as it is: an
    empty store that MIRRORGATE_DATA_DIR says was held before included (`store.marker`)."""
    from mirrorgate.store import marker

    data_dir = Path(settings.data_dir)
    _kind, where = describe_store(settings)
    refuse_empty = marker.refusal(data_dir, where)
    store: Store
    if settings.database_url is not None:
        try:
            from mirrorgate.store.postgres import open_postgres
        except ImportError as error:
            raise StoreSetupError(
                f"MIRRORGATE_DATABASE_URL needs the postgres extra ({error.name} is missing); "
                "install it with: pip install 'mirrorgate[postgres]'") from None
        store = await open_postgres(settings.database_url.reveal(), refuse_empty=refuse_empty)
    else:
        from mirrorgate.store.sqlite import FILENAME, open_sqlite

        store = await open_sqlite(data_dir / FILENAME, refuse_empty=refuse_empty)
    marker.remember(data_dir, where)
    return store
