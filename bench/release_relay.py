"""What the release signals cost a first pull: relay MB/s with the signals on against off.

Run by hand from the repository root: `.venv/bin/python -m bench.release_relay`. The harness is
`bench.tarball_relay`'s (the proxy in this process on CPU 0, run as serve runs it, the fixture
upstream and the load generator in child processes on CPU 1, rounds of both modes back to back
in an order that turns, the median of per-round ratios; each mode's CPU a MB split between the
event loop and the lanes that hash and read). The tarballs are JavaScript (hand-written modules
and minified bundles of varied names, strings and numbers, 200 KB to 4 MB unpacked, which gzip
shrinks 3 to 5 times as it does real code), each package with the version before it, so a first
pull with the signals on reads the new tarball's code as it streams, fetches and reads the
previous version's, and withholds the bytes until the verdict. Every pull of a round is a first
pull (the verdicts are forgotten between pulls), the worst case: in use a version is read once,
and a warm packument hit or a later pull reads nothing.

Figures go in docs/serving.md ("Release signals").
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from tests.servers.incidents import entry_file
from tests.servers.packages import FixturePackage, make_package, make_version

from bench.cpus import pin
from bench.tarball_relay import (
    LoadGenerator,
    Round,
    one_round,
    run_as_served,
    start_proxy,
    upstream_and_load,
)
from mirrorgate import runtime
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.logs import configure_logging
from mirrorgate.npm import contents as contents_module
from mirrorgate.npm.contents import KeptReadings, contents_of
from mirrorgate.npm.jsuses import Uses
from mirrorgate.rules import DEFAULT_RULES, parse_rules

PROXY_CPU = 0
MODES = ("off", "on", "on-cold")
RULES = {"release": parse_rules("[release]\n", "bench.toml"), "default": DEFAULT_RULES}
"""`release`: every signal on; `default`: no rules file (the capability signals, issue 55).
The fixture versions are years old, so the default cooldown admits them."""


def _module(rng: random.Random, size: int, minified: bool) -> bytes:
    """About `size` bytes of JavaScript that compresses as real code does (3 to 5 times):
    functions over varied names, strings and numbers; one long line when `minified`."""
    words = ["value", "options", "result", "buffer", "node", "index", "state", "config",
             "handler", "request", "element", "context", "stream", "token", "cache"]
    parts: list[str] = []
    total = 0
    while total < size:
        name = f"{rng.choice(words)}{rng.getrandbits(24):x}"
        text = (f"function {name}({rng.choice(words)},{rng.choice(words)}){{if(typeof "
                f"{rng.choice(words)}===\"{rng.choice(words)}\")return {rng.getrandbits(20)};"
                f"return \"{rng.getrandbits(64):016x}\"+{rng.choice(words)}.{rng.choice(words)}"
                f"({rng.getrandbits(12)})}}")
        parts.append(text if minified else text.replace("{", "{\n  ").replace(";", ";\n  "))
        total += len(text)
    return ("" if minified else "\n").join(parts).encode() + b"\n"


def _code(rng: random.Random, name: str, size: int) -> dict[str, bytes]:
    """About `size` bytes of JavaScript: modules and minified bundles, as packages ship."""
    files: dict[str, bytes] = {"index.js": entry_file(name)}
    left = size - len(files["index.js"])
    index = 0
    while left > 0:
        data = _module(rng, min(left, rng.randint(20_000, 600_000)), rng.random() < 0.3)
        files[f"lib/part{index}.js"] = data
        left -= len(data)
        index += 1
    return files


def build_packages(count: int, seed: int = 33) -> list[FixturePackage]:
    rng = random.Random(seed)
    packages = []
    for index in range(count):
        name = f"signals-{index:03d}"
        size = int(rng.uniform(200_000, 4_000_000))
        files = _code(rng, name, size)
        before = make_version(name, "1.0.0", files=files)
        after = make_version(name, "1.0.1", files={**files, "lib/new.js": entry_file(name)})
        packages.append(make_package(name, [before, after]))
    return packages


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """`off`: the signals read nothing (as without a `[release]` table); `on`: every pull is a
    first pull (no verdict is ever found remembered), the previous version's reading kept from
    the round before (as when it was pulled through this process earlier); `on-cold`: the
    previous version fetched and read at every pull too, the worst case."""
    if name == "off":
        with mock.patch.object(ReleaseJudge, "applies", return_value=False):
            yield
    elif name == "on":
        with mock.patch.object(ReleaseJudge, "remembered", return_value=None):
            yield
    else:
        with mock.patch.object(ReleaseJudge, "remembered", return_value=None), \
                mock.patch.object(KeptReadings, "get", return_value=None):
            yield


async def measure(args: argparse.Namespace, packages: list[FixturePackage],
                  public_url: str, data: Path, load: LoadGenerator) -> dict[str, list[Round]]:
    pin(PROXY_CPU)
    # a finished download's spool lingers 30 s for the next reader; here every pull must be
    # a first pull (a download of its own), in every mode
    runner, base, public = await start_proxy(public_url, data, rules=RULES[args.rules],
                                             linger=0)
    urls = [f"{base}npm/{p.name}/-/{p.name}-1.0.1.tgz" for p in packages] * args.passes
    results: dict[str, list[Round]] = {name: [] for name in MODES}
    try:
        # a round of each mode untimed: `off`'s caches every packument, the others start the
        # reading lanes and grow their allocator's arena (a packuments' round in `off` alone
        # warmed the relay alone: a first round on then ran 10 to 20% slower than the rest)
        for name in MODES:
            with mode(name):
                await one_round(load, urls[:len(packages)], args.connections)
        for index in range(args.rounds):
            turned = MODES[index % len(MODES):] + MODES[:index % len(MODES)]
            for name in turned:
                with mode(name):
                    results[name].append(await one_round(load, urls, args.connections))
    finally:
        await runner.cleanup()
        await public.close()
    return results


def scenario(args: argparse.Namespace, packages: list[FixturePackage],
             link: float) -> dict[str, list[Round]]:
    with upstream_and_load(packages, link) as (public_url, load), \
            tempfile.TemporaryDirectory() as tmp:
        return run_as_served(measure(args, packages, public_url, Path(tmp), load))


def paired(results: dict[str, list[Round]], cpu: bool = False, on: str = "on") -> float:
    """The median of the per-round ratios on/off (MB/s; with `cpu`, the inverse of the
    process's CPU per MB: what a relay bound by its CPU would reach)."""
    pairs = zip(results[on], results["off"], strict=True)
    if cpu:
        return statistics.median(off.process_ms / on.process_ms for on, off in pairs)
    return statistics.median(on.mbps / off.mbps for on, off in pairs)


def signals_cost(results: dict[str, list[Round]], on: str) -> float:
    """The signals' own CPU per MB pulled: the process's, on minus off, per round."""
    return statistics.median(a.process_ms - b.process_ms
                             for a, b in zip(results[on], results["off"], strict=True))


def reading_cost(tarballs: list[bytes], repeat: int = 3) -> dict[str, float]:
    """The reading's CPU per MB of tarball (`npm.contents`, as the relay reads a first
    pull): whole (every signal on), lean (the default's capability signals alone), and lean
    without the capability reading (`npm.jsuses`): the best of `repeat` passes over every
    tarball, on this thread's CPU clock."""
    size = sum(map(len, tarballs)) / 1e6

    def best(lean: bool) -> float:
        times = []
        for _ in range(repeat):
            start = time.thread_time()
            for tarball in tarballs:
                contents_of(tarball, lean=lean)
            times.append(time.thread_time() - start)
        return min(times) * 1000 / size

    found = {"whole": best(False), "lean": best(True)}
    with mock.patch.object(contents_module, "uses_of", return_value=Uses()):
        found["lean without capabilities"] = best(True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tarballs", type=int, default=24)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reading", metavar="DIR", nargs="?", const="", default=None,
                        help="measure the reading alone (no relay) over the bench's tarballs, "
                        "or over every .tgz in DIR (real ones, `npm pack` them there)")
    parser.add_argument("--rules", choices=sorted(RULES), default="release",
                        help="the rules in force: every signal (`[release]`), or the default")
    parser.add_argument("--links", default="25", help="comma-separated MB/s a connection to "
                        "the upstream is paced at, one scenario each, then loopback")
    args = parser.parse_args()
    links = [float(rate) for rate in args.links.split(",") if rate]
    configure_logging("warning", "json")
    multiprocessing.set_start_method("fork")
    packages = build_packages(args.tarballs)
    if args.reading is not None:
        # the allocator as `mirrorgate serve` sets it (`runtime.MMAP_ABOVE`), as the relay's
        # rounds have it (`run_as_served`): glibc's own would leave large blocks in its arenas
        runtime.tune_allocator()
        tarballs = ([path.read_bytes() for path in sorted(Path(args.reading).glob("*.tgz"))]
                    if args.reading else [p.version("1.0.1").tarball for p in packages])
        found = reading_cost(tarballs)
        print(f"{len(tarballs)} tarballs, {sum(map(len, tarballs)) / 1e6:.1f} MB; ms of CPU "
              "per MB of tarball: " + ", ".join(f"{key} {value:.2f}"
                                                for key, value in found.items()))
        return 0
    compressed = sum(len(p.version("1.0.1").tarball) for p in packages)
    print(f"{args.tarballs} packages, {compressed / 1e6:.1f} MB of tarballs (new versions), "
          f"{args.connections} connections, {args.rounds} rounds of each mode, rules "
          f"{args.rules}")
    for link in [*links, 0]:
        results = scenario(args, packages, link)
        where = f"link paced at {link:g} MB/s a connection" if link else "loopback, unpaced"
        print(where)
        for name in MODES:
            rounds = results[name]
            print(f"  signals {name:<3} {statistics.median(r.mbps for r in rounds):7.1f} MB/s  "
                  f"process {statistics.median(r.process_ms for r in rounds):6.2f} ms/MB: "
                  f"loop {statistics.median(r.loop_ms for r in rounds):5.2f}, lanes "
                  f"{statistics.median(r.lanes_ms for r in rounds):5.2f}  "
                  f"(MB/s: {', '.join(f'{r.mbps:.1f}' for r in rounds)})")
        for on in MODES[1:]:
            print(f"  ratio {on}/off: {paired(results, on=on):.3f} MB/s, "
                  f"{paired(results, cpu=True, on=on):.3f} by the process's CPU per MB; the "
                  "signals' own CPU "
                  f"{signals_cost(results, on):.1f} ms per MB (medians of per-round figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
