"""Row 29 of the faults table: ten concurrent readers of one tampered tarball.

> | 29 | ten clients ask for the same tarball at once, and the public upstream's bytes do not
> match the admitted digest | one upstream download; every one of the ten transfers is cut
> before its end (none gets the last chunk); one `tarball_digest_mismatch` line and one count
> in `mirrorgate_tampered_total`; nothing enqueued; the next request downloads again |

The real `mirrorgate serve`; the fixture registry answers a 3 MB tarball with one bit flipped,
slowly (64 KiB every 20 ms), so that the ten readers all join the spool while it fills.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

from tests.faults.guarded import GuardedFactory
from tests.faults.transfers import Transfer, fetch
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import http_request

READERS = 10


def test_a_tampered_download_fails_every_reader_of_it(
    guarded: GuardedFactory, public_registry: FixtureRegistry,
) -> None:
    package = make_package("shared-evil", ["1.0.0"], files={
        "index.js": b"module.exports = 1;\n",
        "blob.bin": random.Random("29").randbytes(3_000_000)})
    public_registry.add(package)
    path = tarball_path("shared-evil", "1.0.0")
    evil = bytearray(package.version("1.0.0").tarball)
    evil[len(evil) // 2] ^= 0x01
    public_registry.fault(path, Fault(body=bytes(evil), chunk_size=65536, chunk_delay=0.02))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    assert http_request("GET", proxy.registry_url + "shared-evil").status == 200

    with ThreadPoolExecutor(READERS) as pool:
        transfers: list[Transfer] = list(pool.map(
            lambda _: fetch(proxy.registry_url + path.lstrip("/"), timeout=30), range(READERS)))

    assert {transfer.status for transfer in transfers} == {200}
    assert all(transfer.cut_short for transfer in transfers)
    assert all(len(transfer.received) < len(evil) for transfer in transfers)
    assert all(transfer.received == evil[:len(transfer.received)] for transfer in transfers)
    assert sum(seen.path == path for seen in public_registry.requests) == 1
    assert len(proxy.events("tarball_digest_mismatch")) == 1
    assert proxy.metric("mirrorgate_tampered_total") == 1
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    # a failed spool is not kept: the next request is a download of its own (cut again)
    again = fetch(proxy.registry_url + path.lstrip("/"), timeout=30)
    assert again.cut_short
    assert sum(seen.path == path for seen in public_registry.requests) == 2
