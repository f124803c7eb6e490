"""The two state stores as one kind of object: a `Backend` says which it is and where (password
redacted), reads its schema version without creating or migrating anything, and opens itself
migrated. `store.backend_of` is the one place settings choose one; each backend imports its
driver only when used (asyncpg is the `postgres` extra, so a SQLite install never needs it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, TypeVar

from mirrorgate.config import PasswordUrl
from mirrorgate.store import marker
from mirrorgate.store.records import Store, StoreSetupError, StoreUnavailableError
from mirrorgate.store.schema import LATEST

__all__ = ["Backend", "PostgresBackend", "SqliteBackend"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backend(ABC):
    """One store; `data_dir` holds the marker that remembers which store it held
    (`store.marker`), whichever backend this is."""

    data_dir: Path
    kind: ClassVar[str]

    @abstractmethod
    def where(self) -> str:
        """The file, or the URL with its password redacted."""

    @abstractmethod
    async def schema(self) -> int:
        """The schema version now, read only (0: not created yet); raises
        StoreUnavailableError."""

    @abstractmethod
    async def _migrated(self, refuse_empty: str | None) -> Store: ...

    async def open(self) -> Store:
        """Connected and migrated. Raises StoreUnavailableError when it does not answer,
        StoreSetupError (MigrationError) when it cannot be used as it is: an empty store that
        `data_dir` says was held before included (`store.marker`)."""
        where = self.where()
        store = await self._migrated(marker.refusal(self.data_dir, where))
        marker.remember(self.data_dir, where)
        return store

    async def read(self, read: Callable[[Store], Awaitable[T]]) -> T | None:
        """`read` run on the store, for an operator command that judges as the proxy does
        (`check`, `prewarm`, `audit`); None when the store is not created yet (or not yet
        migrated), and nothing is created or migrated to find out."""
        if await self.schema() != LATEST:
            return None
        store = await self.open()
        try:
            return await read(store)
        finally:
            await store.close()

    async def probe(self) -> dict[str, object]:
        """For check-config: which store, where, its schema version now and the one this
        release migrates it to, and the waivers it holds; read only."""
        from mirrorgate.store.waivers import stored_waivers

        shown: dict[str, object] = {"kind": self.kind, "where": self.where(),
                                    "schema_latest": LATEST}
        try:
            schema = await self.schema()
        except (StoreUnavailableError, ImportError) as error:
            return shown | {"reachable": False, "detail": str(error)}
        shown |= {"reachable": True, "schema": schema}
        if schema == LATEST:  # opening it then migrates nothing: still a read
            now = datetime.now(UTC)
            waivers = await self.read(stored_waivers) or []
            shown["waivers"] = [waiver.shown() | {"active": waiver.active(now)}
                                for waiver in waivers]
        return shown


@dataclass(frozen=True)
class SqliteBackend(Backend):
    """The embedded file under MIRRORGATE_DATA_DIR: one process, or one host."""

    path: Path
    kind: ClassVar[str] = "sqlite"

    def where(self) -> str:
        return str(self.path)

    async def schema(self) -> int:
        from mirrorgate.store.sqlite import read_schema

        return read_schema(self.path)

    async def _migrated(self, refuse_empty: str | None) -> Store:
        from mirrorgate.store.sqlite import open_sqlite

        return await open_sqlite(self.path, refuse_empty=refuse_empty)


@dataclass(frozen=True)
class PostgresBackend(Backend):
    """PostgreSQL at MIRRORGATE_DATABASE_URL: a fleet's replicas share it."""

    url: PasswordUrl
    kind: ClassVar[str] = "postgresql"

    def where(self) -> str:
        # the password replaced, as `PostgresStore.where` shows it; no driver needed to say it
        return self.url.shown()

    async def schema(self) -> int:
        from mirrorgate.store.postgres import read_schema

        return await read_schema(self.url.reveal())

    async def _migrated(self, refuse_empty: str | None) -> Store:
        try:
            from mirrorgate.store.postgres import open_postgres
        except ImportError as error:
            raise StoreSetupError(
                f"MIRRORGATE_DATABASE_URL needs the postgres extra ({error.name} is missing); "
                "install it with: pip install 'mirrorgate[postgres]'") from None
        return await open_postgres(self.url.reveal(), refuse_empty=refuse_empty)
