"""What one replica of a fleet learns reaches every path of every other within a second
(docs/state-store.md#what-the-fleet-guarantees): real `mirrorgate serve` replicas on one
PostgreSQL, real Verdaccio as the private registry, the real npm client.

The attacks: a version the public registry withdrew (mirrored before, so the mirror still
holds it), installed from a lockfile through the replica that did not see the takedown while
the public registry is down; and an impostor's public package under a name the organisation
has just published, kept by the replica that filled the name before the organisation did.
Each replica here keeps the default packument TTL (60 s): what it cached before the fact is
what the fact must reach, not a cache that happens to expire in time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg

from tests.commands.mirrored import run_command
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, Reply, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

V100 = make_version("gone-pkg", "1.0.0")
V101 = make_version("gone-pkg", "1.0.1")
OURS = make_version("acme-gadget", "2.0.0", description="the organisation's own")
IMPOSTOR = make_version("acme-gadget", "1.0.0", description="someone else's, on public")
PLAIN = make_version("plain-pkg", "3.1.0")
"""A public name nobody else claims: served from public before and after."""
FLEET_SECOND = 1.0
"""What the fleet promises: a fact learned by one replica is in force on every other."""


def replica(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
            database: str, data: Path, **env: str) -> MirrorgateProcess:
    """One replica of a fleet: its own data directory (no shared volume), one database."""
    return mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_DATABASE_URL": database,
        "MIRRORGATE_DATA_DIR": str(data), "MIRRORGATE_METRICS_OPEN": "true", **env})


def tarball(proxy: MirrorgateProcess, name: str, version: str) -> Reply:
    return http_request("GET", f"{proxy.registry_url}{name}/-/{name}-{version}.tgz")


def versions(proxy: MirrorgateProcess, name: str) -> list[str]:
    return sorted(http_request("GET", proxy.registry_url + name).json()["versions"])


def denial(proxy: MirrorgateProcess, name: str, version: str) -> str | None:
    document = http_request("GET", proxy.registry_url + name).json()
    found = document.get("policyRestrictions", {}).get("denials", {}).get(version, {})
    rule: str | None = found.get("rule")
    return rule


async def withdrawn(database: str) -> list[str]:
    connection = await asyncpg.connect(database)
    try:
        rows = await connection.fetch("SELECT key FROM facts WHERE kind = 'withdrawn' "
                                      "AND value IS NOT NULL ORDER BY key")
    finally:
        await connection.close()
    return [row["key"] for row in rows]


def test_a_withdrawal_one_replica_learns_is_refused_by_anothers_tarball_route_within_a_second(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        npm_client: NpmClient, postgres_server: PostgresServer, tmp_path: Path) -> None:
    public_registry.add(make_package("gone-pkg", [V100, V101]))
    database = postgres_server.new_database_now()
    # A fills packuments every second (it is the one that sees the takedown); B keeps the
    # default TTL, as a replica under load does
    seer = replica(mirrorgate, public_registry, verdaccio, database, tmp_path / "a",
                   MIRRORGATE_CACHE_TTL="1")
    other = replica(mirrorgate, public_registry, verdaccio, database, tmp_path / "b")
    npm_client.write_project({"gone-pkg": "1.0.0"})
    assert npm_client.install(registry=seer.registry_url).returncode == 0
    npm_client.write_project({"gone-pkg": "1.0.1"})
    assert npm_client.install(registry=seer.registry_url).returncode == 0
    wait_for(lambda: {"1.0.0", "1.0.1"} <= set(verdaccio.versions("gone-pkg")), timeout=60,
             message="the worker to mirror both versions into Verdaccio")
    # B installs the locked version from the mirror: what it gated then is what it holds
    npm_client.clear_cache()
    assert npm_client.ci(registry=other.registry_url).returncode == 0
    assert tarball(other, "gone-pkg", "1.0.1").status == 200

    public_registry.add(make_package("gone-pkg", [V100]))  # npm takes 1.0.1 down
    wait_for(lambda: denial(seer, "gone-pkg", "1.0.1") == "public-withdrawn", timeout=10,
             message="replica A to see the withdrawal")
    learned = time.monotonic()
    public_registry.fault("/", Fault(status=503))  # and the public registry goes silent
    time.sleep(max(0.0, learned + FLEET_SECOND - time.monotonic()))

    answers = [tarball(other, "gone-pkg", "1.0.1") for _ in range(20)]
    assert [answer.status for answer in answers] == [403] * 20, answers[0].body[:300]
    assert "public-withdrawn" in answers[0].body.decode()
    npm_client.clear_cache()
    locked = npm_client.ci(registry=other.registry_url)
    assert locked.returncode != 0
    assert "E403" in locked.stderr
    assert "public-withdrawn" in locked.stderr
    # the operator's command judges the lockfile as the fleet does, public down as well
    checked = run_command(["check", str(npm_client.project / "package-lock.json")], {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_DATABASE_URL": database},
        tmp_path / "operator")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "public-withdrawn" in checked.stdout
    # the control: what nobody withdrew installs through B from the mirror, public down
    npm_client.write_project({"gone-pkg": "1.0.0"})
    (npm_client.project / "package-lock.json").unlink()
    offline = npm_client.install(registry=other.registry_url)
    assert offline.returncode == 0, offline.stderr
    assert npm_client.installed() == {"gone-pkg": "1.0.0"}
    assert other.events("public_withdrawn") == []  # B never saw the takedown itself
    # B judged it again without public: the fleet's memory of the takedown stands
    assert asyncio.run(withdrawn(database)) == ["gone-pkg@1.0.1"]


def test_a_name_one_replica_learns_first_party_is_never_served_from_public_by_another(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    public_registry.add(make_package("acme-gadget", [IMPOSTOR]),
                        make_package("plain-pkg", [PLAIN]))
    database = postgres_server.new_database_now()
    one = replica(mirrorgate, public_registry, verdaccio, database, tmp_path / "a")
    other = replica(mirrorgate, public_registry, verdaccio, database, tmp_path / "b")
    # the name is public's until the organisation publishes it: B serves it so, and keeps it
    assert versions(other, "acme-gadget") == ["1.0.0"]
    assert tarball(other, "plain-pkg", "3.1.0").status == 200

    verdaccio.publish(OURS)
    assert versions(one, "acme-gadget") == ["2.0.0"]  # A learns it first-party
    learned = time.monotonic()
    time.sleep(max(0.0, learned + FLEET_SECOND - time.monotonic()))

    assert versions(other, "acme-gadget") == ["2.0.0"]
    assert tarball(other, "acme-gadget", "1.0.0").status == 404
    assert tarball(other, "acme-gadget", "2.0.0").status == 200
    # the control: a public name nobody claimed is still public's, on B as before
    assert tarball(other, "plain-pkg", "3.1.0").status == 200
