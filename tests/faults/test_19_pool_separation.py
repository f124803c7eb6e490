"""Row 19 of the faults table: every tarball connection held, a packument fill still goes through.

> | 19 | every serve-path tarball connection to the public upstream held | a cold packument is
> filled and served at once; the held streams finish; nothing times out |

The real `mirrorgate serve` with `MIRRORGATE_POOL_TARBALLS=4` over the fixture public registry,
whose tarballs answer only after a delay: four downloads hold the public upstream's four tarball
connections while a cold packument (a fill, on its own pool) is asked for. With one shared pool,
as before, the fill would wait behind the tarballs for a connection.
"""

from __future__ import annotations

import threading
import time

from tests.faults.guarded import GuardedFactory
from tests.faults.transfers import Transfer, fetch
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import http_request, wait_for

POOL = 4
HOLD = 4.0


def test_with_every_tarball_connection_held_a_cold_packument_is_filled_at_once(
    guarded: GuardedFactory, public_registry: FixtureRegistry,
) -> None:
    versions = [f"1.0.{i}" for i in range(POOL)]
    public_registry.add(make_package("held", versions), make_package("cold"))
    for version in versions:
        public_registry.fault(tarball_path("held", version), Fault(delay=HOLD), exact=True)
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_POOL_TARBALLS": str(POOL)})
    assert http_request("GET", proxy.registry_url + "held").status == 200  # gate data cached

    results: list[Transfer] = []
    downloads = [threading.Thread(
        target=lambda url: results.append(fetch(url, timeout=30)), daemon=True,
        args=(proxy.url.rstrip("/") + "/npm" + tarball_path("held", version),))
        for version in versions]
    for thread in downloads:
        thread.start()
    wait_for(lambda: proxy.metric("mirrorgate_upstream_in_flight", upstream="public",
                                  pool="tarballs") == POOL, timeout=10,
             message="every tarball connection to be held")

    started = time.monotonic()
    reply = http_request("GET", proxy.registry_url + "cold", timeout=30)
    filled_in = time.monotonic() - started
    still_held = proxy.metric("mirrorgate_upstream_in_flight", upstream="public",
                              pool="tarballs")
    for thread in downloads:
        thread.join(30)

    assert reply.status == 200
    assert reply.json()["name"] == "cold"
    assert still_held == POOL, "the tarballs let go before the fill was measured"
    assert filled_in < HOLD / 2, f"the fill waited {filled_in:.1f} s behind the tarballs"
    assert sorted(transfer.status for transfer in results) == [200] * POOL
    assert not any(transfer.cut_short for transfer in results)
    assert proxy.metric("mirrorgate_upstream_failures_total") == 0
