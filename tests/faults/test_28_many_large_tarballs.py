"""Row 28 of the faults table: slow readers of many different large tarballs.

> | 28 | 120 clients reading 120 different 6 MB tarballs one byte a second, beyond what the
> spool may hold, while `npm ci` of a small tree runs | the install completes; each tarball is
> one upstream download; the spooled ones give their upstream connection back once read, the
> rest stream as before; the readers are cut by the rate floor; RSS stays bounded |

The real `mirrorgate serve` with `MIRRORGATE_SPOOL_MAX_BYTES` set to hold half the tarballs
(360 MB, in files under the data directory: the small ones alone are spooled in memory), so
both ways of relaying run at once. The fixture registry serves one incompressible 6 MB body
under 120 names (larger than the socket buffers on loopback, so a reader at a byte a second
blocks the writer). RSS figures printed (pytest -s).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from tests.faults.guarded import GuardedFactory
from tests.faults.memory import MIB, mib, reset_peak, rss
from tests.faults.slow_clients import SlowLoad
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version, standard_tree, tarball_path
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.streamed import streamed_rules

READERS = 120
BLOB = 6_000_000
SPOOLED = READERS // 2


def test_slow_readers_of_many_large_tarballs_stay_within_the_bounds(
    guarded: GuardedFactory, public_registry: FixtureRegistry, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    tree = standard_tree()
    blob = random.Random("28").randbytes(BLOB)  # one body, shared: the registry holds 6 MB
    names = [f"large-{index:03d}" for index in range(READERS)]
    public_registry.add(*tree.packages, *(
        make_package(name, [make_version(name, "1.0.0", tarball=blob)]) for name in names))
    npm_client.write_project(tree.dependencies)
    assert npm_client.run("install", "--package-lock-only",
                          registry=public_registry.url).returncode == 0
    # the release signals off: the body is one random blob, no tarball, which the default's
    # reading would refuse as unreadable (a 403 small enough to sit in the socket buffers,
    # never cut by the rate floor); the relay's bounds are what is measured here, the reading's
    # are row 33's
    proxy: MirrorgateProcess = guarded("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_SPOOL_MAX_BYTES": str(SPOOLED * BLOB),
        "MIRRORGATE_SEND_MIN_RATE_GRACE": "5",
        "MIRRORGATE_RULES_FILE": streamed_rules(tmp_path / "rules")})
    start = rss(proxy.pid)
    reset_peak(proxy.pid)
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)
    paths = ["/npm" + tarball_path(name, "1.0.0") for name in names]
    load = SlowLoad(host, int(port), paths[0], READERS, 0, deadline=60, paths=paths).start()
    wait_for(lambda: sum("/-/large-" in seen.path for seen in public_registry.requests)
             == READERS, timeout=30, message="every reader's download to start")
    # the spooled downloads are read whole: only the streamed ones hold a connection
    wait_for(lambda: proxy.metric("mirrorgate_upstream_in_flight", pool="tarballs")
             <= READERS - SPOOLED, timeout=30, message="the spooled downloads to be read")

    started = time.monotonic()
    npm_client.clear_cache()
    done = npm_client.ci(registry=proxy.registry_url, timeout=90)
    installed_in = time.monotonic() - started
    load.join(90)
    peak = rss(proxy.pid).peak

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == tree.resolved
    assert sum("/-/large-" in seen.path for seen in public_registry.requests) == READERS
    assert len(load.reader_endings) == READERS
    assert {ending.kind for ending in load.reader_endings} <= {"reset", "closed"}
    assert proxy.metric("mirrorgate_slow_clients_total", reason="min_rate") == READERS
    wait_for(lambda: proxy.metric("mirrorgate_upstream_in_flight", pool="tarballs") == 0,
             timeout=10, message="every tarball connection back in its pool")
    print(f"\nrow 28: npm ci {installed_in:.1f} s beside {READERS} slow readers of "
          f"{READERS} x {BLOB / 1e6:.0f} MB; RSS start {mib(start.current)}, peak {mib(peak)}")
    assert peak - start.current < 150 * MIB, f"RSS grew from {mib(start.current)} to {mib(peak)}"
