"""What the tarball spool buys and costs: downloads saved for a fleet, MB/s for one reader.

Run by hand from the repository root: `.venv/bin/python -m bench.tarball_spool`. Two parts,
each against a baseline measured in the same run, the spool turned off
(`MIRRORGATE_SPOOL_MAX_BYTES=0`: every request streams its own download, as before issue 31):

1. **A fleet**: `--installs` concurrent cold `npm ci` of one lockfile (`--packages` packages,
   realistic tarball sizes) through one real `mirrorgate serve`, each with an npm cache of its
   own. Counted at the fixture public registry: tarball downloads per tarball (goal: one,
   however many installs), and the wall time of the N installs against one install alone.
2. **One reader**: the relay's MB/s for a single client reading each tarball once, spooled
   against streamed, rounds alternated (`bench.tarball_relay`'s harness: the proxy in this
   process on CPU 0, the upstream and the load generator on CPU 1), over a paced link and
   over loopback. Goal: spooled >= 0.95x streamed.

Figures go in the issue note and docs/serving.md ("One download per tarball").
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, wide_tree
from tests.servers.processes import MirrorgateProcess

from bench.cpus import pin
from bench.tarball_relay import (
    LoadGenerator,
    Round,
    build_packages,
    one_round,
    run_as_served,
    start_proxy,
    upstream_and_load,
)
from mirrorgate.logs import configure_logging
from mirrorgate.serve.app import SERVER

TARGET_RATIO = 0.95
MODES = ("streamed", "spooled")


# -- 1. a fleet of installs ----------------------------------------------------------------

def fleet(public: FixtureRegistry, lockfile_dir: Path, work: Path, installs: int,
          spool: bool) -> tuple[float, int]:
    """`installs` concurrent cold `npm ci` through a fresh `mirrorgate serve`: (wall seconds,
    public tarball downloads the proxy made)."""
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_LOG_LEVEL": "warning"}
    if not spool:
        env["MIRRORGATE_SPOOL_MAX_BYTES"] = "0"
    proxy = MirrorgateProcess("serve", env, workdir=work / "proxy").start()
    clients = []
    for index in range(installs):
        client = NpmClient(work / f"npm-{index}")
        for name in ("package.json", "package-lock.json"):
            (client.project / name).write_bytes((lockfile_dir / name).read_bytes())
        clients.append(client)
    public.clear_requests()
    failures: list[str] = []

    def install(client: NpmClient) -> None:
        done = client.ci(registry=proxy.registry_url, timeout=600)
        if done.returncode != 0:
            failures.append(done.stderr[-2000:])

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=install, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
    finally:
        proxy.running.stop(timeout=20)
    if failures:
        raise SystemExit(f"an install failed:\n{failures[0]}")
    downloads = sum("/-/" in seen.path and seen.headers.get("User-Agent") != "mirrorgate (worker)"
                    for seen in public.requests)
    return seconds, downloads


def run_fleet(args: argparse.Namespace) -> None:
    tree = wide_tree(args.packages)
    tarballs = len(tree.resolved)
    with FixtureRegistry(*tree.packages) as public, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        locker = NpmClient(root / "locker")
        locker.write_project(tree.dependencies)
        locked = locker.run("install", "--package-lock-only", registry=public.url)
        if locked.returncode != 0:
            raise SystemExit(locked.stderr)
        print(f"fleet: {args.installs} concurrent cold `npm ci` of {tarballs} packages, "
              "npm retries off, one mirrorgate serve")
        results: dict[tuple[str, int], tuple[float, int]] = {}
        for mode in MODES:
            for count in (1, args.installs):
                results[mode, count] = fleet(public, locker.project, root / f"{mode}-{count}",
                                             count, spool=mode == "spooled")
        for mode in MODES:
            one, _ = results[mode, 1]
            many, downloads = results[mode, args.installs]
            print(f"  {mode:<9} 1 install {one:5.1f} s; {args.installs} installs {many:5.1f} s "
                  f"({many / one:4.2f}x one); public tarball downloads {downloads} "
                  f"({downloads / tarballs:.2f} per tarball)")


# -- 2. one reader -------------------------------------------------------------------------

async def measure(args: argparse.Namespace, packages: list[FixturePackage], public_url: str,
                  data: Path, load: LoadGenerator) -> dict[str, list[Round]]:
    pin(0)
    runner, base, public = await start_proxy(public_url, data)
    spools = runner.app[SERVER].relay.spools
    room = spools.max_bytes
    urls = [f"{base}npm/{p.name}/-/{p.name}-1.0.0.tgz" for p in packages]
    results: dict[str, list[Round]] = {name: [] for name in MODES}
    try:
        await one_round(load, urls, 1)  # warm: every packument cached
        for index in range(args.rounds):
            turned = MODES[index % 2:] + MODES[:index % 2]
            for name in turned:
                spools.max_bytes = room if name == "spooled" else 0
                spools.linger = 0.0  # every round downloads again, as a cold reader does
                results[name].append(await one_round(load, urls, 1))
    finally:
        await runner.cleanup()
        await public.close()
    return results


def run_reader(args: argparse.Namespace) -> float:
    packages = build_packages(args.tarballs)
    ratios = []
    for link in (args.link, 0.0):
        with upstream_and_load(packages, link) as (public_url, load), \
                tempfile.TemporaryDirectory() as tmp:
            results = run_as_served(measure(args, packages, public_url, Path(tmp), load))
        paired = statistics.median(a.mbps / b.mbps for a, b in zip(
            results["spooled"], results["streamed"], strict=True))
        where = f"a {link:g} MB/s link" if link else "loopback (CPU-bound)"
        shown = {name: statistics.median(r.mbps for r in rounds)
                 for name, rounds in results.items()}
        cpu = {name: statistics.median(r.process_ms for r in rounds)
               for name, rounds in results.items()}
        print(f"one reader, {where}: streamed {shown['streamed']:.0f} MB/s "
              f"({cpu['streamed']:.2f} ms CPU/MB), spooled {shown['spooled']:.0f} MB/s "
              f"({cpu['spooled']:.2f} ms CPU/MB); spooled/streamed {paired:.3f} (median of "
              f"{args.rounds} paired rounds): "
              f"{'meets' if paired >= TARGET_RATIO else 'MISSES'} the {TARGET_RATIO} target")
        ratios.append(paired)
    return ratios[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--installs", type=int, default=8)
    parser.add_argument("--packages", type=int, default=106)
    parser.add_argument("--tarballs", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--link", type=float, default=50.0, help="MB/s a connection to the "
                        "upstream is paced at in the first one-reader scenario")
    parser.add_argument("--part", choices=("fleet", "reader", "both"), default="both")
    args = parser.parse_args()
    configure_logging("warning", "json")
    multiprocessing.set_start_method("fork")
    if args.part in ("fleet", "both"):
        run_fleet(args)
    ratio = run_reader(args) if args.part in ("reader", "both") else TARGET_RATIO
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
