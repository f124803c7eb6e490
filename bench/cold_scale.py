"""The cold path at scale: a ~1,900-version `npm ci` through `mirrorgate serve` on its defaults.

Builds (once, into a cache directory) a tree of real-sized packages (`bench.scale_tree`: 1,700
names, packuments from 2 KB to 22 MB, 163,000 versions listed, 1,917 installed, tarballs from
1 KB to 5 MB), serves it from the fixture registry, and in each run:

- `direct`: `npm ci` (fresh npm cache, `--fetch-retries=0`, `--ignore-scripts`) straight at
  the fixture registry;
- `cold`: the same through a fresh `mirrorgate serve` on its defaults (memory queue, file store
  in a new MIRRORGATE_DATA_DIR, the fixture registry as MIRRORGATE_PUBLIC_UPSTREAM), then
  waiting until the worker has mirrored every installed version into the store;
- `replay`: a fresh `mirrorgate serve` on that data directory with the fixture registry
  stopped, and `npm ci` again: it must pass, from the mirror alone (`--replay-public dark`:
  the public upstream a port that takes no connection instead, as a firewall that drops
  packets looks from the proxy);
- `parked` (with `--split`): the cold install once more with the worker parked on a mirror
  target that never answers, so the CPU it shows is the serve path's alone (the worker
  takes its first job and waits); the worker's share of `cold` is the difference.

Reported per run and as min / median over runs: wall seconds and the ratio to `direct`;
mirrorgate's CPU seconds (the kernel's utime + stime, startup excluded) during the install and
after it until everything is mirrored, and per installed version; the event loop's thread
against the others; peak RSS (VmHWM); requests and body bytes the public upstream answered
mirrorgate, packuments and tarballs apart. `--profile DIR` adds one cold run under
`py-spy record` and prints where its CPU went (`bench.stacks`); `--loop uvloop` runs mirrorgate
on uvloop (`bench.loops`).

    PYTHONPATH=src .venv/bin/python bench/cold_scale.py [--packages N] [--runs K] [--split]
        [--profile DIR] [--loop asyncio|uvloop] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, as for -m
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web
from tests.servers.npm import NpmClient
from tests.servers.ports import DarkPort
from tests.servers.processes import MirrorgateProcess
from tests.servers.threaded import ThreadedApp

from bench.cpus import own_core
from bench.disk import filesystem_of
from bench.loops import GC_STATS, LOOPS, child_environment, gc_stats, uses_uvloop
from bench.procstat import MIB, Usage, usage
from bench.scale_tree import Counters, ScaleRegistry, ScaleTree
from bench.stacks import read_profile

MIRROR_WITHIN = 1_800.0
"""Seconds the worker may take to mirror everything after the install."""
SETTLE = 0.5
"""Seconds after /readyz before the CPU baseline is read (startup work winding down)."""


@dataclass
class Run:
    """One run's figures (seconds, bytes); None where the phase was not run."""

    direct: float = 0.0
    cold: float = 0.0
    mirrored_after: float = 0.0
    """Seconds from the install's end until the last version was in the store."""
    install: Usage | None = None
    """mirrorgate's usage during the install (CPU since startup)."""
    total: Usage | None = None
    """... from startup until everything was mirrored."""
    public_install: Counters = field(default_factory=Counters)
    public_total: Counters = field(default_factory=Counters)
    outcomes: dict[str, float] = field(default_factory=dict)
    replay: float | None = None
    replay_usage: Usage | None = None
    parked: Usage | None = None
    parked_wall: float | None = None
    uvloop: bool = False
    gc: dict[str, Any] | None = None
    """The cold run's garbage collections and their seconds, by generation (`--gc-stats`)."""


def timed_ci(npm: NpmClient, registry: str) -> float:
    npm.clear_cache()
    shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
    started = time.perf_counter()
    done = npm.ci(registry=registry, timeout=1_800)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"npm ci against {registry} failed:\n{done.stderr[-3000:]}")
    return elapsed


