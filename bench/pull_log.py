"""What the pull log costs the warm tarball path: the proxy's CPU per tarball with the log
written and without it.

Run by hand from the repository root: `.venv/bin/python -m bench.pull_log`. One run:

- builds `--packages` real tarballs of 10 to 60 KB (npm's typical sizes; fixed seed), served
  by the fixture public upstream in a child process;
- runs the proxy (`build_proxy_app`, as `mirrorgate serve` does) in this process, its
  packuments warmed first, and a load generator in another child process that GETs every
  tarball `--passes` times over `--connections` keep-alive connections (a warm replay of
  packages x passes tarballs, 2,000 by default);
- rounds alternate between the proxy with the pull log (`gate.pulllog` over the SQLite state
  store, written once a second, as shipped), without it, and a control (a second proxy
  without it), in an order that turns each round, and report each mode's median CPU per
  tarball (the whole process: the store's thread too) and the median of the per-round ratios
  to `without`; the control's ratio is the noise the machine adds.

Targets (issue 45): the warm tarball path at most 3% slower; the records' writes at most 5% of
the replay's CPU. Figures: docs/exposure.md.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import random
import statistics
import tempfile
import time
from pathlib import Path

from tests.servers.packages import FixturePackage, make_package, make_version
from tests.servers.ports import free_port

from bench.tarball_relay import _download, serve_upstream, start_proxy
from mirrorgate import runtime
from mirrorgate.gate.facts import KeptFacts
from mirrorgate.gate.pulllog import PullLog
from mirrorgate.logs import configure_logging
from mirrorgate.serve.tarballs import REQUEST_ID
from mirrorgate.store.sqlite import FILENAME, open_sqlite

MODES = ("without", "with", "control")
"""`control` is a second proxy without the log: its ratio to `without` is the bench's own noise
on the machine it ran on, the floor under which the log's cost cannot be told."""


def build_packages(count: int, seed: int = 45) -> list[FixturePackage]:
    rng = random.Random(seed)
    return [make_package(f"warm-{n:04d}", [make_version(
        f"warm-{n:04d}", "1.0.0", files={"index.js": rng.randbytes(int(math.exp(
            rng.uniform(math.log(10_000), math.log(60_000)))))})]) for n in range(count)]


def load(urls: list[str], connections: int, answer: multiprocessing.connection.Connection
         ) -> None:
    answer.send(asyncio.run(_download(urls, connections)))


async def one_round(urls: list[str], connections: int) -> float:
    """CPU seconds of this process per tarball over one replay."""
    receiving, sending = multiprocessing.Pipe(duplex=False)
    started = time.process_time()
    child = multiprocessing.Process(target=load, args=(urls, connections, sending))
    child.start()
    await asyncio.get_running_loop().run_in_executor(None, receiving.recv)
    child.join()
    return (time.process_time() - started) / len(urls)


async def parts(data: Path, count: int = 2000) -> tuple[float, float]:
    """CPU seconds per record: appending it on the request path (`PullLog.record`, with the
    request id read as the route reads it), and writing it (one batch of `count`, as a busy
    second's flush does), measured alone: the replay's own spread hides a few microseconds."""
    facts = KeptFacts(lambda: open_sqlite(data / "parts.sqlite3"))
    await facts.open()
    log = PullLog(facts, retention_days=90)
    recorded = written = 0.0
    request = {REQUEST_ID: "4f2a9c-1"}  # the route reads the id off its request
    for _ in range(5):
        started = time.process_time()
        for _ in range(count):
            log.record("payments-ci (acme/payments-api, branch main)", "warm-0001",
                       "1.0.0", "sha512-" + "a" * 86 + "==", "public", request.get(REQUEST_ID, ""))
        recorded += time.process_time() - started
        started = time.process_time()
        await log.flush()
        written += time.process_time() - started
    await facts.close()
    return recorded / (5 * count), written / (5 * count)


async def measure(args: argparse.Namespace, packages: list[FixturePackage],
                  public_url: str, data: Path) -> dict[str, list[float]]:
    facts = KeptFacts(lambda: open_sqlite(data / FILENAME))
    await facts.open()
    pulls = PullLog(facts, retention_days=90)
    stop = asyncio.Event()
    writing = asyncio.create_task(pulls.run(stop))
    proxies = {"without": await start_proxy(public_url, data / "without"),
               "with": await start_proxy(public_url, data / "with", pulls=pulls),
               "control": await start_proxy(public_url, data / "control")}
    results: dict[str, list[float]] = {name: [] for name in MODES}
    try:
        for _, base, _ in proxies.values():  # warm: every packument cached
            await one_round([f"{base}npm/{p.name}/-/{p.name}-1.0.0.tgz" for p in packages],
                            args.connections)
        for index in range(args.rounds):
            for name in MODES[index % 3:] + MODES[:index % 3]:  # each first in turn
                base = proxies[name][1]
                urls = [f"{base}npm/{p.name}/-/{p.name}-1.0.0.tgz"
                        for p in packages] * args.passes
                results[name].append(await one_round(urls, args.connections))
                await asyncio.sleep(1.2)  # the round's last batch written inside its own time
                if name == "with":
                    results.setdefault("buffered", []).append(float(pulls.buffered))
    finally:
        stop.set()
        await writing
        store = facts.store
        written = len(await store.pulls(limit=10_000_000)) if store is not None else 0
        print(f"  records written: {written}")
        for runner, _, public in proxies.values():
            await runner.cleanup()
            await public.close()
        await facts.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=200)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    configure_logging("warning", "json")  # as bench.tarball_relay: the lines are not measured
    runtime.tune_collector()  # as `mirrorgate serve` runs: its collector and its event loop
    factory, _ = runtime.loop_factory("auto")
    packages = build_packages(args.packages)
    port = free_port()
    ready, ready_sender = multiprocessing.Pipe(duplex=False)
    upstream = multiprocessing.Process(target=serve_upstream,
                                       args=(packages, port, 0, ready_sender), daemon=True)
    upstream.start()
    ready.recv()
    try:
        with tempfile.TemporaryDirectory() as tmp, asyncio.Runner(loop_factory=factory) as run:
            results = run.run(measure(args, packages, f"http://127.0.0.1:{port}/", Path(tmp)))
    finally:
        upstream.terminate()
        upstream.join()
    with tempfile.TemporaryDirectory() as tmp:
        recorded, written = asyncio.run(parts(Path(tmp)))
    per = args.packages * args.passes
    for name in MODES:
        shown = ", ".join(f"{r * 1e6:.0f}" for r in results[name])
        print(f"  {name:<8} the pull log: {statistics.median(results[name]) * 1e6:7.1f} us CPU "
              f"per tarball, median of {args.rounds} replays of {per} ({shown})")
    def ratio(mode: str) -> float:
        return statistics.median(m / wo for m, wo in zip(results[mode], results["without"],
                                                         strict=True))
    print(f"  ratio with/without: {ratio('with'):.3f} (median of per-round ratios); the "
          f"control, a second proxy without the log: {ratio('control'):.3f}")
    tarball = statistics.median(results["without"])
    print(f"  one record alone: {recorded * 1e6:.1f} us on the request path "
          f"({recorded / tarball:.1%} of a warm tarball's CPU; target <= 3%), "
          f"{written * 1e6:.1f} us to write it ({written / tarball:.1%}; target <= 5%)")
    return 0 if recorded / tarball <= 0.03 and written / tarball <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
