"""Row 31 of the faults table: a flood of what may be lost while the store takes no writes.

> | 31 | the state store (PostgreSQL) stops taking writes; a withdrawal is learned, then 10,050
> first pulls of new names each add two writes that may be lost (a name installed, the
> release's verdict) | the withdrawal survives the flood, the store's return and a restart with
> the public registry down: the mirrored copy stays refused (403); only names installed and
> verdicts are dropped (10,100, counted) |

The attack: push a takedown out of the write buffer by pulling new names (the cheapest request
there is), so that the next restart during a public outage serves the withdrawn version from the
mirror again. The real `mirrorgate serve` on a real PostgreSQL, the public registry generated
(`BulkRegistry`: `bulk-000` lists 1.0.0 alone, the mirror holds 1.0.0 and 1.0.1), a mirror target
that never answers (no job is mirrored; the queue is not under test).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest

from tests.faults.bulk_registry import BulkRegistry
from tests.faults.guarded import GuardedFactory
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.threaded import ThreadedApp

GONE = "bulk-000"
FLOOD = 10_050
"""First pulls of new names: 50 more than the buffer of writes that may be lost holds."""
BUFFER = 10_000
WRITES_PER_PULL = 2
"""A name installed and the release's verdict: the default reads every first pull (issue 55),
and a verdict lost is a release judged again, never one admitted unread."""
CONNECTIONS = 16


@pytest.fixture
def bulk() -> Iterator[BulkRegistry]:
    with serving(BulkRegistry(FLOOD + 1, 1), "the bulk registry") as registry:
        yield registry


@pytest.fixture
def mirror() -> Iterator[FixtureRegistry]:
    """The private registry: `bulk-000` 1.0.0 and 1.0.1 mirrored before (marked)."""
    with FixtureRegistry(make_package(GONE, [make_version(GONE, "1.0.0").marked(),
                                             make_version(GONE, "1.0.1").marked()])) as served:
        yield served


async def first_pulls(base: str, names: list[str], statuses: Counter[int]) -> None:
    pending = iter(names)
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def client() -> None:
            for name in pending:
                async with session.get(f"{base}{name}/-/{name}-1.0.0.tgz") as response:
                    await response.read()
                statuses[response.status] += 1

        await asyncio.gather(*(client() for _ in range(CONNECTIONS)))


def start(guarded: GuardedFactory, public: str, mirror: FixtureRegistry, target: ThreadedApp,
          database: str) -> MirrorgateProcess:
    return guarded("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public, "MIRRORGATE_PRIVATE_UPSTREAM": mirror.url,
        "MIRRORGATE_MIRROR_TARGET": target.url, "MIRRORGATE_DATABASE_URL": database,
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_DRAIN_TIMEOUT": "1"})


def tarball_status(proxy: MirrorgateProcess, version: str) -> int:
    return proxy.get(f"npm/{GONE}/-/{GONE}-{version}.tgz").status


async def test_a_flood_of_first_pulls_never_pushes_a_withdrawal_out_of_the_write_buffer(
        guarded: GuardedFactory, bulk: BulkRegistry, mirror: FixtureRegistry,
        hanging_target: ThreadedApp, postgres_server: PostgresServer) -> None:
    database = await postgres_server.new_database()
    proxy = start(guarded, bulk.url, mirror, hanging_target, database)
    postgres_server.stop()
    try:
        wait_for(lambda: proxy.metric("mirrorgate_store_reachable") == 0, timeout=15,
                 message="the proxy to find the store gone")
        assert tarball_status(proxy, "1.0.1") == 403  # the takedown, learned now
        statuses: Counter[int] = Counter()
        await first_pulls(proxy.registry_url, bulk.names[1:], statuses)
        assert statuses == {200: FLOOD}
        assert proxy.metric("mirrorgate_store_pending_kept_writes") == 1
        assert proxy.metric("mirrorgate_store_pending_writes") == BUFFER + 1
    finally:
        postgres_server.start()
    wait_for(lambda: proxy.metric("mirrorgate_store_pending_writes") == 0, timeout=60,
             message="the waiting writes to reach the store")
    assert proxy.metric("mirrorgate_store_writes_dropped_total") == FLOOD * WRITES_PER_PULL - BUFFER
    assert proxy.events("store_writes_dropped")[0]["dropped"] == 1
    assert proxy.terminate() == 0

    bulk.stop()  # the public registry goes down, and the proxy starts again
    again = start(guarded, bulk.url, mirror, hanging_target, database)
    refused = again.get(f"npm/{GONE}/-/{GONE}-1.0.1.tgz")
    assert refused.status == 403, refused.body[:300]
    assert "public-withdrawn" in refused.body.decode()
    # the control: what nobody withdrew is served from the mirror, public down
    assert tarball_status(again, "1.0.0") == 200
