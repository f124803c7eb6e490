"""Warm packument GETs with and without 64 slow tarball readers attached, in one run.

Run by hand, from the repository root: `.venv/bin/python -m bench.serve_overload`. It starts the
fixture public upstream (in a thread of this process) serving an express-sized packument and a
6 MB tarball, and `mirrorgate serve` (the real command, pinned to CPU 0). Then, in alternating
rounds, the load generator of `bench.serve_packuments` (its own process, pinned to CPU 1)
drives warm packument GETs over 16 keep-alive connections with npm 11's headers:

- **unloaded**: nothing else is connected;
- **loaded**: 64 clients are each reading the tarball one byte a second
  (`tests.faults.slow_clients.SlowLoad`), so 64 handlers and 64 client connections with full
  buffers are held for the whole round, all fed by one download from the public upstream
  (its spool: docs/serving.md, "One download per tarball").
  `MIRRORGATE_WRITE_STALL_TIMEOUT` is raised for the run so that they stay attached (the
  default would cut them after 30 s, which is the point of it, but not of this measurement).

It reports requests/s, p50 and p99 of the median round of each, and the ratio of the loaded p99
to the unloaded one. Target: the loaded p99 within 2x of the unloaded p99.
"""

from __future__ import annotations

import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.serve_packuments import (
    Target,
    _get,
    _load,
    _median_round,
    _start,
    _stop,
    _wait_until_up,
    serve_environment,
)

READERS = 64
ROUNDS = 3
WARMUP_SECONDS = 1.0
MEASURE_SECONDS = 4.0
BLOB = 6_000_000
_IN_FLIGHT = re.compile(
    r'^mirrorgate_upstream_in_flight\{pool="tarballs",upstream="public"\} (\S+)$', re.M)


def _tarballs_in_flight(base: str) -> int:
    body = _get(base + "metrics", timeout=10)[2].decode()
    found = _IN_FLIGHT.search(body)
    return int(float(found.group(1))) if found else 0


def _wait(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def main() -> int:
    from tests.faults.slow_clients import SlowLoad
    from tests.servers.fixture_registry import Fault, FixtureRegistry
    from tests.servers.packages import make_package, realistic_package, tarball_path
    from tests.servers.ports import free_port
    from tests.servers.processes import mirrorgate_argv

    workdir = Path(tempfile.mkdtemp(prefix="bench-overload-"))
    express = realistic_package("bench-express")
    blob = random.Random("overload").randbytes(BLOB)
    heavy = make_package("heavy", ["1.0.0"], files={"index.js": b"1;\n", "blob.bin": blob})
    upstream = FixtureRegistry(express, heavy).start()
    heavy_path = tarball_path("heavy", "1.0.0")
    upstream.fault(heavy_path, Fault(chunk_size=64 * 1024, chunk_delay=0.001), exact=True)
    process = None
    try:
        port = free_port()
        env = serve_environment(workdir, upstream.url, port, settings={
            "MIRRORGATE_WRITE_STALL_TIMEOUT": "600",
            # mirrored elsewhere, so every read of the tarball streams from the upstream
            "MIRRORGATE_MIRROR_TARGET": f"file://{workdir / 'mirror'}"})
        process = _start([*mirrorgate_argv(), "serve"], env, workdir)
        root = f"http://127.0.0.1:{port}/"
        target = Target("mirrorgate", root + "npm/")
        _wait_until_up(target.base + "-/ping")
        if _get(target.base + express.name)[0] != 200:
            raise SystemExit("mirrorgate did not serve the packument")

        print(f"warm packument {express.name} (full form), 16 connections; {ROUNDS} "
              f"alternating {MEASURE_SECONDS:g} s rounds each; loaded = {READERS} clients "
              f"reading a {BLOB / 1e6:.0f} MB tarball at one byte a second")
        rounds: dict[str, list[dict[str, Any]]] = {"unloaded": [], "loaded": []}
        for _ in range(ROUNDS):
            rounds["unloaded"].append(_load(target, express.name, "full", WARMUP_SECONDS,
                                            MEASURE_SECONDS))
            load = SlowLoad("127.0.0.1", port, "/npm" + heavy_path, READERS, 0,
                            deadline=WARMUP_SECONDS + MEASURE_SECONDS + 15).start()
            # the readers share one upstream download (its spool): a reader is attached once
            # its first byte came, its handler held from then on
            _wait(lambda load=load: load.receiving >= READERS, "the slow readers to attach")
            time.sleep(1.0)  # their buffers fill and their writes block
            rounds["loaded"].append(_load(target, express.name, "full", WARMUP_SECONDS,
                                          MEASURE_SECONDS))
            attached = load.receiving
            load.join(60)
            _wait(lambda: _tarballs_in_flight(root) == 0, "the slow readers to go")
            if attached < READERS:
                raise SystemExit(f"only {attached} slow readers were still attached at the "
                                 "end of a loaded round")
        measured = {label: _median_round(found) for label, found in rounds.items()}
        for label, result in measured.items():
            print(f"  {label:9} {result['rps']:9.1f} req/s   p50 {result['p50_ms']:7.2f} ms   "
                  f"p99 {result['p99_ms']:7.2f} ms   ({result['requests']} ok, "
                  f"{result['errors']} not 200)   rounds {result['rounds']}")
        ratio = measured["loaded"]["p99_ms"] / measured["unloaded"]["p99_ms"]
        rps = measured["loaded"]["rps"] / measured["unloaded"]["rps"]
        print(f"loaded / unloaded: p99 {ratio:.2f}x, req/s {rps:.0%}")
        verdict = ratio <= 2.0
        print(f"target (loaded p99 within 2x of unloaded): {'met' if verdict else 'NOT met'}")
        return 0 if verdict else 1
    finally:
        if process is not None:
            _stop(process)
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