def mirrored(store: Path) -> int:
    """Versions the file store holds (each is a manifest under `<name>/versions/`)."""
    return sum(1 for _ in store.glob("*/versions/*.json")) + sum(
        1 for _ in store.glob("@*/*/versions/*.json"))


class Blackhole(ThreadedApp):
    """A registry that takes every request and never answers: a worker pointed at it holds its
    first job and does nothing more."""

    def __init__(self) -> None:
        super().__init__(self._build, name="blackhole")

    def _build(self) -> web.Application:
        async def hang(_request: web.Request) -> web.Response:
            await asyncio.sleep(3_600)
            return web.Response(status=504)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", hang)
        return app


class Bench:
    def __init__(self, tree: ScaleTree, public: ScaleRegistry, npm: NpmClient, workdir: Path,
                 loop: str | None, settings: Mapping[str, str], startup: list[str],
                 replay_public: str = "stopped") -> None:
        self.replay_public = replay_public
        self.settings = settings
        self.startup = startup
        self.tree = tree
        self.public = public
        self.npm = npm
        self.workdir = workdir
        self.loop = loop

    def mirrorgate(self, directory: Path,
                   extra: Mapping[str, str] | None = None) -> MirrorgateProcess:
        env = {"MIRRORGATE_PUBLIC_UPSTREAM": self.public.url, "MIRRORGATE_LOG_LEVEL": "warning",
               "BENCH_GC_STATS": str(directory / "gc.json"),
               # a tree with `runtime.py` picks its loop by this; an older one by the shim
               **({"MIRRORGATE_EVENT_LOOP": self.loop} if self.loop is not None else {}),
               **child_environment(self.workdir, loop=self.loop or "asyncio",
                                   startup=self.startup),
               **self.settings, **(extra or {})}
        return MirrorgateProcess("serve", env, workdir=directory).start(timeout=60)

    @staticmethod
    def baseline(process: MirrorgateProcess) -> Usage:
        time.sleep(SETTLE)
        return usage(process.pid)

    def cold(self, run: Run, directory: Path,
             profile: Path | None = None) -> None:
        store = directory / "data" / "store"
        expected = self.tree.versions_installed
        proxy = self.mirrorgate(directory)
        spy = _spy(proxy.pid, profile) if profile is not None else None
        try:
            run.uvloop = uses_uvloop(proxy.pid)
            start, seen = self.baseline(proxy), self.public.counters()
            run.cold = timed_ci(self.npm, proxy.registry_url)
            installed_at = time.perf_counter()
            run.install = usage(proxy.pid).minus(start)
            run.public_install = self.public.counters().minus(seen)
            deadline = time.monotonic() + MIRROR_WITHIN
            while mirrored(store) < expected:
                if time.monotonic() > deadline or proxy.returncode is not None:
                    raise RuntimeError(f"only {mirrored(store)} of {expected} versions were "
                                       f"mirrored:\n{proxy.stderr()[-3000:]}")
                time.sleep(0.2)
            run.mirrored_after = time.perf_counter() - installed_at
            run.total = usage(proxy.pid).minus(start)
            run.public_total = self.public.counters().minus(seen)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(120)
            run.outcomes = {outcome: proxy.metric("mirrorgate_jobs_total", outcome=outcome)
                            for outcome in ("published", "already_present", "retried",
                                            "retired", "tampered")}
        finally:
            if spy is not None and spy.poll() is None:
                spy.kill()
            proxy.terminate()
        run.gc = gc_stats(directory / "gc.json")

    def replay(self, run: Run, directory: Path) -> None:
        if self.replay_public == "dark":
            with DarkPort() as dark:
                run.replay, run.replay_usage = self._timed(
                    directory, {"MIRRORGATE_PUBLIC_UPSTREAM": dark.url})
            return
        self.public.stop()
        try:
            run.replay, run.replay_usage = self._timed(directory, None)
        finally:
            self.public.start()

    def parked(self, run: Run, directory: Path) -> None:
        with Blackhole() as hole:
            # killed, not stopped: its worker holds a job the blackhole never answers
            run.parked_wall, run.parked = self._timed(
                directory, {"MIRRORGATE_MIRROR_TARGET": hole.url,
                            "MIRRORGATE_DRAIN_TIMEOUT": "1"}, kill=True)

    def _timed(self, directory: Path, extra: Mapping[str, str] | None, *,
               kill: bool = False) -> tuple[float, Usage]:
        """`npm ci` through a fresh mirrorgate on `directory`: its wall, and mirrorgate's usage
        from /readyz on."""
        proxy = self.mirrorgate(directory, extra)
        try:
            start = self.baseline(proxy)
            wall = timed_ci(self.npm, proxy.registry_url)
            return wall, usage(proxy.pid).minus(start)
        finally:
            if kill:
                proxy.kill()
            else:
                proxy.terminate()

    @contextmanager
    def directory(self, label: str) -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.workdir))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def _spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    output.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--threads",
         # only the thread holding the GIL, without pausing the process: otherwise threads
         # waiting for the GIL, on a queue or in fsync are sampled as busy
         "--nonblocking", "--gil",
         "--output", str(output)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the install starts
    return process


