"""Row 3 of the faults table: the public upstream cuts a tarball off mid-stream.

> | 3 | public upstream truncates a tarball mid-stream | the client sees a failed transfer (not
> a 200 with short bytes and not a hang); no job enqueued for the broken transfer is published
> with those bytes |

Since issue 14 a broken transfer enqueues no job at all: only a pull read to its end and matched
against its digest does.

The fixture public registry promises the full Content-Length, sends part of the body and closes
the connection (`Fault(truncate_after=...)`), or stalls mid-body for longer than
`MIRRORGATE_UPSTREAM_TIMEOUT`. The real `mirrorgate serve` streams to a raw HTTP reader (which
reports what arrived before the connection closed) and to the real npm client, and its
in-process worker mirrors into Verdaccio, whose storage is read to see what was published.
"""

from __future__ import annotations

import random
import time

from tests.faults.guarded import GuardedFactory
from tests.faults.transfers import Transfer, fetch
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, make_package, tarball_filename, tarball_path
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.verdaccio import Verdaccio

UPSTREAM_TIMEOUT = 0.5


def big_package(name: str) -> FixturePackage:
    """One version whose tarball is about 200 KB of incompressible bytes."""
    blob = random.Random(name).randbytes(200_000)
    return make_package(name, ["1.0.0"], files={"index.js": b"module.exports = 1;\n",
                                                "blob.bin": blob})


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry,
                verdaccio: Verdaccio) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                             "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
                             "MIRRORGATE_UPSTREAM_TIMEOUT": str(UPSTREAM_TIMEOUT)})


def assert_failed_transfer(seen: Transfer, full: bytes) -> None:
    assert seen.status == 200  # the headers were already sent when the upstream broke
    assert seen.promised == len(full)
    assert seen.cut_short, "the client was handed a complete-looking body"
    assert len(seen.received) < len(full)
    assert full.startswith(seen.received)


def assert_counted_as_aborted(proxy: MirrorgateProcess, package: str) -> None:
    """The proxy logs and counts the broken stream once it has closed the connection, which
    the client may notice first: wait for the line."""
    [failed] = wait_for(lambda: proxy.events("tarball_stream_failed"), timeout=5,
                        message="the tarball_stream_failed line")
    assert failed["package"] == package
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="aborted") == 1


def test_a_tarball_cut_off_mid_stream_reaches_the_client_as_a_failed_transfer(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = big_package("cut-off")
    full = package.versions["1.0.0"].tarball
    public_registry.add(package)
    public_registry.fault(tarball_path("cut-off", "1.0.0"), Fault(truncate_after=len(full) // 2))
    proxy = start_proxy(guarded, public_registry, verdaccio)

    seen = fetch(proxy.registry_url.rstrip("/") + tarball_path("cut-off", "1.0.0"))

    assert_failed_transfer(seen, full)
    assert seen.seconds < 5
    assert_counted_as_aborted(proxy, "cut-off")
    assert proxy.returncode is None


def test_an_upstream_that_stalls_mid_body_is_cut_off_instead_of_hanging_the_client(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = big_package("stalls")
    full = package.versions["1.0.0"].tarball
    public_registry.add(package)
    public_registry.fault(tarball_path("stalls", "1.0.0"),
                          Fault(chunk_size=64 * 1024, chunk_delay=30))
    proxy = start_proxy(guarded, public_registry, verdaccio)

    seen = fetch(proxy.registry_url.rstrip("/") + tarball_path("stalls", "1.0.0"))

    assert_failed_transfer(seen, full)
    assert seen.seconds < UPSTREAM_TIMEOUT + 5
    assert_counted_as_aborted(proxy, "stalls")


def test_npm_reports_a_cut_off_tarball_as_a_failed_install(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    npm_client: NpmClient,
) -> None:
    package = big_package("cut-off")
    public_registry.add(package)
    public_registry.fault(tarball_path("cut-off", "1.0.0"), Fault(truncate_after=50_000))
    proxy = start_proxy(guarded, public_registry, verdaccio)
    npm_client.write_project({"cut-off": "1.0.0"})

    started = time.monotonic()
    done = npm_client.install(registry=proxy.registry_url, timeout=60)

    assert done.returncode != 0
    assert time.monotonic() - started < 30
    assert not (npm_client.project / "node_modules" / "cut-off").exists()


def test_a_cut_off_transfer_enqueues_no_job_so_nothing_is_published(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = big_package("cut-off")
    public_registry.add(package)
    public_registry.fault(tarball_path("cut-off", "1.0.0"), Fault(truncate_after=50_000))
    proxy = start_proxy(guarded, public_registry, verdaccio)

    seen = fetch(proxy.registry_url.rstrip("/") + tarball_path("cut-off", "1.0.0"))

    assert seen.cut_short
    assert_counted_as_aborted(proxy, "cut-off")
    # since issue 14 only a pull read to its end and matched is enqueued
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    assert proxy.metric("mirrorgate_jobs_total", outcome="published") == 0
    assert verdaccio.versions("cut-off") == []
    assert verdaccio.tarball("cut-off", tarball_filename("cut-off", "1.0.0")) is None


def test_a_pull_cut_off_once_then_whole_publishes_the_full_public_bytes(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = big_package("cut-once")
    full = package.versions["1.0.0"].tarball
    public_registry.add(package)
    public_registry.fault(tarball_path("cut-once", "1.0.0"),
                          Fault(truncate_after=50_000, times=1))
    proxy = start_proxy(guarded, public_registry, verdaccio)
    url = proxy.registry_url.rstrip("/") + tarball_path("cut-once", "1.0.0")

    assert_failed_transfer(fetch(url), full)
    again = fetch(url)

    assert not again.cut_short
    assert again.received == full
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=20, message="the worker to publish the version")
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1
    assert verdaccio.versions("cut-once") == ["1.0.0"]
    assert verdaccio.tarball("cut-once", tarball_filename("cut-once", "1.0.0")) == full
