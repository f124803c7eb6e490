"""What a first pull costs in all: a public tarball relayed and mirrored, CPU per MB until idle.

Run by hand from the repository root: `.venv/bin/python -m bench.first_pull`. Each round starts
a fresh `mirrorgate serve` (its defaults: memory queue, in-process worker, file store in a new
MIRRORGATE_DATA_DIR) of every tree given (`--tree label=src-dir`, in an order that turns every
round), warms its packument cache, then pulls `--tarballs` incompressible tarballs of 0.2 to 4
MB once each over `--connections` connections, and waits until the worker has mirrored every
one and the process is idle again. The same pulls run once more against a process whose worker
is parked on a target that never answers: the serve path alone. Reported, per tree, the median
over rounds of the process's CPU (the kernel's utime + stime) per MB pulled: in all, the serve
path alone, and the worker (the difference); the event loop's thread and the others apart.
Figures: docs/serving.md ("One download per version").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.processes import MirrorgateProcess

from bench.cold_scale import Blackhole, mirrored
from bench.procstat import Usage, usage
from bench.tarball_relay import build_packages

SETTLE = 0.5
"""Seconds after /readyz (and after warming) before the CPU baseline is read."""
IDLE = 0.005
"""CPU seconds per `IDLE_EVERY` under which the process counts as idle again."""
IDLE_EVERY = 0.25


@dataclass(frozen=True)
class Side:
    """CPU ms per MB pulled: the whole process, its event loop's thread, the other threads."""

    total: float
    loop: float
    others: float


async def _pull(urls: list[str], connections: int, accept: str | None = None) -> int:
    received = 0
    pending = list(reversed(urls))
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as http:

        async def one_connection() -> None:
            nonlocal received
            while pending:
                url = pending.pop()
                async with http.get(url, headers=headers) as answer:
                    assert answer.status == 200, (url, answer.status)
                    async for chunk in answer.content.iter_any():
                        received += len(chunk)

        await asyncio.gather(*(one_connection() for _ in range(connections)))
    return received


def _idle(pid: int) -> Usage:
    """The process's usage once it has stopped working (the hand-overs, the last job)."""
    last = usage(pid)
    while True:
        time.sleep(IDLE_EVERY)
        now = usage(pid)
        if now.cpu - last.cpu < IDLE:
            return now
        last = now


def one_run(src: Path, public: str, names: list[str], connections: int, workdir: Path,
            parked: str | None) -> tuple[Usage, int]:
    """One fresh process of the tree at `src`: its CPU from the first tarball request until
    it is idle with every tarball mirrored (or, `parked`, with the serve path's work done)."""
    directory = Path(tempfile.mkdtemp(prefix="first-pull-", dir=workdir))
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public, "MIRRORGATE_LOG_LEVEL": "warning",
           "PYTHONPATH": str(src)}
    if parked is not None:
        env |= {"MIRRORGATE_MIRROR_TARGET": parked, "MIRRORGATE_DRAIN_TIMEOUT": "1"}
    proxy = MirrorgateProcess("serve", env, workdir=directory).start(timeout=60)
    try:
        base = proxy.registry_url
        asyncio.run(_pull([f"{base}{name}" for name in names], connections,
                          "application/vnd.npm.install-v1+json"))
        time.sleep(SETTLE)
        start = _idle(proxy.pid)
        pulled = asyncio.run(_pull([f"{base}{name}/-/{name}-1.0.0.tgz" for name in names],
                                   connections))
        if parked is None:
            store = directory / "data" / "store"
            deadline = time.monotonic() + 300
            while mirrored(store) < len(names):
                if time.monotonic() > deadline or proxy.returncode is not None:
                    raise RuntimeError(f"only {mirrored(store)} of {len(names)} mirrored:\n"
                                       f"{proxy.stderr()[-3000:]}")
                time.sleep(0.05)
        return _idle(proxy.pid).minus(start), pulled
    finally:
        if parked is None:
            proxy.terminate()
        else:
            proxy.kill()


def per_mb(used: Usage, pulled: int) -> Side:
    megabytes = pulled / 1e6
    return Side(used.cpu * 1e3 / megabytes, used.main * 1e3 / megabytes,
                used.threads * 1e3 / megabytes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="label=path of a source directory (its PYTHONPATH); repeat to "
                        "compare trees, alternated every round (default: now=src)")
    parser.add_argument("--tarballs", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    trees = [tuple(tree.split("=", 1)) for tree in args.tree] or [("now", "src")]
    packages = build_packages(args.tarballs)
    names = [package.name for package in packages]
    total: dict[str, list[Side]] = {label: [] for label, _ in trees}
    serve: dict[str, list[Side]] = {label: [] for label, _ in trees}
    with FixtureRegistry(*packages) as registry, Blackhole() as hole, \
            tempfile.TemporaryDirectory() as workdir:
        for index in range(args.rounds):
            turned = trees[index % len(trees):] + trees[:index % len(trees)]
            for label, src in turned:
                source = Path(src).resolve()
                used, pulled = one_run(source, registry.url, names, args.connections,
                                       Path(workdir), None)
                total[label].append(per_mb(used, pulled))
                used, pulled = one_run(source, registry.url, names, args.connections,
                                       Path(workdir), hole.url)
                serve[label].append(per_mb(used, pulled))
                print(f"round {index + 1} {label}: in all {total[label][-1].total:.2f}, serve "
                      f"{serve[label][-1].total:.2f} ms/MB", flush=True)
    megabytes = sum(len(p.version("1.0.0").tarball) for p in packages) / 1e6
    print(f"{args.tarballs} tarballs, {megabytes:.1f} MB, each pulled once a run; CPU ms per MB "
          f"pulled, median of {args.rounds} rounds (loop thread / other threads)")
    for label, _src in trees:
        whole = statistics.median(side.total for side in total[label])
        alone = statistics.median(side.total for side in serve[label])
        print(f"  {label:<8} in all {whole:5.2f} "
              f"({statistics.median(s.loop for s in total[label]):.2f} / "
              f"{statistics.median(s.others for s in total[label]):.2f})  serve {alone:5.2f} "
              f"({statistics.median(s.loop for s in serve[label]):.2f} / "
              f"{statistics.median(s.others for s in serve[label]):.2f})  worker "
              f"{whole - alone:5.2f}  rounds: "
              + ", ".join(f"{s.total:.2f}" for s in total[label]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
