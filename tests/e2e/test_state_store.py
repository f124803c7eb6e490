"""Two `mirrorgate serve` processes on one PostgreSQL agree on what either learned, a restart
forgets nothing, and a store that is lost or late is a clear fault, never a wrong answer
(docs/state-store.md).

The attacks: an impostor publishing the organisation's name on the public registry, waiting
for the private registry to fail on the one replica that never filled the name; and a version
the public registry took down, brought back by the replica that did not see the takedown. The
private upstream is a fixture registry here (it can fail on demand), holding an unmarked
(first-party) `acme-widget` and the mirrored (marked) copies of `takedown-pkg`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PASSWORD, PostgresServer
from tests.servers.processes import MirrorgateProcess, wait_for

OURS = make_version("acme-widget", "1.0.0", description="ours")
IMPOSTOR = make_version("acme-widget", "9.9.9", description="someone else's")
V100 = make_version("takedown-pkg", "1.0.0")
V101 = make_version("takedown-pkg", "1.0.1")


@pytest.fixture
def private_registry() -> Iterator[FixtureRegistry]:
    with FixtureRegistry(make_package("acme-widget", [OURS]),
                         make_package("takedown-pkg", [V100.marked(), V101.marked()])) as served:
        yield served


def replica(mirrorgate: MirrorgateFactory, public: FixtureRegistry, private: FixtureRegistry,
            database: str, data: Path, *, ready: bool = True) -> MirrorgateProcess:
    """One replica of a fleet: its own data directory (no shared volume), one database."""
    return mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": private.url,
        "MIRRORGATE_DATABASE_URL": database, "MIRRORGATE_DATA_DIR": str(data),
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_METRICS_OPEN": "true"}, ready=ready)


def versions(proxy: MirrorgateProcess, name: str) -> list[str]:
    return sorted(proxy.get(f"npm/{name}").json()["versions"])


def test_a_first_party_name_learned_by_one_replica_is_refused_from_public_by_the_other(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    public_registry.add(make_package("acme-widget", [IMPOSTOR]))
    database = postgres_server.new_database_now()
    one = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "one")
    other = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "two")

    assert versions(one, "acme-widget") == ["1.0.0"]  # learned: first-party
    learned = time.monotonic()
    private_registry.fault("/", Fault(status=503))  # the private registry fails everywhere
    time.sleep(max(0.0, learned + 1.0 - time.monotonic()))  # one second, and not a poll more
    refused = other.get("npm/acme-widget")

    assert refused.status == 503, refused.body[:300]
    assert "acme-widget is first-party" in refused.json()["error"]
    assert not any(seen.path.startswith("/acme-widget/-/") for seen in public_registry.requests)


def test_a_withdrawal_seen_by_one_replica_is_enforced_by_the_other(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    database = postgres_server.new_database_now()
    one = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "one")
    other = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "two")
    assert versions(other, "takedown-pkg") == ["1.0.0", "1.0.1"]

    public_registry.add(make_package("takedown-pkg", [V100]))  # npm takes 1.0.1 down
    wait_for(lambda: versions(one, "takedown-pkg") == ["1.0.0"], timeout=10,
             message="the first replica to see the withdrawal")
    public_registry.fault("/", Fault(status=503))  # and the public registry fails right after
    time.sleep(1.5)  # the other replica's cached packument (TTL 1 s) is due again

    document = other.get("npm/takedown-pkg").json()
    tarball = other.get("npm/takedown-pkg/-/takedown-pkg-1.0.1.tgz")
    assert sorted(document["versions"]) == ["1.0.0"]
    assert document["policyRestrictions"]["denials"]["1.0.1"]["rule"] == "public-withdrawn"
    assert tarball.status == 403
    assert "public-withdrawn" in tarball.body.decode()


def test_a_restart_forgets_nothing(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    public_registry.add(make_package("acme-widget", [IMPOSTOR]),
                        make_package("takedown-pkg", [V100]))
    database = postgres_server.new_database_now()
    before = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "a")
    assert versions(before, "acme-widget") == ["1.0.0"]
    assert versions(before, "takedown-pkg") == ["1.0.0"]  # 1.0.1 seen withdrawn
    assert before.terminate() == 0

    public_registry.fault("/", Fault(status=503))
    private_registry.fault("/acme-widget", Fault(status=503))
    after = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "b")

    assert after.get("npm/acme-widget").status == 503
    assert versions(after, "takedown-pkg") == ["1.0.0"]
    assert after.get("npm/takedown-pkg/-/takedown-pkg-1.0.1.tgz").status == 403


def test_the_first_start_on_postgresql_imports_every_fact_of_the_files_before_it(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # the files a release before the store wrote (append-only: a later line wins)
    (data / "first-party-names").write_text("+acme-widget\n+@acme/tools\n+gone\n-gone\n")
    (data / "withdrawn-versions").write_text(
        "+takedown-pkg@1.0.1\t2026-11-30T08:00:00.000Z\n+takedown-pkg@0.9.0\t2026-11-01T00:00:00Z\n"
        "-takedown-pkg@0.9.0\n")
    (data / "installed-names").write_text("+left-pad\t4\n+chalk\t1\n+chalk\t2\n")
    database = postgres_server.new_database_now()

    first = replica(mirrorgate, public_registry, private_registry, database, data)
    assert [e["facts"] for e in first.events("store_imported")] == [5]
    assert first.terminate() == 0
    again = replica(mirrorgate, public_registry, private_registry, database, data)
    assert again.terminate() == 0

    assert again.events("store_imported") == []  # once, at the first start only
    assert asyncio.run(_facts(database)) == {
        ("first-party", "acme-widget"): "", ("first-party", "@acme/tools"): "",
        ("withdrawn", "takedown-pkg@1.0.1"): "2026-11-30T08:00:00.000Z",
        ("installed", "left-pad"): "4", ("installed", "chalk"): "2"}


def test_a_store_unreachable_at_start_up_fails_readyz_with_the_reason_until_it_answers(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    database = postgres_server.new_database_now()
    postgres_server.stop()
    try:
        proxy = replica(mirrorgate, public_registry, private_registry, database,
                        tmp_path / "data", ready=False)
        wait_for(lambda: _answers(proxy, "livez"), timeout=15, message="the listener")
        not_ready = proxy.get("readyz")
        assert proxy.get("livez").status == 200
        assert not_ready.status == 503
        assert "the state store is not loaded" in not_ready.json()["reason"]
        assert "**redacted**" in not_ready.json()["reason"]
        assert PASSWORD not in not_ready.body.decode() + proxy.stderr()
        assert proxy.events("store_unreachable")
        assert proxy.metric("mirrorgate_store_reachable") == 0
    finally:
        postgres_server.start()
    proxy.wait_ready(timeout=15)
    assert proxy.metric("mirrorgate_store_reachable") == 1


def test_a_store_lost_while_running_serves_from_memory_and_writes_what_waited_when_back(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    database = postgres_server.new_database_now()
    proxy = replica(mirrorgate, public_registry, private_registry, database, tmp_path / "data")
    assert versions(proxy, "takedown-pkg") == ["1.0.0", "1.0.1"]

    postgres_server.stop()
    try:
        wait_for(lambda: bool(proxy.events("store_unreachable")), timeout=10,
                 message="the proxy to notice the store is gone")
        public_registry.add(make_package("takedown-pkg", [V100]))  # learned while it is gone
        wait_for(lambda: versions(proxy, "acme-widget") == ["1.0.0"]
                 and versions(proxy, "takedown-pkg") == ["1.0.0"], timeout=10,
                 message="the proxy to learn both facts from its upstreams")
        assert proxy.metric("mirrorgate_store_pending_writes") >= 2
        assert proxy.get("readyz").status == 200  # serving from memory
        assert proxy.get("livez").status == 200
    finally:
        postgres_server.start()
    wait_for(lambda: bool(proxy.events("store_recovered"))
             and proxy.metric("mirrorgate_store_pending_writes") == 0, timeout=15,
             message="the waiting writes to be flushed")
    facts = asyncio.run(_facts(database))
    assert facts[("first-party", "acme-widget")] == ""
    assert ("withdrawn", "takedown-pkg@1.0.1") in facts


def _answers(proxy: MirrorgateProcess, path: str) -> bool:
    try:
        return proxy.get(path, timeout=1).status == 200
    except OSError:
        return False


async def _facts(database: str) -> dict[tuple[str, str], str]:
    connection = await asyncpg.connect(database)
    try:
        rows = await connection.fetch("SELECT kind, key, value FROM facts "
                                      "WHERE value IS NOT NULL AND kind <> 'meta'")
    finally:
        await connection.close()
    return {(row["kind"], row["key"]): row["value"] for row in rows}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_emptied_store_is_refused_at_start_up_and_starting_afresh_is_a_deliberate_step(
        kind: str, mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        private_registry: FixtureRegistry, postgres_server: PostgresServer,
        tmp_path: Path) -> None:
    """The fault: the store is emptied behind the process's back (a 0-byte state.sqlite3 from
    a restore gone wrong; the database dropped and created again), then the process restarts
    while the public registry is down. Taken for a first start, it would serve the withdrawn
    version from the mirror again."""
    public_registry.add(make_package("takedown-pkg", [V100]))
    data = tmp_path / "data"
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": private_registry.url, "MIRRORGATE_DATA_DIR": str(data)}
    database = postgres_server.new_database_now() if kind == "postgresql" else None
    if database is not None:
        env["MIRRORGATE_DATABASE_URL"] = database
    before = mirrorgate("serve", env)
    assert versions(before, "takedown-pkg") == ["1.0.0"]  # 1.0.1 seen withdrawn
    assert before.terminate() == 0

    if database is None:
        (data / "state.sqlite3").write_bytes(b"")
        for leftover in ("state.sqlite3-wal", "state.sqlite3-shm"):
            (data / leftover).unlink(missing_ok=True)
    else:
        asyncio.run(_recreate(postgres_server, database))
    public_registry.fault("/", Fault(status=503))
    refused = mirrorgate("serve", env, ready=False)

    assert refused.wait(timeout=30) == 2
    [event] = refused.events("startup_refused")
    assert "is empty, but this data directory" in event["reason"]
    assert f"delete {data / 'state-store.held'}" in event["reason"]
    assert PASSWORD not in refused.stderr()
    # the control, and the documented way to start afresh on purpose
    (data / "state-store.held").unlink()
    afresh = mirrorgate("serve", env)
    assert afresh.get("readyz").status == 200
    assert (data / "state-store.held").exists()  # held from here on
    assert afresh.terminate() == 0


async def _recreate(server: PostgresServer, database: str) -> None:
    name = database.rsplit("/", 1)[1]
    connection = await asyncpg.connect(server.url())
    try:
        await connection.execute(f'DROP DATABASE "{name}"')
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
