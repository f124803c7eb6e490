"""Row 30 of the faults table: a reader that hangs up in the middle of a shared download.

> | 30 | five clients read the same 8 MB tarball while the upstream sends it slowly; a sixth
> hangs up after 100 KB | the five get every byte, matching the admitted digest; the
> download goes on to its end without the one who left; one upstream download, one job |

The real `mirrorgate serve` (memory queue); the fixture registry sends 64 KiB every 10 ms.
"""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from tests.faults.guarded import GuardedFactory
from tests.faults.transfers import Transfer, fetch
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import http_request, wait_for
from tests.sri import sri

READERS = 5


def hang_up_after(host: str, port: int, path: str, count: int, started: threading.Event) -> int:
    """GET `path` on a raw socket, read `count` bytes, close; the bytes read."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        received = 0
        while received < count:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += len(chunk)
            started.set()
    return received


def test_a_reader_leaving_mid_spool_disturbs_no_other(
    guarded: GuardedFactory, public_registry: FixtureRegistry,
) -> None:
    package = make_package("shared-big", ["1.0.0"], files={
        "index.js": b"module.exports = 1;\n",
        "blob.bin": random.Random("30").randbytes(8_000_000)})
    public_registry.add(package)
    path = tarball_path("shared-big", "1.0.0")
    public_registry.fault(path, Fault(chunk_size=65536, chunk_delay=0.01))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    assert http_request("GET", proxy.registry_url + "shared-big").status == 200
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)

    first = threading.Event()
    with ThreadPoolExecutor(READERS + 1) as pool:
        leaver = pool.submit(hang_up_after, host, int(port), "/npm" + path, 100_000, first)
        first.wait(10)
        transfers: list[Transfer] = list(pool.map(
            lambda _: fetch(proxy.registry_url + path.lstrip("/"), timeout=60), range(READERS)))
        left_after = leaver.result(timeout=30)

    expected = package.version("1.0.0").integrity
    assert left_after < len(package.version("1.0.0").tarball)
    assert all(not transfer.cut_short for transfer in transfers)
    assert all(sri("sha512", transfer.received) == expected for transfer in transfers)
    # one download for the readers (the worker's own, for the mirror, comes after)
    assert sum(seen.path == path and seen.headers.get("User-Agent") != "mirrorgate (worker)"
               for seen in public_registry.requests) == 1
    wait_for(lambda: proxy.metric("mirrorgate_jobs_enqueued_total") == 1, timeout=10,
             message="the one job for the shared download")
    assert proxy.events("tarball_client_gone")
