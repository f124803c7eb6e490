"""The state store: what the gate learns and must not forget, in one place for every process.

`open_store` is the one place a store is chosen from settings: PostgreSQL when
MIRRORGATE_DATABASE_URL is set (a fleet), else the embedded SQLite file under
MIRRORGATE_DATA_DIR. Each is imported only when chosen (asyncpg is the `postgres` extra).
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.config import Settings
from mirrorgate.store.records import (
    FIRST_PARTY,
    INSTALLED,
    KINDS,
    WITHDRAWN,
    Changes,
    Fact,
    MigrationError,
    Pull,
    Store,
    StoreInfo,
    StoreSetupError,
    StoreUnavailableError,
    Verdict,
)

__all__ = [
    "FIRST_PARTY",
    "INSTALLED",
    "KINDS",
    "WITHDRAWN",
    "Changes",
    "Fact",
    "MigrationError",
    "Pull",
    "Store",
    "StoreInfo",
    "StoreSetupError",
    "StoreUnavailableError",
    "Verdict",
    "describe_store",
    "open_store",
    "probe_store",
]


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
        shown["waivers"] = await _waivers(settings)
    return shown


async def _waivers(settings: Settings) -> list[dict[str, object]]:
    """The waivers the store holds (`mirrorgate allow`), each with whether it is in force."""
    from datetime import UTC, datetime

    from mirrorgate.store.waivers import stored_waivers

    store = await open_store(settings)
    try:
        found = await stored_waivers(store)
    finally:
        await store.close()
    now = datetime.now(UTC)
    return [waiver.shown() | {"active": waiver.active(now)} for waiver in found]


async def open_store(settings: Settings) -> Store:
    """The store `settings` choose, connected and migrated. Raises StoreUnavailableError when
    it does not answer, StoreSetupError (MigrationError) when it cannot be used as it is."""
    if settings.database_url is not None:
        try:
            from mirrorgate.store.postgres import open_postgres
        except ImportError as error:
            raise StoreSetupError(
                f"MIRRORGATE_DATABASE_URL needs the postgres extra ({error.name} is missing); "
                "install it with: pip install 'mirrorgate[postgres]'") from None
        return await open_postgres(settings.database_url.reveal())
    from mirrorgate.store.sqlite import FILENAME, open_sqlite

    return await open_sqlite(Path(settings.data_dir) / FILENAME)
