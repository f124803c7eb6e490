"""The fleet's state store: PostgreSQL at MIRRORGATE_DATABASE_URL, through asyncpg.

asyncpg, not psycopg 3: it is asyncio-native with its pool built in (psycopg needs
psycopg_pool beside it), binary protocol and prepared statements by default, and one
dependency with no libpq to install in the image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from mirrorgate.config import PasswordUrl
from mirrorgate.store.records import (
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
from mirrorgate.store.sqlite import merged

__all__ = ["POOL_MAX", "PostgresStore", "open_postgres", "redacted"]

POOL_MAX = 4
"""Connections one process holds at most: the gate writes in batches from one task and polls
from another, so a few cover it, and a fleet of 20 replicas stays within 80 of the server's."""
_INSERT_PULLS = ("INSERT INTO pulls (client, name, version, integrity, source, at, request_id, "
                 "client_name, repository, ref, workflow, sha1, license, verdict) VALUES ($1, "
                 "$2, $3, $4, $5, to_timestamp($6), $7, $8, $9, $10, $11, $12, $13, $14)")
"""The time as the row carries it (seconds since the epoch), made a timestamp by the server:
no datetime per pull on the event loop."""
_TIMEOUT = 10.0  # seconds a connect or a statement may take before the store counts as down
_WRITERS = 0x6D67_7772  # the advisory lock every write transaction takes ("mgwr")
_MIGRATING = 0x6D67_6D69  # the one a migration takes ("mgmi")
# What a server going away looks like from asyncpg: a refused or reset connection, a
# terminated backend, a timeout, the pool closing a broken connection under us.
_DOWN = (OSError, TimeoutError, asyncpg.PostgresConnectionError,
         asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CannotConnectNowError,
         asyncpg.InterfaceError)


def redacted(url: str) -> str:
    """The URL as a person may see it: the password replaced."""
    return PasswordUrl(url).shown()


