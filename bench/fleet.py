"""Three `mirrorgate serve` replicas on one PostgreSQL: the warm path against one replica's.

Run by hand, from the repository root (as root, or as a user PostgreSQL may run as):
`.venv/bin/python -m bench.fleet`. It starts a PostgreSQL (Debian's, as the tests do), the
fixture public upstream (in a thread of this process: an express-sized packument, a 6 MB
tarball, and small packages named `new-NNNNN`), and in alternating rounds:

- **fleet**: A with replicas B and C on one database. B and C each take first pulls of new
  names at `PULLS_PER_SECOND`, so each writes installed names, pull records and mirror jobs.
  After the measurement, every `PROBE_EVERY` seconds the bench writes a first-party name into
  the store, as another replica would. The name is one A holds cached from public, so A must
  drop its entry within a poll. Each such fact costs A a fill, which is not the warm path, so
  the probes run outside the measurement.
- **one**: A alone on its database. B and C take the same first pulls on another database, so
  the machine is as busy as in the fleet and only A's store differs.

In both, A carries the overload bench's load (`bench.serve_overload`): warm packument GETs
over 16 keep-alive connections with npm 11's headers (the load generator of
`bench.serve_packuments`, its own process), while 64 clients read the 6 MB tarball one byte a
second from every replica. A is pinned to CPU 0; everything else shares CPU 1. The figure
compared is A's CPU per warm request, from /proc. A's requests/s is printed too, but the
generator shares CPU 1 with B, C and PostgreSQL, so it measures the generator as much as A.
Also reported: A's CPU a second with no warm load (the poll, the facts it brings, the slow
readers), how long each first-party name took to reach A's answers (from its commit to
A's first 503, asked every 20 ms), the rows written per second, and the transactions
PostgreSQL committed.

Target: A's CPU per warm request in the fleet within 5% of one replica's (ratio <= 1.05).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.cpus import pin
from bench.procstat import usage
from bench.serve_packuments import (
    Target,
    _get,
    _load,
    _median_round,
    _start,
    _stop,
    _wait_until_up,
)

ROUNDS = 3
WARMUP_SECONDS = 1.0
MEASURE_SECONDS = 6.0
IDLE_SECONDS = 4.0
READERS = 64
BLOB = 6_000_000
PULLS_PER_SECOND = 40
"""First pulls of new names each of B and C takes, every second of a fleet round."""
PROBE_EVERY = 0.5
PROBES = 16
"""First-party names written per fleet round (one every PROBE_EVERY seconds)."""
OTHER_CPU = 1


def _env(upstreams: tuple[str, str], database: str, port: int, workdir: Path,
         label: str) -> dict[str, str]:
    public, private = upstreams
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(workdir), "LANG": "C.UTF-8",
           "MIRRORGATE_PUBLIC_UPSTREAM": public, "MIRRORGATE_PRIVATE_UPSTREAM": private,
           "MIRRORGATE_DATABASE_URL": database, "MIRRORGATE_LISTEN": f"127.0.0.1:{port}",
           "MIRRORGATE_DATA_DIR": str(workdir / label), "MIRRORGATE_CACHE_TTL": "300",
           "MIRRORGATE_WRITE_STALL_TIMEOUT": "600",
           "MIRRORGATE_MIRROR_TARGET": f"file://{workdir / label / 'mirror'}",
           "MIRRORGATE_LOG_FORMAT": "json", "MIRRORGATE_LOG_LEVEL": "warning"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


class Replica:
    def __init__(self, label: str, upstreams: tuple[str, str], database: str,
                 workdir: Path) -> None:
        from tests.servers.ports import free_port
        from tests.servers.processes import mirrorgate_argv

        self.label = label
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}/"
        self.process = _start([*mirrorgate_argv(), "serve"],
                              _env(upstreams, database, self.port, workdir, label), workdir)
        if label != "A":  # A keeps CPU 0 to itself; the rest share the other one
            pin(OTHER_CPU, self.process.pid)
        _wait_until_up(self.root + "readyz")

    def stop(self) -> None:
        _stop(self.process)


def _first_pulls(replica: Replica, names: list[str], stop: threading.Event) -> int:
    """First pulls of `names` at PULLS_PER_SECOND until `stop`; how many were served."""
    from tests.servers.processes import http_request

    served = 0
    started = time.monotonic()
    for index, name in enumerate(names):
        if stop.is_set():
            break
        time.sleep(max(0.0, started + index / PULLS_PER_SECOND - time.monotonic()))
        reply = http_request("GET", f"{replica.root}npm/{name}/-/{name}-1.0.0.tgz")
        served += reply.status == 200
    return served


async def _first_party(database: str, name: str) -> None:
    """What a replica that learned `name` first-party writes, through the same store."""
    from mirrorgate.store import FIRST_PARTY, Fact
    from mirrorgate.store.postgres import open_postgres

    store = await open_postgres(database)
    try:
        await store.put_facts([Fact(FIRST_PARTY, name, "")])
    finally:
        await store.close()


def _probes(replica: Replica, database: str, names: list[str], stop: threading.Event,
            seconds: list[float]) -> None:
    """Each name (cached by A from public) written first-party; the time until A answers 503
    for it (the private registry has no such name: an outage for a first-party one)."""
    from tests.servers.processes import http_request

    for name in names:
        if stop.wait(PROBE_EVERY):
            return
        asyncio.run(_first_party(database, name))
        written = time.monotonic()  # committed: from here A has a poll to see it
        while http_request("GET", f"{replica.root}npm/{name}").status != 503:
            if time.monotonic() - written > 10:
                raise SystemExit(f"A still served {name} from public 10 s after the fact")
            time.sleep(0.02)
        seconds.append(time.monotonic() - written)


async def _store_counts(database: str) -> dict[str, int]:
    import asyncpg

    connection = await asyncpg.connect(database)
    try:
        facts = await connection.fetchval("SELECT count(*) FROM facts")
        pulls = await connection.fetchval("SELECT count(*) FROM pulls")
        commits = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    finally:
        await connection.close()
    return {"facts": int(facts), "pulls": int(pulls), "commits": int(commits)}


def _round(fleet: bool, upstreams: tuple[str, str], databases: tuple[str, str], workdir: Path,
           names: list[str], probes: list[str], express: str, heavy: str) -> dict[str, Any]:
    from tests.faults.slow_clients import SlowLoad

    ours, theirs = databases
    # B and C write as much in both: on A's database in the fleet, on another alone
    shared = ours if fleet else theirs
    replicas = [Replica("A", upstreams, ours, workdir),
                *(Replica(label, upstreams, shared, workdir) for label in ("B", "C"))]
    a = replicas[0]
    target = Target("A", a.root + "npm/")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    latencies: list[float] = []
    try:
        if _get(target.base + express)[0] != 200:
            raise SystemExit("A did not serve the packument")
        for name in probes:
            _get(target.base + name)  # cached from public: what the facts must reach
        loads = [SlowLoad("127.0.0.1", replica.port, "/npm" + heavy, READERS, 0,
                          deadline=(WARMUP_SECONDS + IDLE_SECONDS + MEASURE_SECONDS
                                    + PROBES * PROBE_EVERY + 20)).start()
                 for replica in replicas]
        time.sleep(2.0)  # the readers attach and their writes block
        half = len(names) // 2
        threads += [threading.Thread(target=_first_pulls, args=(replica, part, stop))
                    for replica, part in ((replicas[1], names[:half]),
                                          (replicas[2], names[half:]))]
        before_store = asyncio.run(_store_counts(shared))
        for thread in threads:
            thread.start()
        time.sleep(WARMUP_SECONDS)
        # A with no warm load: what the store's poll (and the readers) cost it a second
        idle_from = usage(a.process.pid)
        time.sleep(IDLE_SECONDS)
        idle = usage(a.process.pid).minus(idle_from)
        before = usage(a.process.pid)
        result = _load(target, express, "full", 0.0, MEASURE_SECONDS)
        spent = usage(a.process.pid).minus(before)
        if fleet:  # after the measurement: each fact costs A a fill, which is not the warm path
            _probes(a, ours, probes, threading.Event(), latencies)
        stop.set()
        for thread in threads:
            thread.join(30)
        after_store = asyncio.run(_store_counts(shared))
        for load in loads:
            load.join(60)
    finally:
        stop.set()
        for replica in replicas:
            replica.stop()
    result["cpu_us"] = spent.cpu / max(1, result["requests"]) * 1e6
    result["idle_ms"] = idle.cpu / IDLE_SECONDS * 1000
    result["probe_s"] = sorted(latencies)
    seconds = WARMUP_SECONDS + IDLE_SECONDS + MEASURE_SECONDS + (PROBES * PROBE_EVERY
                                                                  if fleet else 0)
    result["writes"] = {key: (after_store[key] - before_store[key]) / seconds
                        for key in after_store}
    return result


def main() -> int:
    import argparse
    import random

    from tests.servers.fixture_registry import FixtureRegistry
    from tests.servers.packages import make_package, realistic_package, tarball_path
    from tests.servers.postgres_server import PostgresServer, find_postgres_bin

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="alternating rounds of each (the median is compared)")
    rounds_wanted = parser.parse_args().rounds
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    postgres = PostgresServer(bin_dir, Path(tempfile.mkdtemp(prefix="bench-fleet-pg-")))
    express = realistic_package("bench-express")
    heavy = make_package("heavy", ["1.0.0"], files={
        "index.js": b"1;\n", "blob.bin": random.Random("fleet").randbytes(BLOB)})
    per_round = int(PULLS_PER_SECOND * 2 * (WARMUP_SECONDS + IDLE_SECONDS + MEASURE_SECONDS
                                            + PROBES * PROBE_EVERY + 4))
    names = [f"new-{index:05d}" for index in range(2 * rounds_wanted * per_round)]
    probes = [f"probe-{index:03d}" for index in range(rounds_wanted * PROBES)]
    started = time.monotonic()
    upstream = FixtureRegistry(express, heavy, *(make_package(name, ["1.0.0"])
                                                 for name in (*names, *probes))).start()
    private = FixtureRegistry().start()  # the organisation's registry, empty
    print(f"fixture upstream: {len(names) + len(probes)} packages built in "
          f"{time.monotonic() - started:.0f} s")
    try:
        postgres.init()
        postgres.start()
        databases = (asyncio.run(postgres.new_database()),
                     asyncio.run(postgres.new_database()))
        print(f"replica A: warm packument {express.name} (full form), 16 connections, "
              f"{READERS} slow readers on every replica; {rounds_wanted} alternating rounds of "
              f"{MEASURE_SECONDS:g} s; B and C take {PULLS_PER_SECOND} first pulls/s each "
              f"(the fleet: on A's database, with a first-party fact written every "
              f"{PROBE_EVERY:g} s; one: on another)")
        rounds: dict[str, list[dict[str, Any]]] = {"one": [], "fleet": []}
        for index in range(rounds_wanted):
            for turn, label in enumerate(("one", "fleet"), start=index * 2):
                rounds[label].append(_round(
                    label == "fleet", (upstream.url, private.url), databases, workdir,
                    names[turn * per_round:(turn + 1) * per_round],
                    probes[index * PROBES:(index + 1) * PROBES], express.name,
                    tarball_path("heavy", "1.0.0")))
        for label, found in rounds.items():
            cpu = sorted(result["cpu_us"] for result in found)
            median = _median_round(found)
            print(f"  {label:5}  A's CPU per warm request: median {cpu[len(cpu) // 2]:6.1f} µs "
                  f"(rounds {', '.join(f'{value:.1f}' for value in cpu)})   "
                  f"{median['rps']:8.1f} req/s   p50 {median['p50_ms']:.2f} ms   "
                  f"p99 {median['p99_ms']:.2f} ms   ({median['errors']} not 200)")
            idle = sorted(result["idle_ms"] for result in found)
            print(f"         A's CPU with no warm load: median {idle[len(idle) // 2]:.1f} ms a "
                  f"second (rounds {', '.join(f'{value:.1f}' for value in idle)})")
        fleet = rounds["fleet"]
        probe = sorted(value for result in fleet for value in result["probe_s"])
        if probe:
            print(f"  a first-party fact written to the store reached A's answers in: median "
                  f"{probe[len(probe) // 2] * 1000:.0f} ms, p90 "
                  f"{probe[int(len(probe) * 0.9)] * 1000:.0f} ms, worst "
                  f"{probe[-1] * 1000:.0f} ms ({len(probe)} facts)")
        for key, what in (("facts", "facts written"), ("pulls", "pull records written"),
                          ("commits", "transactions committed")):
            rates = sorted(result["writes"][key] for result in fleet)
            shown = ", ".join(f"{rate:.0f}" for rate in rates)
            print(f"  B and C (fleet rounds), {what} per second: "
                  f"median {rates[len(rates) // 2]:.0f} (rounds {shown})")
        one_cpu = sorted(result["cpu_us"] for result in rounds["one"])[rounds_wanted // 2]
        fleet_cpu = sorted(result["cpu_us"] for result in fleet)[rounds_wanted // 2]
        ratio = fleet_cpu / one_cpu
        rps = _median_round(fleet)["rps"] / _median_round(rounds["one"])["rps"]
        print(f"fleet / one: CPU per warm request {ratio:.3f}x, req/s {rps:.3f}x")
        met = ratio <= 1.05
        print(f"target (A's CPU per warm request within 5% of one replica's): "
              f"{'met' if met else 'NOT met'}")
        return 0 if met else 1
    finally:
        upstream.stop()
        private.stop()
        postgres.stop()
        shutil.rmtree(postgres.root, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