# --- reporting --------------------------------------------------------------------------------

def _mb(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


def _line(index: int, run: Run, versions: int) -> str:
    assert run.install is not None
    assert run.total is not None
    worker = run.total.cpu - run.install.cpu
    text = (f"run {index}: direct {run.direct:6.1f} s | cold {run.cold:6.1f} s "
            f"({run.cold / run.direct:.2f}x), mirrored {run.mirrored_after:5.1f} s later | "
            f"CPU {run.install.cpu:5.1f} s during the install + {worker:5.1f} s after = "
            f"{run.total.cpu:5.1f} s ({run.total.cpu * 1000 / versions:.1f} ms/version; loop "
            f"thread {run.total.main:.1f} s, others {run.total.threads:.1f} s) | peak RSS "
            f"{run.total.peak_rss / MIB:.0f} MiB | {'uvloop' if run.uvloop else 'asyncio'}")
    if run.replay is not None and run.replay_usage is not None:
        text += (f" | replay {run.replay:6.1f} s, CPU {run.replay_usage.cpu:.1f} s "
                 f"({run.replay_usage.cpu * 1000 / versions:.1f} ms/version), peak RSS "
                 f"{run.replay_usage.peak_rss / MIB:.0f} MiB")
    if run.gc is not None:
        counts, seconds = run.gc["collections"], run.gc["seconds"]
        shown = ", ".join(f"{n:,} in {t:.1f} s" for n, t in zip(counts, seconds, strict=True))
        text += f" | GC {sum(seconds):.1f} s (generations 0, 1, 2: {shown})"
    if run.parked is not None:
        text += (f" | parked worker: serve CPU {run.parked.cpu:.1f} s "
                 f"({run.parked.cpu * 1000 / versions:.1f} ms/version), peak RSS "
                 f"{run.parked.peak_rss / MIB:.0f} MiB")
    return text


def _stat(label: str, values: list[float], unit: str, fmt: str = "{:.1f}") -> str:
    if not values:
        return ""
    shown = ", ".join(fmt.format(v) for v in values)
    return (f"  {label:<44} min {fmt.format(min(values))} {unit}, median "
            f"{fmt.format(statistics.median(values))} {unit}   ({shown})")


def report(runs: list[Run], tree: ScaleTree) -> None:
    versions = tree.versions_installed
    done = [r for r in runs if r.install is not None and r.total is not None]
    install = [r.install.cpu for r in done if r.install is not None]
    total = [r.total.cpu for r in done if r.total is not None]
    print(f"\nsummary over {len(done)} runs, {versions} versions installed:")
    rows = [
        _stat("direct npm ci", [r.direct for r in done], "s"),
        _stat("cold npm ci through mirrorgate", [r.cold for r in done], "s"),
        _stat("cold / direct", [r.cold / r.direct for r in done], "x", "{:.2f}"),
        _stat("mirrored, seconds after the install", [r.mirrored_after for r in done], "s"),
        _stat("CPU during the install", install, "s"),
        _stat("CPU after the install until mirrored", [t - i for t, i in zip(total, install,
                                                                          strict=True)], "s"),
        _stat("CPU in all", total, "s"),
        _stat("CPU per version, in all", [t * 1000 / versions for t in total], "ms"),
        _stat("  of which the event loop's thread", [r.total.main for r in done
                                                      if r.total is not None], "s"),
        _stat("peak RSS", [r.total.peak_rss / MIB for r in done if r.total is not None],
              "MiB", "{:.0f}"),
    ]
    parked = [r for r in done if r.parked is not None]
    if parked:
        serve = [r.parked.cpu for r in parked if r.parked is not None]
        worker = [r.total.cpu - r.parked.cpu for r in parked
                  if r.total is not None and r.parked is not None]
        rows += [
            _stat("serve path alone (worker parked), CPU", serve, "s"),
            _stat("  per version", [s * 1000 / versions for s in serve], "ms"),
            _stat("worker = in all - serve alone, CPU", worker, "s"),
            _stat("  per version", [w * 1000 / versions for w in worker], "ms"),
            _stat("serve alone, peak RSS", [r.parked.peak_rss / MIB for r in parked
                                            if r.parked is not None], "MiB", "{:.0f}"),
        ]
    replays = [r for r in done if r.replay is not None and r.replay_usage is not None]
    if replays:
        rows += [
            _stat("replay, public gone", [r.replay for r in replays if r.replay], "s"),
            _stat("replay CPU per version", [r.replay_usage.cpu * 1000 / versions
                                             for r in replays if r.replay_usage], "ms"),
            _stat("replay peak RSS", [r.replay_usage.peak_rss / MIB for r in replays
                                      if r.replay_usage], "MiB", "{:.0f}"),
        ]
    print("\n".join(row for row in rows if row))
    last = done[-1]
    for label, counters in (("during the install", last.public_install),
                            ("in all, until mirrored", last.public_total)):
        kinds = ", ".join(f"{kind} {counters.requests[kind]:,} requests / "
                          f"{_mb(counters.bytes[kind])}" for kind in sorted(counters.requests))
        print(f"  public upstream answered mirrorgate {label}: {kinds}")
    tarballs = last.public_total.bytes.get("tarball", 0)
    print(f"  public tarball bytes per cold install: {_mb(tarballs)} for "
          f"{_mb(tree.stats['tarball_bytes'])} of tarballs installed "
          f"({tarballs / max(1, tree.stats['tarball_bytes']):.2f}x)")
    print(f"  worker outcomes (last run): {last.outcomes}")


def _describe(tree: ScaleTree) -> str:
    s = tree.stats
    return (f"tree: {s['names']:,} names, {s['versions_listed']:,} versions listed, "
            f"{s['versions_installed']:,} installed ({s.get('lockfile_entries', '?')} lockfile "
            f"entries); packuments {_mb(s['packument_bytes'])} in all (median "
            f"{s['packument_median'] / 1e3:.0f} KB, p90 {s['packument_p90'] / 1e3:.0f} KB, "
            f"largest {_mb(s['packument_max'])}, {s['packuments_over_1mb']} over 1 MB); "
            f"tarballs {_mb(s['tarball_bytes'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--packages", type=int, default=1_700, help="names in the tree")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--split", action="store_true",
                        help="add a run with the worker parked, for the serve path alone")
    parser.add_argument("--no-replay", action="store_true")
    parser.add_argument("--replay-public", choices=("stopped", "dark"), default="stopped",
                        help="the public upstream during the replay: stopped (its port refuses "
                        "connections) or dark (it takes none: each connect waits out its timeout)")
    parser.add_argument("--profile", type=Path, help="py-spy one more cold run into DIR")
    parser.add_argument("--loop", choices=LOOPS, default=None,
                        help="the event loop mirrorgate runs on (default: its own choice, "
                        "MIRRORGATE_EVENT_LOOP=auto on a tree that has it)")
    parser.add_argument("--startup", action="append", default=[], metavar="CODE",
                        help="a line of Python every mirrorgate runs first (e.g. \"import gc; "
                        "gc.set_threshold(50_000, 20, 100)\"); repeatable")
    parser.add_argument("--gc-stats", action="store_true",
                        help="count mirrorgate's garbage collections and their seconds")
    parser.add_argument("--set", action="append", default=[], metavar="VARIABLE=VALUE",
                        help="a setting for every mirrorgate started (e.g. "
                        "MIRRORGATE_CACHE_MAX_BYTES=134217728); repeatable")
    parser.add_argument("--own-core", action="store_true",
                        help="mirrorgate on the first CPU alone, npm and the fixture registry on "
                        "the others: mirrorgate as deployed, on a host apart from the build's")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "mirrorgate-bench",
                        help="where the generated tree is kept between runs")
    options = parser.parse_args()
    if options.own_core:
        try:  # before the registry's thread starts: it and npm inherit the other CPUs
            options.startup.append(own_core())
        except ValueError as error:
            parser.error(str(error))
    # the children run in directories of their own: a relative PYTHONPATH (`src`) would
    # silently import whatever mirrorgate the virtualenv has installed instead of this tree
    os.environ["PYTHONPATH"] = os.pathsep.join(
        str(Path(entry).resolve()) for entry in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if entry)
    started = time.perf_counter()
    tree = ScaleTree.build(options.cache, options.packages, options.seed)
    workdir = Path(tempfile.mkdtemp(prefix="bench-cold-scale-"))
    try:
        with ScaleRegistry(tree) as public:
            npm = NpmClient(workdir / "npm")
            tree.ensure_lockfile(npm, public.url)
            print(_describe(tree))
            print(f"prepared in {time.perf_counter() - started:.0f} s; mirrorgate on "
                  f"{options.loop or 'its default loop'}"
                  f"{''.join(f', {item}' for item in options.set)}"
                  f"{''.join(f'; first {code!r}' for code in options.startup)}; "
                  f"{os.cpu_count()} CPUs; working on {filesystem_of(workdir)} "
                  "(bench.disk)", flush=True)
            settings = dict(item.split("=", 1) for item in options.set)
            startup = [*options.startup, *([GC_STATS] if options.gc_stats else [])]
            bench = Bench(tree, public, npm, workdir, options.loop, settings, startup,
                          options.replay_public)
            runs: list[Run] = []
            phases: list[tuple[str, Callable[[Run, Path], None]]] = [("cold", bench.cold)]
            if not options.no_replay:
                phases.append(("replay", bench.replay))
            for index in range(1, options.runs + 1):
                run = Run()
                run.direct = timed_ci(npm, public.url)
                with bench.directory("run") as directory:
                    for _label, phase in phases:
                        phase(run, directory)
                if options.split:
                    with bench.directory("parked") as directory:
                        bench.parked(run, directory)
                runs.append(run)
                print(_line(index, run, tree.versions_installed), flush=True)
            if options.loop == "uvloop" and not all(run.uvloop for run in runs):
                raise RuntimeError("mirrorgate did not load uvloop")
            if runs:
                report(runs, tree)
            if options.profile is not None:
                output = options.profile / f"cold-scale-{options.loop or 'default'}.pyspy.txt"
                run = Run()
                with bench.directory("profiled") as directory:
                    bench.cold(run, directory, profile=output)
                assert run.total is not None
                print(f"\nprofile of one cold run (install and mirroring), {output}: CPU "
                      f"{run.total.cpu:.1f} s, of which the event loop's thread "
                      f"{run.total.main:.1f} s")
                print("\n".join(read_profile(output).lines()))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
