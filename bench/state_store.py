"""The state store's two choices, measured: how SQLite is kept off the event loop, and how a
fleet's replicas learn what another wrote (LISTEN/NOTIFY or a bounded poll).

Run by hand from the repository root: `.venv/bin/python -m bench.state_store`. It starts a
throwaway PostgreSQL as the tests do (`tests.servers.postgres_server`), then measures:

- SQLite (WAL, synchronous=FULL), one fact a transaction and the `changes` read, through
  `store.sqlite.SqliteStore` (sqlite3 on one thread of its own) and through aiosqlite;
- PostgreSQL: the time from a write's commit to another connection hearing it, by NOTIFY and by
  polling `changes` every `--poll` seconds, and what one empty poll costs.
Figures: docs/state-store.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import aiosqlite
import asyncpg
from tests.servers.postgres_server import PostgresServer, find_postgres_bin

from mirrorgate.store import FIRST_PARTY, Fact
from mirrorgate.store.postgres import open_postgres
from mirrorgate.store.sqlite import open_sqlite


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    return (f"median {statistics.median(ordered) * 1000:.3f} ms, "
            f"p99 {ordered[int(len(ordered) * 0.99) - 1] * 1000:.3f} ms")


async def sqlite_thread(path: Path, count: int) -> tuple[list[float], list[float]]:
    store = await open_sqlite(path)
    writes, reads = [], []
    for number in range(count):
        started = time.perf_counter()
        await store.put_facts([Fact(FIRST_PARTY, f"name-{number}", "")])
        writes.append(time.perf_counter() - started)
    for _ in range(count):
        started = time.perf_counter()
        await store.changes(count - 10)
        reads.append(time.perf_counter() - started)
    await store.close()
    return writes, reads


async def sqlite_aio(path: Path, count: int) -> tuple[list[float], list[float]]:
    await (await open_sqlite(path)).close()  # the same schema
    writes, reads = [], []
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=FULL")
        for number in range(count):
            started = time.perf_counter()
            await db.execute("BEGIN IMMEDIATE")
            cursor = await db.execute("UPDATE change_counter SET value = value + 1 "
                                      "RETURNING value")
            (seq,) = await cursor.fetchone()  # type: ignore[misc]
            await db.execute("INSERT INTO facts (kind, key, value, seq) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, "
                             "seq = excluded.seq", (FIRST_PARTY, f"name-{number}", "", seq))
            await db.execute("COMMIT")
            writes.append(time.perf_counter() - started)
        for _ in range(count):
            started = time.perf_counter()
            await db.execute("BEGIN")
            async with db.execute("SELECT kind, key, value, seq FROM facts WHERE seq > ? "
                                  "ORDER BY seq LIMIT 10000", (count - 10,)) as rows:
                await rows.fetchall()
            async with db.execute("SELECT name FROM verdicts WHERE seq > ? ORDER BY seq "
                                  "LIMIT 10000", (count - 10,)) as rows:
                await rows.fetchall()
            await db.execute("COMMIT")
            reads.append(time.perf_counter() - started)
    return writes, reads


async def notify_latency(url: str, count: int) -> list[float]:
    listener = await asyncpg.connect(url)
    writer = await asyncpg.connect(url)
    heard: asyncio.Queue[float] = asyncio.Queue()
    await listener.add_listener("facts", lambda *_: heard.put_nowait(time.perf_counter()))
    found = []
    for number in range(count):
        async with writer.transaction():
            await writer.execute("INSERT INTO facts VALUES ($1, $2, '', "
                                 "nextval('change_counter'))", FIRST_PARTY, f"n-{number}")
            await writer.execute("NOTIFY facts")
        committed = time.perf_counter()
        found.append(await heard.get() - committed)
    await listener.close()
    await writer.close()
    return found


async def poll_latency(url: str, count: int, every: float) -> tuple[list[float], list[float]]:
    """A reader polling on its own timer (as the gate's follower does), a writer writing at
    moments unrelated to it: commit to seen, and the cost of the polls that found nothing."""
    writer = await open_postgres(url)
    reader = await open_postgres(url)
    committed: dict[str, float] = {}
    found: list[float] = []
    empty: list[float] = []
    done = asyncio.Event()

    async def follow() -> None:
        cursor = (await reader.changes(0)).cursor
        while not done.is_set():
            started = time.perf_counter()
            changes = await reader.changes(cursor)
            now = time.perf_counter()
            if changes.cursor == cursor:
                empty.append(now - started)
            for fact in changes.facts:
                if fact.key in committed:
                    found.append(now - committed[fact.key])
            cursor = changes.cursor
            await asyncio.sleep(every)

    following = asyncio.create_task(follow())
    await asyncio.sleep(every)
    for number in range(count):
        await writer.put_facts([Fact(FIRST_PARTY, f"p-{number}", "")])
        committed[f"p-{number}"] = time.perf_counter()
        await asyncio.sleep(every * 1.37)  # writes land anywhere in a poll's period
    await asyncio.sleep(every * 2)
    done.set()
    await following
    await writer.close()
    await reader.close()
    return found, empty


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--poll", type=float, default=0.25)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        writes, reads = await sqlite_thread(scratch / "thread.sqlite3", args.count)
        print(f"sqlite3 on its own thread: write {_ms(writes)}; changes {_ms(reads)}")
        writes, reads = await sqlite_aio(scratch / "aio.sqlite3", args.count)
        print(f"aiosqlite:                 write {_ms(writes)}; changes {_ms(reads)}")
        bin_dir = find_postgres_bin()
        assert bin_dir is not None, "PostgreSQL is not installed"
        pg_root = Path(tempfile.mkdtemp(prefix="bench-pg-"))  # the server's user owns it
        server = PostgresServer(bin_dir, pg_root)
        server.init()
        server.start()
        try:
            url = await server.new_database()
            await (await open_postgres(url)).close()
            heard = await notify_latency(url, args.count // 4)
            print(f"LISTEN/NOTIFY, commit to heard: {_ms(heard)}")
            seen, empty = await poll_latency(url, args.count // 8, args.poll)
            print(f"poll every {args.poll:g} s, commit to seen: {_ms(seen)}, "
                  f"max {max(seen) * 1000:.0f} ms; one empty poll: {_ms(empty)}")
        finally:
            server.stop()
            shutil.rmtree(pg_root, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