class PostgresStore:
    """A bounded asyncpg pool. Every write transaction first takes one advisory lock, so change
    numbers (`nextval`) are committed in the order they are drawn: a replica reading `changes`
    never skips a number a slower transaction drew earlier and commits later. Writes are rare
    and batched, so the lock costs nothing a request feels."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.where = redacted(url)
        self._pool: asyncpg.Pool | None = None
        self._schema = 0

    @property
    def info(self) -> StoreInfo:
        return StoreInfo("postgresql", self.where, self._schema)

    def _unavailable(self, error: BaseException) -> StoreUnavailableError:
        detail = str(error).replace(self._url, self.where)
        return StoreUnavailableError(f"the state store at {self.where} did not answer: "
                                     f"{type(error).__name__}: {detail}"[:500])

    async def _pool_of(self) -> asyncpg.Pool:
        if self._pool is None:
            try:
                self._pool = await asyncpg.create_pool(
                    self._url, min_size=1, max_size=POOL_MAX, timeout=_TIMEOUT,
                    command_timeout=_TIMEOUT)
            except (*_DOWN, asyncpg.PostgresError) as error:  # a refused password too
                raise self._unavailable(error) from None
        return self._pool

    async def _call(self, work: Any) -> Any:
        pool = await self._pool_of()
        try:
            async with pool.acquire() as connection:
                return await work(connection)
        except _DOWN as error:
            raise self._unavailable(error) from None

    async def migrate(self, *, refuse_empty: str | None = None) -> int:
        """Apply the migrations after the store's number; with `refuse_empty`, an empty store
        is not created but refused with that message (`store.marker`)."""
        async def work(db: asyncpg.Connection) -> int:
            async with db.transaction():
                # one replica migrates; the others wait here, then find the work done
                await db.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATING)
                await db.execute("CREATE TABLE IF NOT EXISTS schema_version "
                                 "(version INTEGER NOT NULL)")
                found = int(await db.fetchval("SELECT coalesce(max(version), 0) "
                                              "FROM schema_version"))
                if found > LATEST:
                    raise newer_than_known(found, self.where)
                if found == 0 and refuse_empty is not None:
                    raise StoreSetupError(refuse_empty)
                for migration in MIGRATIONS:
                    if migration.version <= found:
                        continue
                    try:
                        async with db.transaction():  # a savepoint: the error names this one
                            await db.execute(migration.postgres)
                            await db.execute("INSERT INTO schema_version VALUES ($1)",
                                             migration.version)
                    except asyncpg.PostgresError as error:
                        raise migration.failed(error) from None
                    found = migration.version
                return found
        self._schema = int(await self._call(work))
        return self._schema

    async def _write(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        async def work(db: asyncpg.Connection) -> None:
            async with db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock($1)", _WRITERS)
                await db.executemany(statement, rows)
        await self._call(work)

    async def put_facts(self, facts: Sequence[Fact]) -> None:
        if facts:
            await self._write(
                "INSERT INTO facts (kind, key, value, seq) "
                "VALUES ($1, $2, $3, nextval('change_counter')) ON CONFLICT (kind, key) "
                "DO UPDATE SET value = excluded.value, seq = excluded.seq",
                [(f.kind, f.key, f.value) for f in facts])

    async def claim(self, kind: str, key: str, value: str) -> bool:
        async def work(db: asyncpg.Connection) -> bool:
            async with db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock($1)", _WRITERS)
                written = await db.fetchval(
                    "INSERT INTO facts (kind, key, value, seq) "
                    "VALUES ($1, $2, $3, nextval('change_counter')) "
                    "ON CONFLICT (kind, key) DO NOTHING RETURNING 1", kind, key, value)
            return written is not None
        claimed: bool = await self._call(work)
        return claimed

    async def put_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        if verdicts:
            await self._write(
                "INSERT INTO verdicts (name, version, integrity, verdict, evidence, "
                "compared_with, generation, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, "
                "nextval('change_counter')) ON CONFLICT (name, version, integrity) DO UPDATE "
                "SET verdict = excluded.verdict, evidence = excluded.evidence, "
                "compared_with = excluded.compared_with, generation = excluded.generation, "
                "seq = excluded.seq",
                [(v.name, v.version, v.integrity, v.verdict, v.evidence, v.compared_with,
                  v.generation) for v in verdicts])

    async def changes(self, after: int, limit: int = 10_000) -> Changes:
        async def work(db: asyncpg.Connection) -> Changes:
            async with db.transaction(isolation="repeatable_read", readonly=True):
                facts = [Fact(r[0], r[1], r[2], int(r[3])) for r in await db.fetch(
                    "SELECT kind, key, value, seq FROM facts WHERE seq > $1 ORDER BY seq "
                    "LIMIT $2", after, limit)]
                verdicts = [Verdict(r[0], r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]))
                            for r in await db.fetch(
                    "SELECT name, version, integrity, verdict, evidence, compared_with, "
                    "generation, seq FROM verdicts WHERE seq > $1 ORDER BY seq LIMIT $2",
                    after, limit)]
            return merged(facts, verdicts, after, limit)
        result: Changes = await self._call(work)
        return result

    async def append_pulls(self, rows: Sequence[PullRow]) -> None:
        if not rows:
            return

        async def work(db: asyncpg.Connection) -> None:
            async with db.transaction():
                await db.executemany(_INSERT_PULLS, rows)
        await self._call_refusing(work)

    async def _call_refusing(self, work: Any) -> Any:
        """`_call`, with a value the server (or asyncpg's encoder) cannot take, a NUL in a
        text, raised as StoreRefusedError, and any other error of the server's (a table
        dropped, a right revoked) as the store not answering: the rows wait."""
        try:
            return await self._call(work)
        except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as error:
            raise StoreRefusedError(f"the state store at {self.where} refused the rows: "
                                    f"{type(error).__name__}: {error}"[:500]) from None
        except asyncpg.PostgresError as error:
            raise self._unavailable(error) from None

    async def add_refusals(self, rows: Sequence[RefusalRow]) -> None:
        if not rows:
            return

        async def work(db: asyncpg.Connection) -> None:
            async with db.transaction():
                await db.executemany(
                    "INSERT INTO refusals (client, name, version, rule, hour, integrity, "
                    "first_at, last_at, pulls, request_id, until_at) VALUES ($1, $2, $3, $4, "
                    "to_timestamp($5), $6, to_timestamp($7), to_timestamp($8), $9, $10, "
                    "to_timestamp($11)) "
                    "ON CONFLICT (client, name, version, rule, hour) DO UPDATE SET "
                    "pulls = refusals.pulls + excluded.pulls, "
                    "first_at = least(refusals.first_at, excluded.first_at), "
                    "last_at = greatest(refusals.last_at, excluded.last_at), "
                    "until_at = excluded.until_at", rows)
        await self._call_refusing(work)

    async def pulls(self, *, name: str | None = None, version: str | None = None,
                    client: str | None = None, since: datetime | None = None,
                    limit: int = 10_000, until: datetime | None = None,
                    identity: Mapping[str, str] | None = None) -> list[Pull]:
        where, parameters = _where(name, version, client, since, "at", until=until,
                                   identity=identity)
        parameters.append(limit)
        query = ("SELECT client, name, version, integrity, source, at, request_id, "
                 "client_name, repository, ref, workflow, sha1, license, verdict "
                 "FROM pulls" + where + f" ORDER BY at, id LIMIT ${len(parameters)}")

        async def work(db: asyncpg.Connection) -> list[Pull]:
            return [Pull(*row) for row in await db.fetch(query, *parameters)]
        found: list[Pull] = await self._call(work)
        return found

    async def pulled(self, *, name: str | None = None, version: str | None = None,
                     client: str | None = None, since: datetime | None = None,
                     limit: int = 10_000) -> list[Exposure]:
        where, parameters = _where(name, version, client, since, "at")
        parameters.append(limit)
        return await self._exposures(
            "SELECT client, name, version, min(at), max(at), count(*), "
            "array_agg(DISTINCT source), array_agg(DISTINCT integrity) "
            "FROM pulls" + where + " GROUP BY client, name, version "
            f"ORDER BY name, version, min(at), client LIMIT ${len(parameters)}", parameters)

    async def refused(self, *, name: str | None = None, version: str | None = None,
                      client: str | None = None, since: datetime | None = None,
                      limit: int = 10_000) -> list[Exposure]:
        where, parameters = _where(name, version, client, since, "last_at")
        parameters.append(limit)
        return await self._exposures(
            "SELECT client, name, version, min(first_at), max(last_at), sum(pulls), "
            "array_agg(DISTINCT 'refused:' || rule), array_agg(DISTINCT integrity) "
            "FROM refusals" + where + " GROUP BY client, name, version "
            f"ORDER BY name, version, min(first_at), client LIMIT ${len(parameters)}",
            parameters)

    async def _exposures(self, query: str, parameters: list[Any]) -> list[Exposure]:
        async def work(db: asyncpg.Connection) -> list[Exposure]:
            return [Exposure(row[0], row[1], row[2], row[3], row[4], int(row[5]),
                             tuple(sorted(row[6])), tuple(sorted(row[7])))
                    for row in await db.fetch(query, *parameters)]
        found: list[Exposure] = await self._call(work)
        return found

    async def refusal_counts(self, now: datetime) -> tuple[int, int]:
        async def work(db: asyncpg.Connection) -> tuple[int, int]:
            row = await db.fetchrow(
                "SELECT count(DISTINCT (name, version)) FILTER (WHERE until_at IS NULL), "
                "count(DISTINCT (name, version)) FILTER (WHERE until_at > $1) FROM refusals",
                now)
            assert row is not None  # an aggregate always answers one row
            return int(row[0]), int(row[1])
        counts: tuple[int, int] = await self._call(work)
        return counts

    async def prune_pulls(self, before: datetime, max_records: int) -> Pruned:
        async def work(db: asyncpg.Connection) -> Pruned:
            async with db.transaction():
                by_age = _deleted(await db.execute("DELETE FROM pulls WHERE at < $1", before))
                by_age += _deleted(await db.execute("DELETE FROM refusals WHERE last_at < $1",
                                                    before))
                refusals = int(await db.fetchval("SELECT count(*) FROM refusals"))
                served = int(await db.fetchval("SELECT count(*) FROM pulls"))
                over = refusals + served - max_records
                by_size = 0
                if over > 0:  # refusals first: no flood of them pushes a served pull out
                    by_size = _deleted(await db.execute(
                        "DELETE FROM refusals WHERE ctid IN (SELECT ctid FROM refusals "
                        "ORDER BY hour LIMIT $1)", over))
                    if over > by_size:
                        by_size += _deleted(await db.execute(
                            "DELETE FROM pulls WHERE id IN (SELECT id FROM pulls ORDER BY id "
                            "LIMIT $1)", over - by_size))
            return Pruned(by_age, by_size, refusals + served - by_size)
        pruned: Pruned = await self._call(work)
        return pruned

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def _where(name: str | None, version: str | None, client: str | None,
           since: datetime | None, time_column: str, *, until: datetime | None = None,
           identity: Mapping[str, str] | None = None) -> tuple[str, list[Any]]:
    """The WHERE clause of a pull log read and its parameters (`since` included, `until` not;
    `identity` on the served pulls only): the column names are this module's own
    (`identity_filters` admits no other), every value a parameter."""
    where: list[str] = []
    parameters: list[Any] = []
    for column, sign, value in (("name", "=", name), ("version", "=", version),
                                ("client", "=", client), (time_column, ">=", since),
                                (time_column, "<", until),
                                *((c, "=", v) for c, v in identity_filters(identity))):
        if value is not None:
            parameters.append(value)
            where.append(f"{column} {sign} ${len(parameters)}")
    return (" WHERE " + " AND ".join(where) if where else ""), parameters


def _deleted(status: str) -> int:
    return int(status.split()[-1])  # "DELETE 12"


async def read_schema(url: str) -> int:
    """The schema version of the store at `url`, read only (0: not created yet)."""
    store = PostgresStore(url)

    async def work(db: asyncpg.Connection) -> int:
        if await db.fetchval("SELECT to_regclass('schema_version')") is None:
            return 0
        return int(await db.fetchval("SELECT coalesce(max(version), 0) FROM schema_version"))
    try:
        found: int = await store._call(work)
    finally:
        await store.close()
    return found


async def open_postgres(url: str, *, refuse_empty: str | None = None) -> PostgresStore:
    """The store at `url`, migrated; raises StoreUnavailableError or StoreSetupError
    (MigrationError, or `refuse_empty` for an empty store)."""
    store = PostgresStore(url)
    try:
        await store.migrate(refuse_empty=refuse_empty)
    except BaseException:
        await store.close()
        raise
    return store
