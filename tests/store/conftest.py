"""The one fixture the store's conformance suite runs on: a fresh store per case, on SQLite and
on a real PostgreSQL (`tests.servers.postgres_server`), with a way to take it away and back."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mirrorgate.store import Store
from tests.servers.postgres_server import PostgresServer
from tests.store.harness import open_spec

STORES = ("postgresql", "sqlite")


@dataclass
class Place:
    """Where one case's store lives, and how to make it unreachable for a while."""

    kind: str
    spec: str
    server: PostgresServer | None = None

    async def open(self) -> Store:
        return await open_spec(self.spec)

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        """The store does not answer inside the block: the server stopped, or (SQLite)
        another process holding the file's write lock past the busy timeout."""
        if self.server is not None:
            self.server.stop()
            try:
                yield
            finally:
                self.server.start()
            return
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            db = sqlite3.connect(self.spec.removeprefix("sqlite:"), isolation_level=None)
            db.execute("BEGIN EXCLUSIVE")
            held.set()
            release.wait(60)
            db.execute("ROLLBACK")
            db.close()
        thread = threading.Thread(target=hold)
        thread.start()
        held.wait(10)
        try:
            yield
        finally:
            release.set()
            thread.join()


@pytest.fixture(params=STORES)
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    if request.param == "sqlite":
        yield Place("sqlite", f"sqlite:{tmp_path / 'state.sqlite3'}")
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    yield Place("postgresql", await server.new_database(), server)


@pytest.fixture
async def store(place: Place) -> AsyncIterator[Store]:
    opened = await place.open()
    yield opened
    await opened.close()
