"""Row 27 of the faults table: slow readers and half-sent heads, then a build with retries off.

> | 27 | 120 clients reading a 40 MB tarball one byte a second and 120 connections holding half
> a request head, then a cold `npm ci` of a 106-package project with npm's retries off | the
> install completes in at most 1.5x the time it takes with no one else attached; the 120
> readers share one upstream download; nothing is shed; the readers are cut by the rate floor |

The attack and the build of the try-out that filed this row: the slow readers used to hold
every tarball slot until the write-stall timeout cut them 30 s later, and a tarball request
shed after waiting 1 s, so `npm ci --fetch-retries=0` failed with E503. Now the readers read a
spool that one download filled (its slot given back when the upstream body was read), and a
tarball request waits `overload.TARBALL_WAIT` for a slot. The real `mirrorgate serve` on its
defaults, the real npm client, the fixture public registry; the quiet install runs first, on
a proxy of its own, so both are cold. Figures printed (pytest -s).
"""

from __future__ import annotations

import random
import time

from tests.faults.guarded import GuardedFactory
from tests.faults.slow_clients import SlowLoad
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, tarball_path, wide_tree
from tests.servers.processes import MirrorgateProcess, wait_for

READERS = 120
HALF_HEADS = 120
PACKAGES = 106
BLOB = 40_000_000
GRACE = 5.0  # MIRRORGATE_SEND_MIN_RATE_GRACE, short so the row ends soon after the install


def start(guarded: GuardedFactory, public: FixtureRegistry) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_SEND_MIN_RATE_GRACE": str(GRACE)})


def cold_ci(npm: NpmClient, proxy: MirrorgateProcess) -> float:
    npm.clear_cache()
    started = time.monotonic()
    done = npm.ci(registry=proxy.registry_url, timeout=120)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started


def test_slow_readers_never_turn_away_a_build_with_retries_off(
    guarded: GuardedFactory, public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    tree = wide_tree(PACKAGES)
    heavy = make_package("heavy", ["1.0.0"], files={
        "index.js": b"module.exports = 1;\n", "blob.bin": random.Random("27").randbytes(BLOB)})
    public_registry.add(*tree.packages, heavy)
    npm_client.write_project(tree.dependencies)
    locked = npm_client.run("install", "--package-lock-only", registry=public_registry.url)
    assert locked.returncode == 0, locked.stderr

    quiet = cold_ci(npm_client, start(guarded, public_registry))

    proxy = start(guarded, public_registry)
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)
    path = tarball_path("heavy", "1.0.0")
    load = SlowLoad(host, int(port), "/npm" + path, READERS, HALF_HEADS, deadline=90).start()
    # the one download read whole, and its tarball connection given back, with every reader
    # still attached
    wait_for(lambda: sum(seen.path == path for seen in public_registry.requests) == 1
             and proxy.metric("mirrorgate_upstream_in_flight", pool="tarballs") == 0,
             timeout=30, message="the readers' shared download to be read")
    time.sleep(1.0)
    loaded = cold_ci(npm_client, proxy)
    load.join(90)

    print(f"\nrow 27: npm ci of {PACKAGES} packages, retries off: {quiet:.1f} s quiet, "
          f"{loaded:.1f} s beside {READERS} slow readers and {HALF_HEADS} half heads "
          f"({loaded / quiet:.2f}x)")
    assert npm_client.installed() == tree.resolved
    assert loaded <= 1.5 * quiet, (quiet, loaded)
    assert proxy.metric("mirrorgate_shed_total") == 0
    assert sum(seen.path == path for seen in public_registry.requests) == 1
    assert len(load.reader_endings) == READERS
    assert {ending.kind for ending in load.reader_endings} <= {"reset", "closed"}
    assert proxy.metric("mirrorgate_slow_clients_total", reason="min_rate") == READERS
    assert proxy.metric("mirrorgate_slow_clients_total", reason="head_timeout") == HALF_HEADS
