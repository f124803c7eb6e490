"""The embedded state store: one SQLite file under MIRRORGATE_DATA_DIR, in WAL mode.

For one replica, and for the proxy with its sidecar worker on one volume: both open the same
file, and each sees the other's writes through `changes` (docs/state-store.md).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from mirrorgate.store.records import (
    PULL_COLUMNS,
    Changes,
    Exposure,
    Fact,
    Pruned,
    Pull,
    PullRow,
    RefusalRow,
    StoreInfo,
    StoreRefusedError,
    StoreSetupError,
    StoreUnavailableError,
    Verdict,
    identity_filters,
)
from mirrorgate.store.schema import LATEST, MIGRATIONS, newer_than_known

__all__ = ["FILENAME", "SqliteStore", "open_sqlite"]

FILENAME = "state.sqlite3"
_BUSY_SECONDS = 5.0  # another process's write holds the lock this long at most before we fail
_T = TypeVar("_T")
# OR FAIL: a multi-row INSERT otherwise keeps a statement journal (each index page's first
# image, spilled to a temporary file past 64 KiB) to undo its own rows on a failure; the
# transaction around it is rolled back whole on any failure, so the journal is never needed,
# and it was a quarter of the write's CPU (bench/pull_log.py, docs/exposure.md)
_INSERT_PULLS = ("INSERT OR FAIL INTO pulls (client, name, version, integrity, source, at, "
                 "request_id, client_name, repository, ref, workflow, sha1, license, verdict) "
                 "VALUES ")  # PULL_COLUMNS
_PULL_VALUES = "(" + ", ".join("?" * len(PULL_COLUMNS)) + ")"
_SELECT_PULLS = ("SELECT client, name, version, integrity, source, at, request_id, "
                 "client_name, repository, ref, workflow, sha1, license, verdict FROM pulls")
_ADD_REFUSAL = ("INSERT INTO refusals (client, name, version, rule, hour, integrity, first_at, "
                "last_at, pulls, request_id, until_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (client, name, version, rule, hour) DO UPDATE SET "
                "pulls = pulls + excluded.pulls, first_at = min(first_at, excluded.first_at), "
                "last_at = max(last_at, excluded.last_at), until_at = excluded.until_at")
_ROWS_PER_INSERT = 200  # statements of 2,800 parameters: under every SQLite's default limit
_Row = tuple[str, tuple[Any, ...]]  # a statement and its parameters
# what a row's own values raise: a constraint, a value the module cannot bind (a lone
# surrogate cannot be encoded: UnicodeEncodeError, a ValueError), an integer too large
_REFUSED = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
            sqlite3.ProgrammingError, ValueError, OverflowError, TypeError)


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


class SqliteStore:
    """One connection, owned by one thread: every call (reads too) runs there, never on the
    event loop. Measured against aiosqlite (bench/state_store.py, docs/state-store.md): the
    same thread-per-connection design, and aiosqlite's queue adds a hop per call (a one-fact
    write 0.53 ms against 0.32 ms here, a change-feed read 0.27 against 0.13) and a
    dependency; a one-thread executor is enough."""

    def __init__(self, path: Path, *, busy_seconds: float = _BUSY_SECONDS) -> None:
        self.path = path
        self.busy_seconds = busy_seconds
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-store")
        self._db: sqlite3.Connection | None = None
        self._schema = 0

    @property
    def info(self) -> StoreInfo:
        return StoreInfo("sqlite", str(self.path), self._schema)

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        def call() -> _T:
            try:
                return work(self._connection())
            except sqlite3.Error as error:
                if self._db is not None and self._db.in_transaction:
                    self._db.rollback()
                raise StoreUnavailableError(
                    f"the state store {self.path} failed: {type(error).__name__}: "
                    f"{error}") from None
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.busy_seconds,
                                 isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                # FULL: a commit is on disk when it returns, through a power cut too; writes
                # are rare and batched, so the fsync a commit costs is not felt
                db.execute("PRAGMA synchronous=FULL")
            except sqlite3.Error:
                db.close()
                raise
            self._db = db
        return self._db

    async def migrate(self, *, refuse_empty: str | None = None) -> int:
        """Apply the migrations after the store's number; with `refuse_empty`, an empty store
        is not created but refused with that message (`store.marker`)."""
        def work(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it
            try:
                db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                row = db.execute("SELECT max(version) FROM schema_version").fetchone()
                found = int(row[0] or 0)
                if found > LATEST:
                    raise newer_than_known(found, str(self.path))
                if found == 0 and refuse_empty is not None:
                    raise StoreSetupError(refuse_empty)
                for migration in MIGRATIONS:
                    if migration.version <= found:
                        continue
                    try:
                        for statement in _statements(migration.sqlite):
                            db.execute(statement)
                    except sqlite3.Error as error:
                        raise migration.failed(error) from None
                    db.execute("INSERT INTO schema_version VALUES (?)", (migration.version,))
                    found = migration.version
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return found

        try:
            self._schema = await self._run(work)
        except StoreSetupError:
            raise
        return self._schema

    def _write(self, db: sqlite3.Connection, rows: Callable[[int], list[_Row]],
               count: int) -> None:
        """One write transaction: `count` change numbers taken from the counter, then `rows`
        (statement, parameters) built from the first of them."""
        db.execute("BEGIN IMMEDIATE")
        try:
            (last,) = db.execute("UPDATE change_counter SET value = value + ? RETURNING value",
                                 (count,)).fetchone()
            for statement, parameters in rows(int(last) - count + 1):
                db.execute(statement, parameters)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def put_facts(self, facts: Sequence[Fact]) -> None:
        if not facts:
            return
        items = list(facts)

        def rows(first: int) -> list[_Row]:
            return [("INSERT INTO facts (kind, key, value, seq) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, "
                     "seq = excluded.seq", (fact.kind, fact.key, fact.value, first + index))
                    for index, fact in enumerate(items)]
        await self._run(lambda db: self._write(db, rows, len(items)))

    async def claim(self, kind: str, key: str, value: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            db.execute("BEGIN IMMEDIATE")  # the write lock: one claimant at a time
            try:
                (seq,) = db.execute("UPDATE change_counter SET value = value + 1 "
                                    "RETURNING value").fetchone()
                written = db.execute("INSERT INTO facts (kind, key, value, seq) "
                                     "VALUES (?, ?, ?, ?) ON CONFLICT (kind, key) DO NOTHING",
                                     (kind, key, value, int(seq))).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return written == 1
        return await self._run(work)

    async def put_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        if not verdicts:
            return
        items = list(verdicts)

        def rows(first: int) -> list[_Row]:
            return [("INSERT INTO verdicts (name, version, integrity, verdict, evidence, "
                     "compared_with, generation, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                     "ON CONFLICT (name, version, integrity) DO UPDATE SET "
                     "verdict = excluded.verdict, evidence = excluded.evidence, "
                     "compared_with = excluded.compared_with, "
                     "generation = excluded.generation, seq = excluded.seq",
                     (v.name, v.version, v.integrity, v.verdict, v.evidence, v.compared_with,
                      v.generation, first + index))
                    for index, v in enumerate(items)]
        await self._run(lambda db: self._write(db, rows, len(items)))

    async def changes(self, after: int, limit: int = 10_000) -> Changes:
        def work(db: sqlite3.Connection) -> Changes:
            db.execute("BEGIN")  # one snapshot for both tables
            try:
                facts = [Fact(*row) for row in db.execute(
                    "SELECT kind, key, value, seq FROM facts WHERE seq > ? ORDER BY seq "
                    "LIMIT ?", (after, limit))]
                verdicts = [Verdict(*row) for row in db.execute(
                    "SELECT name, version, integrity, verdict, evidence, compared_with, "
                    "generation, seq FROM verdicts WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after, limit))]
            finally:
                db.execute("COMMIT")
            return merged(facts, verdicts, after, limit)
        return await self._run(work)

    async def append_pulls(self, rows: Sequence[PullRow]) -> None:
        if not rows:
            return

        def work(db: sqlite3.Connection) -> None:
            # many rows per INSERT, not executemany: the module lets go of the interpreter
            # lock around every statement it steps, and a busy event loop makes each of those
            # hand-overs a thread switch; one per few hundred rows costs a third less CPU
            # (bench/pull_log.py, docs/exposure.md)
            per = max(1, min(_ROWS_PER_INSERT,
                             db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
                             // len(PULL_COLUMNS)))

            def write() -> None:
                for start in range(0, len(rows), per):
                    part = rows[start:start + per]
                    db.execute(_INSERT_PULLS + ",".join([_PULL_VALUES] * len(part)),
                               [value for row in part for value in row])
            self._refusing(db, write)
        await self._run(work)

    def _refusing(self, db: sqlite3.Connection, write: Callable[[], object]) -> None:
        """`write` in one write transaction; what the rows' own values raise (they would
        fail again) as StoreRefusedError, the rest as the store failing (`_run`)."""
        db.execute("BEGIN IMMEDIATE")
        try:
            write()
            db.execute("COMMIT")
        except _REFUSED as error:
            db.execute("ROLLBACK")
            raise StoreRefusedError(f"the state store {self.path} refused the rows: "
                                    f"{type(error).__name__}: {error}"[:500]) from None
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def add_refusals(self, rows: Sequence[RefusalRow]) -> None:
        if rows:
            await self._run(lambda db: self._refusing(
                db, lambda: db.executemany(_ADD_REFUSAL, rows)))

    async def pulls(self, *, name: str | None = None, version: str | None = None,
                    client: str | None = None, since: datetime | None = None,
                    limit: int = 10_000, until: datetime | None = None,
                    identity: Mapping[str, str] | None = None) -> list[Pull]:
        where, parameters = _where(name, version, client, since, "at", until=until,
                                   identity=identity)
        query = _SELECT_PULLS + where + " ORDER BY at, id LIMIT ?"

        def work(db: sqlite3.Connection) -> list[Pull]:
            return [Pull(row[0], row[1], row[2], row[3], row[4],
                         datetime.fromtimestamp(row[5], UTC), row[6], *row[7:])
                    for row in db.execute(query, (*parameters, limit))]
        return await self._run(work)

    async def pulled(self, *, name: str | None = None, version: str | None = None,
                     client: str | None = None, since: datetime | None = None,
                     limit: int = 10_000) -> list[Exposure]:
        where, parameters = _where(name, version, client, since, "at")
        return await self._exposures(
            "SELECT client, name, version, min(at), max(at), count(*), "
            "json_group_array(DISTINCT source), json_group_array(DISTINCT integrity) "
            "FROM pulls" + where + " GROUP BY client, name, version "
            "ORDER BY name, version, min(at), client LIMIT ?", [*parameters, limit])

    async def refused(self, *, name: str | None = None, version: str | None = None,
                      client: str | None = None, since: datetime | None = None,
                      limit: int = 10_000) -> list[Exposure]:
        where, parameters = _where(name, version, client, since, "last_at")
        return await self._exposures(
            "SELECT client, name, version, min(first_at), max(last_at), sum(pulls), "
            "json_group_array(DISTINCT 'refused:' || rule), json_group_array(DISTINCT integrity) "
            "FROM refusals" + where + " GROUP BY client, name, version "
            "ORDER BY name, version, min(first_at), client LIMIT ?", [*parameters, limit])

    async def _exposures(self, query: str, parameters: list[str | float]) -> list[Exposure]:
        def work(db: sqlite3.Connection) -> list[Exposure]:
            return [Exposure(row[0], row[1], row[2], datetime.fromtimestamp(row[3], UTC),
                             datetime.fromtimestamp(row[4], UTC), int(row[5]),
                             tuple(sorted(json.loads(row[6]))), tuple(sorted(json.loads(row[7]))))
                    for row in db.execute(query, parameters)]
        return await self._run(work)

    async def refusal_counts(self, now: datetime) -> tuple[int, int]:
        def work(db: sqlite3.Connection) -> tuple[int, int]:
            # a version counted once: its name and version, a NUL between (no name holds one)
            (refused, held) = db.execute(
                "SELECT count(DISTINCT CASE WHEN until_at IS NULL THEN name || char(0) || "
                "version END), count(DISTINCT CASE WHEN until_at > ? THEN name || char(0) || "
                "version END) FROM refusals", (now.timestamp(),)).fetchone()
            return int(refused), int(held)
        return await self._run(work)

    async def prune_pulls(self, before: datetime, max_records: int) -> Pruned:
        def work(db: sqlite3.Connection) -> Pruned:
            db.execute("BEGIN IMMEDIATE")
            try:
                by_age = db.execute("DELETE FROM pulls WHERE at < ?",
                                    (before.timestamp(),)).rowcount
                by_age += db.execute("DELETE FROM refusals WHERE last_at < ?",
                                     (before.timestamp(),)).rowcount
                (kept,) = db.execute("SELECT (SELECT count(*) FROM pulls) + "
                                     "(SELECT count(*) FROM refusals)").fetchone()
                over, by_size = kept - max_records, 0
                if over > 0:  # refusals first: no flood of them pushes a served pull out
                    by_size = db.execute("DELETE FROM refusals WHERE rowid IN (SELECT rowid "
                                         "FROM refusals ORDER BY hour LIMIT ?)",
                                         (over,)).rowcount
                    if over > by_size:
                        by_size += db.execute("DELETE FROM pulls WHERE id IN (SELECT id FROM "
                                              "pulls ORDER BY id LIMIT ?)",
                                              (over - by_size,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return Pruned(by_age, by_size, int(kept) - by_size)
        return await self._run(work)

    async def close(self) -> None:
        def work() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        await asyncio.get_running_loop().run_in_executor(self._thread, work)
        self._thread.shutdown(wait=True)


def _where(name: str | None, version: str | None, client: str | None, since: datetime | None,
           time_column: str, *, until: datetime | None = None,
           identity: Mapping[str, str] | None = None) -> tuple[str, list[str | float]]:
    """The WHERE clause of a pull log read and its parameters (`since` included, `until` not;
    `identity` on the served pulls only): the column names are this module's own
    (`identity_filters` admits no other), every value a parameter."""
    where: list[str] = []
    parameters: list[str | float] = []
    for column, value in (("name", name), ("version", version), ("client", client),
                          *identity_filters(identity)):
        if value is not None:
            where.append(f"{column} = ?")
            parameters.append(value)
    for bound, sign in ((since, ">="), (until, "<")):
        if bound is not None:
            where.append(f"{time_column} {sign} ?")
            parameters.append(bound.timestamp())
    return (" WHERE " + " AND ".join(where) if where else ""), parameters


def read_schema(path: Path) -> int:
    """The schema version of the store at `path`, read only (0: not created yet)."""
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=_BUSY_SECONDS)
        try:
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        finally:
            db.close()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return 0
        raise StoreUnavailableError(f"the state store {path} cannot be read: {error}") from None
    return int(row[0] or 0)


def merged(facts: list[Fact], verdicts: list[Verdict], after: int, limit: int) -> Changes:
    """Both tables' first `limit` changes after `after`, cut to the first `limit` of either:
    any change numbered below the last kept is among each table's own first `limit`."""
    both: list[Fact | Verdict] = [*facts, *verdicts]
    order = sorted(both, key=lambda item: item.seq)[:limit]
    cursor = order[-1].seq if order else after
    return Changes([item for item in order if isinstance(item, Fact)],
                   [item for item in order if isinstance(item, Verdict)], cursor)


async def open_sqlite(path: Path, *, busy_seconds: float = _BUSY_SECONDS,
                      refuse_empty: str | None = None) -> SqliteStore:
    """The store at `path`, migrated; raises StoreUnavailableError or StoreSetupError
    (MigrationError, or `refuse_empty` for an empty store)."""
    store = SqliteStore(path, busy_seconds=busy_seconds)
    try:
        await store.migrate(refuse_empty=refuse_empty)
    except BaseException:
        await store.close()
        raise
    return store
