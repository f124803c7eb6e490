"""The store settings choose, as one object (`store.backend_of`), on SQLite and on a real
PostgreSQL: where it says it is, its schema read without creating anything, opened migrated.

The attacks: the database password shown by check-config; an operator command that only reads
(`check`, `audit`) creating or migrating the store a fleet shares; a store emptied under the
data directory that held it (a volume wiped, a URL pointed elsewhere) started afresh, so every
first-party name and withdrawal it kept is forgotten. The controls beside them: the first open
creates and migrates, and a read of a created store reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorgate.config import StoreSettings, load_settings
from mirrorgate.store import Backend, Fact, Store, StoreSetupError, backend_of
from mirrorgate.store.backend import PostgresBackend, SqliteBackend
from mirrorgate.store.schema import LATEST
from mirrorgate.store.sqlite import FILENAME
from tests.store.conftest import Place

PASSWORD = "s3cret-db-password"  # noqa: S105 - a test password, never shown


def settings_for(data_dir: Path, database_url: str | None = None) -> StoreSettings:
    environ = {"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
               "MIRRORGATE_DATA_DIR": str(data_dir)}
    if database_url is not None:
        environ["MIRRORGATE_DATABASE_URL"] = database_url
    return load_settings(environ, npm_registry=lambda: None).store


def test_settings_choose_the_file_or_the_database_and_say_where_without_the_password(
    tmp_path: Path,
) -> None:
    sqlite = backend_of(settings_for(tmp_path))
    postgres = backend_of(settings_for(
        tmp_path, f"postgresql://mirrorgate:{PASSWORD}@127.0.0.1:5432/state"))

    assert isinstance(sqlite, SqliteBackend)
    assert (sqlite.kind, sqlite.where()) == ("sqlite", str(tmp_path / FILENAME))
    assert isinstance(postgres, PostgresBackend)
    assert postgres.kind == "postgresql"
    assert postgres.where() == "postgresql://mirrorgate:**redacted**@127.0.0.1:5432/state"
    assert PASSWORD not in postgres.where()


def backend_at(place: Place, data_dir: Path) -> Backend:
    spec = place.spec.removeprefix("sqlite:")
    if place.kind == "sqlite":
        return backend_of(settings_for(Path(spec).parent))
    return backend_of(settings_for(data_dir, spec))


async def kept(store: Store) -> list[Fact]:
    return (await store.changes(0)).facts


async def test_a_read_creates_nothing_and_the_first_open_creates_and_migrates(
    place: Place, tmp_path: Path,
) -> None:
    backend = backend_at(place, tmp_path / "data")

    before = await backend.probe()
    read_fresh = await backend.read(kept)
    still = await backend.schema()
    store = await backend.open()
    try:
        await store.put_facts([Fact("first-party", "@acme/api", "1")])
    finally:
        await store.close()
    read_after = await backend.read(kept)
    after = await backend.probe()

    assert (before["kind"], before["reachable"], before["schema"]) == (place.kind, True, 0)
    assert "waivers" not in before  # listing them would have meant opening (creating) it
    assert read_fresh is None
    assert still == 0
    assert [fact.key for fact in read_after or []] == ["@acme/api"]
    assert (after["schema"], after["schema_latest"], after["waivers"]) == (LATEST, LATEST, [])


async def test_a_store_emptied_under_the_data_directory_that_held_it_is_refused(
    tmp_path: Path,
) -> None:
    # the file here; tests/e2e/test_state_store.py empties a PostgreSQL store through the
    # real command
    backend = backend_of(settings_for(tmp_path / "data"))
    control = await backend.open()
    await control.close()
    (tmp_path / "data" / FILENAME).unlink()

    with pytest.raises(StoreSetupError) as refused:
        await backend.open()

    assert f"the state store at {backend.where()} is empty" in str(refused.value)
