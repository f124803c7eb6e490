"""What verifying public tarballs on the serve path costs: relay MB/s with and without it.

Run by hand from the repository root: `.venv/bin/python -m bench.tarball_relay`. One run:

- builds `--tarballs` real tarballs of incompressible content, 200 KB to 4 MB (fixed seed),
  and serves them from the fixture public upstream in a child process of its own;
- runs the proxy (`build_proxy_app`, the application `mirrorgate serve` listens with) in this
  process, and a load generator in another child process that GETs every tarball through it
  over `--connections` keep-alive connections, reading and discarding the bodies;
- measures rounds alternately with verification on (as shipped) and off (the tarball route's
  verifier replaced by None: the relay as it was before issue 14, no hashing, no held chunk),
  and reports the median round of each and their ratio. Target (issue 14): verified >= 0.9 of
  unverified.

The proxy is pinned to CPU 0, the upstream and the load generator to CPU 1, when the machine
allows it, so the proxy's own cost is what moves. The relay is CPU-bound here (loopback, no
network in the way), so the ratio is the worst case: hashing sha512 (about 500 MB/s a core on
the machines this was written on) competes with the copy for the same core. Behind a real
network link the relay waits on the wire and the same hashing is a share of idle CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from unittest import mock

import aiohttp
from aiohttp import web
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixturePackage, make_package, make_version
from tests.servers.ports import free_port

from mirrorgate.backends.memory import MemoryQueueSettings, bounded_memory_queue
from mirrorgate.config import load_settings
from mirrorgate.healthz import Health
from mirrorgate.integrity import StreamVerifier
from mirrorgate.logs import configure_logging
from mirrorgate.metrics import Metrics
from mirrorgate.npm.packument import VersionRecord
from mirrorgate.rules import DEFAULT_RULES
from mirrorgate.serve import tarballs
from mirrorgate.serve.app import Proxy, build_proxy_app
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.private import StorePrivate

MIN_SIZE = 200_000
MAX_SIZE = 4_000_000
TARGET_RATIO = 0.9
PROXY_CPU = 0
OTHER_CPU = 1


def build_packages(count: int, seed: int = 14) -> list[FixturePackage]:
    rng = random.Random(seed)
    packages = []
    for index in range(count):
        size = int(math.exp(rng.uniform(math.log(MIN_SIZE), math.log(MAX_SIZE))))
        name = f"relay-{index:03d}"
        version = make_version(name, "1.0.0", files={"data.bin": rng.randbytes(size)})
        packages.append(make_package(name, [version]))
    return packages


def _pin(cpu: int) -> None:
    try:
        if len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass


def serve_upstream(packages: list[FixturePackage], port: int, ready: Connection) -> None:
    """Child process: the fixture public upstream until terminated."""
    _pin(OTHER_CPU)
    with FixtureRegistry(*packages, port=port):
        ready.send(True)
        while True:
            time.sleep(3600)


async def _download(urls: list[str], connections: int) -> tuple[int, float]:
    received = 0
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_connection() -> None:
            nonlocal received
            while not queue.empty():
                url = queue.get_nowait()
                async with session.get(url) as response:
                    assert response.status == 200, (url, response.status)
                    async for chunk in response.content.iter_any():
                        received += len(chunk)

        started = time.perf_counter()
        await asyncio.gather(*(one_connection() for _ in range(connections)))
        return received, time.perf_counter() - started


def load(urls: list[str], connections: int, answer: Connection) -> None:
    """Child process: fetch every URL once, report (bytes, seconds)."""
    _pin(OTHER_CPU)
    answer.send(asyncio.run(_download(urls, connections)))


async def start_proxy(public_url: str, data: Path) -> tuple[web.AppRunner, str, Upstream]:
    settings = load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": public_url,
                              "MIRRORGATE_DATA_DIR": str(data)}, npm_registry=lambda: None)
    metrics = Metrics()
    public = Upstream("public", settings.public_upstream, timeout=30,
                      max_metadata_bytes=settings.max_metadata_bytes, metrics=metrics)
    await public.start()
    queue = bounded_memory_queue(MemoryQueueSettings(100_000, 1.0), lambda _n: None)
    proxy = Proxy(settings=settings, public=public,
                  private=StorePrivate(FileStore(data / "store")), queue=queue,
                  rules=DEFAULT_RULES, metrics=metrics, health=Health(ready=True))
    runner = web.AppRunner(build_proxy_app(proxy), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/", public


async def one_round(urls: list[str], connections: int) -> float:
    """MB/s of one pass over every URL, the load generator in a child process."""
    receiving, sending = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.Process(target=load, args=(urls, connections, sending))
    child.start()
    received, seconds = await asyncio.get_running_loop().run_in_executor(None, receiving.recv)
    child.join()
    return float(received / seconds / 1e6)


def unverified(_record: VersionRecord) -> StreamVerifier | None:
    """The relay as it was before it verified: no verifier, so no hashing and no held chunk."""
    return None


async def measure(args: argparse.Namespace, packages: list[FixturePackage],
                  public_url: str, data: Path) -> dict[str, list[float]]:
    _pin(PROXY_CPU)
    runner, base, public = await start_proxy(public_url, data)
    urls = [f"{base}npm/{p.name}/-/{p.name}-1.0.0.tgz" for p in packages] * args.passes
    results: dict[str, list[float]] = {"verified": [], "unverified": []}
    try:
        await one_round(urls[:len(packages)], args.connections)  # warm: cache every packument
        for _ in range(args.rounds):
            results["verified"].append(await one_round(urls, args.connections))
            # the switch this benchmark exists to flip: the route's verifier, for one round
            with mock.patch.object(tarballs, "_verifier", unverified):
                results["unverified"].append(await one_round(urls, args.connections))
    finally:
        await runner.cleanup()
        await public.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tarballs", type=int, default=24)
    parser.add_argument("--passes", type=int, default=2, help="times each tarball is fetched "
                        "per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    configure_logging("warning", "json")
    multiprocessing.set_start_method("fork")
    packages = build_packages(args.tarballs)
    total = sum(len(p.version("1.0.0").tarball) for p in packages)
    port = free_port()
    ready, ready_sender = multiprocessing.Pipe(duplex=False)
    upstream = multiprocessing.Process(target=serve_upstream, args=(packages, port, ready_sender),
                                       daemon=True)
    upstream.start()
    ready.recv()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = asyncio.run(measure(args, packages, f"http://127.0.0.1:{port}/",
                                          Path(tmp)))
    finally:
        upstream.terminate()
        upstream.join()
    verified = statistics.median(results["verified"])
    unverified = statistics.median(results["unverified"])
    ratio = verified / unverified
    print(f"{args.tarballs} tarballs, {total / 1e6:.1f} MB, fetched {args.passes}x per round, "
          f"{args.connections} connections, {args.rounds} rounds each (median)")
    print(f"relay without verification: {unverified:8.1f} MB/s  "
          f"(rounds {', '.join(f'{r:.0f}' for r in results['unverified'])})")
    print(f"relay with verification:    {verified:8.1f} MB/s  "
          f"(rounds {', '.join(f'{r:.0f}' for r in results['verified'])})")
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"ratio verified/unverified:  {ratio:8.3f}  ({verdict} the {TARGET_RATIO} target)")
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
