"""Row 15 of the faults table: SIGTERM while tarballs are streaming.

> | 15 | SIGTERM during an in-flight tarball stream | the stream completes within the drain
> timeout; exit code 0 |

The real `mirrorgate serve` streams tarballs the fixture public registry sends slowly (16 KiB
every 0.2 s, about 2.5 s for 200 KB): four raw HTTP downloads and one real `npm install` are in
flight when SIGTERM arrives. Each finishes with every byte, the npm install succeeds, a new
connection is refused while the process drains, and the process exits 0 well within
`MIRRORGATE_DRAIN_TIMEOUT`. The other side of the bound: a stream that would outlast the drain
timeout is cut at it (the client sees a failed transfer, not a short 200), and the process
still exits 0, on time.
"""

from __future__ import annotations

import functools
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.faults.guarded import GuardedFactory
from tests.faults.transfers import Transfer, fetch
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.streamed import streamed_rules

SLOW = Fault(chunk_size=16 * 1024, chunk_delay=0.2)
STREAMS = 4


def blob_package(name: str, versions: list[str]) -> FixturePackage:
    """Versions whose tarballs hold about 200 KB of incompressible bytes each."""
    blob = random.Random(name).randbytes(200_000)
    return make_package(name, versions, files={"index.js": b"module.exports = 1;\n",
                                               "blob.bin": blob})


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


def refuses_connections(proxy: MirrorgateProcess) -> bool:
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def proxy_fetched(public: FixtureRegistry, paths: list[str]) -> bool:
    seen = {request.path for request in public.requests}
    return all(path in seen for path in paths)


def test_sigterm_lets_every_in_flight_stream_and_an_npm_install_finish_then_exits_0(
    guarded: GuardedFactory, public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    versions = [f"1.0.{i}" for i in range(STREAMS)]
    streamed = blob_package("streamed", versions)
    installed = blob_package("installed", ["1.0.0"])
    public_registry.add(streamed, installed)
    paths = [tarball_path("streamed", v) for v in versions]
    paths.append(tarball_path("installed", "1.0.0"))
    for path in paths:
        public_registry.fault(path, SLOW, exact=True)
    proxy: MirrorgateProcess = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                                 "MIRRORGATE_DRAIN_TIMEOUT": "20"})
    npm_client.write_project({"installed": "1.0.0"})

    base = proxy.registry_url.rstrip("/")
    downloads = [in_thread(functools.partial(fetch, base + path)) for path in paths[:STREAMS]]
    npm = in_thread(lambda: npm_client.install(registry=proxy.registry_url, timeout=60))
    wait_for(lambda: proxy_fetched(public_registry, paths), timeout=20,
             message="every stream, npm's included, to be under way")
    proxy.signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_for(lambda: refuses_connections(proxy), timeout=5,
             message="the listener to close while the streams drain")
    still_streaming = not any(result for _thread, result in downloads)
    code = proxy.wait(30)
    exited = time.monotonic() - signalled
    for thread, _result in [*downloads, npm]:
        thread.join(30)

    for (_thread, result), version in zip(downloads, versions, strict=True):
        [seen] = result
        assert isinstance(seen, Transfer)
        assert seen.status == 200
        assert not seen.cut_short
        assert seen.received == streamed.versions[version].tarball
    [done] = npm[1]
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {"installed": "1.0.0"}
    assert still_streaming, "the streams were over before the listener closed"
    assert code == 0, proxy.stderr()
    assert exited < 20, f"the process took {exited:.1f} s to exit"
    events = [line["event"] for line in proxy.logs()]
    assert events.index("draining") < events.index("stopped")
    served = {line["package"] + "@" + line["version"] for line in proxy.events("tarball_served")}
    assert served == {f"streamed@{v}" for v in versions} | {"installed@1.0.0"}


def test_a_stream_longer_than_the_drain_timeout_is_cut_at_it_and_the_process_still_exits_0(
    guarded: GuardedFactory, public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    package = blob_package("endless", ["1.0.0"])
    public_registry.add(package)
    path = tarball_path("endless", "1.0.0")
    public_registry.fault(path, Fault(chunk_size=16 * 1024, chunk_delay=1.0), exact=True)
    # the release signals off: the default's would withhold this first pull until its verdict,
    # so no stream would be under way to drain
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_DRAIN_TIMEOUT": "1",
                              "MIRRORGATE_RULES_FILE": streamed_rules(tmp_path)})

    download = in_thread(lambda: fetch(proxy.registry_url.rstrip("/") + path, timeout=30))
    wait_for(lambda: proxy_fetched(public_registry, [path]), timeout=20,
             message="the stream to be under way")
    proxy.signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = proxy.wait(30)
    exited = time.monotonic() - signalled
    download[0].join(30)

    [seen] = download[1]
    assert isinstance(seen, Transfer)
    assert seen.status == 200
    assert seen.cut_short, "the client was handed a complete-looking body"
    assert len(seen.received) < len(package.versions["1.0.0"].tarball)
    assert code == 0, proxy.stderr()
    assert exited < 1 + 6, f"the process took {exited:.1f} s to exit with a 1 s drain timeout"
