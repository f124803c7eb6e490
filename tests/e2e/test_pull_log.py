"""The pull log survives a `kill -9` of `mirrorgate serve` but for its last second.

On SQLite and on PostgreSQL. The pull log is written off the request path, a batch a second
(`gate.pulls.log`): a proxy killed in the middle of a CI burst must still be able to say who
pulled what up to a second before it died, since that record is what an incident response asks
for days later (docs/exposure.md). Every pull here carries its own request id, so each record
is matched to the answer it stands for.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mirrorgate.store import Exposure, Pull, Store
from mirrorgate.store.postgres import open_postgres
from mirrorgate.store.sqlite import FILENAME, open_sqlite
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, http_request

VERSIONS = [make_version("burst-pkg", f"1.0.{n}", size=40_000) for n in range(5)]
YOUNG = make_version("burst-pkg", "2.0.0", published=datetime.now(UTC))
"""Held back by the default minimum-age rule: its pull is refused, and logged as such."""
LOSS_BOUND = 1.25
"""The flush period (1 s) and a write's own time on a busy shared machine."""


def database_for(kind: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database for `kind` "postgresql"; None (the SQLite file) otherwise."""
    if kind != "postgresql":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database_now()


def serve(mirrorgate: MirrorgateFactory, public: FixtureRegistry, private: FixtureRegistry,
          data: Path, database: str | None, **env: str) -> MirrorgateProcess:
    return mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": private.url,
        "MIRRORGATE_DATA_DIR": str(data),
        **({"MIRRORGATE_DATABASE_URL": database} if database is not None else {}), **env})


async def opened(data: Path, database: str | None) -> Store:
    return (await open_postgres(database) if database is not None
            else await open_sqlite(data / FILENAME))


def read_pulls(data: Path, database: str | None) -> list[Pull]:
    async def read() -> list[Pull]:
        store = await opened(data, database)
        try:
            return await store.pulls(limit=100_000)
        finally:
            await store.close()
    return asyncio.run(read())


def read_refusals(data: Path, database: str | None) -> list[Exposure]:
    async def read() -> list[Exposure]:
        store = await opened(data, database)
        try:
            return await store.refused(limit=100_000)
        finally:
            await store.close()
    return asyncio.run(read())


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_kill_9_during_a_burst_of_pulls_loses_at_most_the_last_second(
        kind: str, mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    public_registry.add(make_package("burst-pkg", [*VERSIONS, YOUNG]))
    database = database_for(kind, request)
    with FixtureRegistry() as private:
        data = tmp_path / "data"
        proxy = serve(mirrorgate, public_registry, private, data, database)
        refused = proxy.get("npm/burst-pkg/-/burst-pkg-2.0.0.tgz",
                            headers={"X-Request-Id": "young"})
        assert refused.status == 403
        head = http_request("HEAD", proxy.url + "npm/burst-pkg/-/burst-pkg-1.0.0.tgz",
                            headers={"X-Request-Id": "head"})
        assert head.status == 200
        answered: dict[str, float] = {}  # request id -> when its answer was whole
        n = 0
        start = time.monotonic()
        while time.monotonic() - start < 3.0:
            version = VERSIONS[n % len(VERSIONS)].version
            request_id = f"burst-{n}"
            reply = proxy.get(f"npm/burst-pkg/-/burst-pkg-{version}.tgz",
                              headers={"X-Request-Id": request_id})
            assert reply.status == 200, reply.body[:300]
            answered[request_id] = time.monotonic()
            n += 1
        proxy.kill()  # SIGKILL: no drain, no last write
        killed = time.monotonic()

    kept = {pull.request_id: pull for pull in read_pulls(data, database)}
    old_enough = [rid for rid, at in answered.items() if at < killed - LOSS_BOUND]
    lost = [rid for rid in old_enough if rid not in kept]
    assert len(answered) > 20, "the burst was too slow to mean anything"
    assert old_enough
    assert not lost, f"{len(lost)} of {len(old_enough)} pulls lost: {lost[:5]}"
    [young] = read_refusals(data, database)  # the refusal, counted apart
    assert (young.version, young.sources, young.pulls) == ("2.0.0", ("refused:minimum-age",), 1)
    assert "head" not in kept  # a HEAD is not a pull
    assert set(kept) <= set(answered)  # nothing made up
    first = kept["burst-0"]
    assert (first.client, first.name, first.version, first.source) == (
        "anonymous", "burst-pkg", "1.0.0", "public")
    assert first.integrity == VERSIONS[0].integrity


NUL_INTEGRITY = "sha512-" + "A" * 43 + "\x00" + "B" * 42 + "=="
HOSTILE = make_version("burst-pkg", "3.0.0", digests="none",
                       dist={"integrity": NUL_INTEGRITY})
"""A version whose `dist.integrity` holds a NUL, which PostgreSQL's text cannot hold: refused
(no digest mirrorgate can read), and logged with that integrity, as every refusal is."""


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_nul_in_an_integrity_neither_stops_the_pull_log_nor_loses_the_pulls_after_it(
        kind: str, mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # the attack: one request for a version a public packument gave a NUL in its integrity;
    # before, PostgreSQL refused the batch, the writer's task died unwatched, and no later
    # pull was ever logged (`mirrorgate exposure` then answered "no client pulled")
    public_registry.add(make_package("burst-pkg", [*VERSIONS, HOSTILE]))
    database = database_for(kind, request)
    data = tmp_path / "data"
    with FixtureRegistry() as private:
        proxy = serve(mirrorgate, public_registry, private, data, database,
                      MIRRORGATE_METRICS_OPEN="true")
        refused = proxy.get("npm/burst-pkg/-/burst-pkg-3.0.0.tgz",
                            headers={"X-Request-Id": "hostile"})
        assert refused.status == 403
        for n, version in enumerate(VERSIONS):  # in the same batch, and in batches after it
            assert proxy.get(f"npm/burst-pkg/-/burst-pkg-{version.version}.tgz",
                             headers={"X-Request-Id": f"after-{n}"}).status == 200
            time.sleep(0.6)
        wanted = {f"after-{n}" for n in range(len(VERSIONS))}
        deadline = time.monotonic() + 10
        while not wanted <= {p.request_id for p in read_pulls(data, database)}:
            assert time.monotonic() < deadline, "the pulls after the hostile one were not logged"
            time.sleep(0.2)
        assert proxy.get("readyz").status == 200
        assert proxy.metric("mirrorgate_task_restarts_total") == 0  # nothing died
        assert proxy.metric("mirrorgate_pulls_logged_total", outcome="unwritable") == 0
        [hostile] = [r for r in read_refusals(data, database) if r.version == "3.0.0"]
    # the defined form: SQLite keeps the NUL as it came; PostgreSQL's text cannot, so the
    # record is written with it escaped as Python prints it, and counted
    assert hostile.integrity == (NUL_INTEGRITY if kind == "sqlite"
                                 else NUL_INTEGRITY.replace("\x00", "\\x00"),)
    assert len(proxy.events("pull_log_record_escaped")) == (1 if kind == "postgresql" else 0)


BOUND = 1_000
"""MIRRORGATE_PULL_LOG_MAX_RECORDS here, its least: the served pulls below pass it."""


def counts(data: Path, database: str | None) -> tuple[int, int]:
    """(served pulls, refusal counts) the store holds."""
    async def read() -> tuple[int, int]:
        store = await opened(data, database)
        try:  # a prune that takes nothing (no record so old, no bound so low) counts them
            pruned = await store.prune_pulls(datetime(2000, 1, 1, tzinfo=UTC), 10**9)
            return len(await store.pulls(limit=10**6)), pruned.kept - len(
                await store.pulls(limit=10**6))
        finally:
            await store.close()
    return asyncio.run(read())


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_loop_of_refused_pulls_costs_a_row_an_hour_and_the_log_keeps_within_its_bound(
        kind: str, mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # the attack: one client repeating the cheapest request, a refused pull, as fast as it
    # can; before, a row each (1,100 to 2,400 a second, 29 to 56 GiB a day, kept 90 days).
    # Then served pulls past the bound: the oldest go, the newest stay
    public_registry.add(make_package("burst-pkg", [*VERSIONS, YOUNG]))
    database = database_for(kind, request)
    data = tmp_path / "data"
    with FixtureRegistry() as private:
        proxy = serve(mirrorgate, public_registry, private, data, database,
                      MIRRORGATE_METRICS_OPEN="true",
                      MIRRORGATE_PULL_LOG_MAX_RECORDS=str(BOUND))
        looped = 0
        start = time.monotonic()
        while time.monotonic() - start < 3.0:
            refused = proxy.get("npm/burst-pkg/-/burst-pkg-2.0.0.tgz")
            assert refused.status == 403
            looped += 1
        time.sleep(1.5)
        served, refusal_rows = counts(data, database)
        assert served == 0
        assert refusal_rows in (1, 2)  # a row an hour: two if the loop crossed an hour
        [young] = read_refusals(data, database)
        assert young.pulls == looped > 100

        for n in range(int(BOUND * 1.5)):
            reply = proxy.get(f"npm/burst-pkg/-/burst-pkg-1.0.{n % len(VERSIONS)}.tgz",
                              headers={"X-Request-Id": f"served-{n}"})
            assert reply.status == 200
        time.sleep(1.5)
        served, refusal_rows = counts(data, database)
        assert served + refusal_rows <= BOUND + BOUND // 10  # pruned every tenth written
        assert refusal_rows == 0  # refusal counts go first
        kept = {pull.request_id for pull in read_pulls(data, database)}
        assert f"served-{int(BOUND * 1.5) - 1}" in kept  # the newest stay
        assert "served-0" not in kept  # the oldest went
        # all past the bound, but what came after the last prune (under a tenth of it)
        assert proxy.metric("mirrorgate_pull_log_pruned_total", reason="size") \
            >= int(BOUND * 1.5) + 1 - BOUND - BOUND // 10
        assert 0 < proxy.metric("mirrorgate_pull_log_records") <= BOUND
        assert proxy.events("pull_log_full")
