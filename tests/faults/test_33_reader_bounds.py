"""Row 33 of the faults table: tarballs that cost their reader memory and CPU, read under the
default policy (the capability signals read every first pull's bytes).

> | 33 | young packages whose tarballs hold three files under pax paths of 1,000 folders of
> 999 characters, 6 MiB of empty zstd frames, and 199,000 empty files, the last read while
> an old package's 3 MiB tarball and a young one's download | the first is read within
> 64 MiB of peak memory and the second refused as unreadable, each within a second of CPU;
> `/livez` answers within 200 ms throughout; both other downloads end before the 199,000
> files are read |

The attacks: the reader kept every parent folder of every path as a string of its own (the
6.8 KB pax-path tarball took 1.4 GiB, and `/livez` 1.1 s on one CPU); it started a zstd
decompressor per frame and copied the rest of the chunk after each (6 MiB took 8 s of CPU);
and every reading shared one hashing lane, so an unrelated 3 MiB download waited 3.5 s
behind one. The real `mirrorgate serve` with no rules file; the packages two days old.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.faults.guarded import GuardedFactory
from tests.faults.memory import MIB, cpu_seconds, mib, reset_peak, rss
from tests.faults.transfers import Transfer, fetch
from tests.npm.bombs import entries, pax_paths, zstd_frames
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixturePackage, make_package, make_version, tarball_path
from tests.servers.processes import MirrorgateProcess, http_request, wait_for

PEAK_AT_MOST = 64 * MIB
"""Peak resident memory a reading may add: the pax paths once took 1,437 MiB."""
CPU_AT_MOST = 1.0
"""CPU seconds of the whole process while one tarball is read (4 s and 10 s before)."""
LIVEZ_AT_MOST = 0.200
"""Seconds `/livez` may take while a reading runs (1.1 s on one CPU before)."""
TWO_DAYS_AGO = datetime.now(UTC) - timedelta(days=2)


def _manifest(name: str) -> bytes:
    return b'{"name": "%s", "version": "1.0.0"}' % name.encode()


def _young(name: str, tarball: bytes | None = None, **files: bytes) -> FixturePackage:
    """A package first published two days ago: the young-package signal reads its bytes."""
    return make_package(name, [make_version(
        name, "1.0.0", tarball=tarball, files=files or None, published=TWO_DAYS_AGO,
        dist={"fileCount": 1, "unpackedSize": 1} if tarball is not None else None)])


class Probe:
    """`/livez` asked every 20 ms from a thread of its own, each answer's seconds kept."""

    def __init__(self, proxy: MirrorgateProcess) -> None:
        self.url = proxy.url + "livez"
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            started = time.perf_counter()
            assert http_request("GET", self.url, timeout=10).status == 200
            self.seconds.append(time.perf_counter() - started)

    @contextmanager
    def running(self) -> Iterator[Probe]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(15)


def url_of(proxy: MirrorgateProcess, name: str) -> str:
    return proxy.registry_url + tarball_path(name, "1.0.0").lstrip("/")


def read_alone(proxy: MirrorgateProcess, name: str) -> tuple[Transfer, int, float, float]:
    """GET `name`'s tarball: the transfer, the peak memory the reading added, the CPU seconds
    the process spent meanwhile, and the slowest `/livez`."""
    reset_peak(proxy.pid)
    before, cpu = rss(proxy.pid).current, cpu_seconds(proxy.pid)
    with Probe(proxy).running() as probe:
        transfer = fetch(url_of(proxy, name), timeout=60)
        time.sleep(0.1)  # a probe or two after the reading
    return (transfer, rss(proxy.pid).peak - before, cpu_seconds(proxy.pid) - cpu,
            max(probe.seconds))


def test_readings_are_bounded_in_memory_cpu_and_the_time_they_take_from_others(
    guarded: GuardedFactory, public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    noise = random.Random("31").randbytes(3 * 1024 * 1024)
    packages = [
        _young("first-read", **{"index.js": b"module.exports = 0\n"}),
        _young("deep-paths", pax_paths(_manifest("deep-paths"))),
        _young("empty-frames", zstd_frames(_manifest("empty-frames"))),
        _young("many-files", entries(_manifest("many-files"))),
        _young("young-blob", **{"index.js": b"module.exports = 1\n", "blob.bin": noise}),
        make_package("old-blob", ["1.0.0"], files={  # published in 2020: read all the same
            "index.js": b"module.exports = 2\n", "blob.bin": noise[::-1]})]
    public_registry.add(*packages)
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_DATA_DIR": str(tmp_path / "data")})
    for package in packages:  # the packuments warm: only the tarballs are cold
        assert http_request("GET", proxy.registry_url + package.name).status == 200

    # the first reading loads what every reading shares (the popular names typosquat reads)
    assert fetch(url_of(proxy, "first-read")).status == 200
    transfer, peak, cpu, livez = read_alone(proxy, "deep-paths")
    print(f"pax paths: +{mib(peak)} peak, {cpu:.2f} s CPU, /livez at most {livez * 1000:.0f} ms")
    assert transfer.status == 200  # read whole, and nothing in it runs at install
    assert peak < PEAK_AT_MOST
    assert cpu < CPU_AT_MOST
    assert livez < LIVEZ_AT_MOST

    transfer, peak, cpu, livez = read_alone(proxy, "empty-frames")
    print(f"zstd frames: +{mib(peak)} peak, {cpu:.2f} s CPU, /livez at most "
          f"{livez * 1000:.0f} ms")
    assert transfer.status == 403
    assert b"more than 4096 gzip members or zstd frames" in transfer.received
    assert b"unreadable-release" in transfer.received
    assert cpu < CPU_AT_MOST
    assert livez < LIVEZ_AT_MOST

    # 199,000 files: about two seconds of reading. Started first, the two others after it
    # began, both read (every first pull is): on the other reading lane, least behind, never
    # queued behind it (a shared lane queued both)
    hostile = tarball_path("many-files", "1.0.0")
    ended: dict[str, float] = {}

    def timed(name: str) -> Transfer:
        got = fetch(url_of(proxy, name), timeout=60)
        ended[name] = time.monotonic()
        return got

    with Probe(proxy).running() as probe, ThreadPoolExecutor(3) as pool:
        many = pool.submit(timed, "many-files")
        wait_for(lambda: any(seen.path == hostile for seen in public_registry.requests),
                 timeout=30, message="the proxy to start reading the 199,000 files")
        others = {name: pool.submit(timed, name) for name in ("old-blob", "young-blob")}
        results = {name: future.result(60) for name, future in others.items()}
        assert many.result(60).status == 200
    print(f"199,000 files: the others ended {ended['many-files'] - ended['old-blob']:.2f} s "
          f"and {ended['many-files'] - ended['young-blob']:.2f} s before it; /livez at most "
          f"{max(probe.seconds) * 1000:.0f} ms")
    for name, got in results.items():
        assert got.status == 200, name
        assert len(got.received) > 3_000_000
        assert ended[name] < ended["many-files"], name
    assert max(probe.seconds) < LIVEZ_AT_MOST
