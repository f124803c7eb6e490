"""A cold `npm ci` through mirrorgate in front of Verdaccio, against the same `npm ci` straight
at the public upstream: is going through the proxy about as fast as going direct?

Builds a ~100-package tree (a binary dependency tree, each package with 20 versions and time,
tarballs of realistic sizes from 1.5 KB to 140 KB plus a few of 2 to 4 MB), serves it from the
fixture registry (gzip when accepted, as public registries do), writes the lockfile with one
install straight from it, then alternates, `--rounds` times, in one run:

- `direct`: `npm ci` against the public upstream;
- `jwt` / `legacy`: `npm ci` through a fresh `mirrorgate serve` (nothing cached) whose private
  upstream is a Verdaccio signing JWT tokens / on its default legacy (bcrypt) tokens, with
  MIRRORGATE_PRIVATE_TOKEN set.

Phase `miss` keeps both Verdaccios empty (the worker mirrors into a throwaway file store), so
every version is a private miss, the first install of a new dependency. Phase `hit` first
mirrors everything into both Verdaccios, so every tarball is served from private, the steady
state. Every run has a fresh npm cache. Printed: median seconds, the ratio to `direct` of the
same phase, and the private requests per install (mirrorgate's /metrics). Target (issue 11):
`jwt` <= 1.10 x `direct`.

    .venv/bin/python -m bench.cold_install [--packages N] [--rounds R] [--phases miss,hit]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import EPOCH, FixturePackage, make_package, make_version
from tests.servers.processes import MirrorgateProcess, ServerUnavailableError, wait_for
from tests.servers.verdaccio import Verdaccio

VERSIONS = 20
BIG = {7: 2_000_000, 31: 4_000_000, 64: 3_000_000}
"""Package index -> size of its resolved tarball: a few large ones, as real trees have."""
TARGET = 1.10


def build_tree(count: int) -> list[FixturePackage]:
    """`count` packages; bench-i depends on bench-(2i+1) and bench-(2i+2) with caret ranges,
    so the tree is log2(count) deep; the latest of VERSIONS versions is what resolves."""
    packages = []
    for index in range(count):
        name = f"bench-{index:03d}"
        dependencies = {f"bench-{child:03d}": "^1.0.0"
                        for child in (2 * index + 1, 2 * index + 2) if child < count}
        versions = [make_version(name, f"1.0.{patch}", dependencies,
                                 size=BIG.get(index) if patch == VERSIONS - 1 else None,
                                 published=EPOCH + timedelta(days=patch))
                    for patch in range(VERSIONS)]
        for version in versions[:3]:
            version.manifest["deprecated"] = "upgrade to 1.0.3 or later"
        packages.append(make_package(name, versions))
    return packages


def timed_ci(npm: NpmClient, registry: str) -> float:
    npm.clear_cache()
    shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
    started = time.perf_counter()
    done = npm.ci(registry=registry, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"npm ci against {registry} failed:\n{done.stderr[-3000:]}")
    return elapsed


def private_requests(proxy: MirrorgateProcess) -> float:
    return proxy.metric("mirrorgate_upstream_seconds_count", upstream="private")


class Setup:
    def __init__(self, workdir: Path, public: FixtureRegistry, verdaccios: dict[str, Verdaccio],
                 npm: NpmClient) -> None:
        self.workdir = workdir
        self.public = public
        self.verdaccios = verdaccios
        self.npm = npm

    def mirrorgate(self, kind: str, target: str) -> MirrorgateProcess:
        verdaccio = self.verdaccios[kind]
        return MirrorgateProcess("serve", {
            "MIRRORGATE_PUBLIC_UPSTREAM": self.public.url,
            "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
            "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
            "MIRRORGATE_MIRROR_TARGET": target,
            "MIRRORGATE_LOG_LEVEL": "warning",
        }).start(timeout=30)

    def through(self, kind: str, phase: str) -> tuple[float, float]:
        """(seconds, private requests) of one `npm ci` through a fresh mirrorgate."""
        throwaway = tempfile.mkdtemp(prefix="mirror-", dir=self.workdir)
        target = f"file://{throwaway}" if phase == "miss" else self.verdaccios[kind].url
        proxy = self.mirrorgate(kind, target)
        try:
            seconds = timed_ci(self.npm, proxy.registry_url)
            return seconds, private_requests(proxy)
        finally:
            proxy.terminate()
            shutil.rmtree(throwaway, ignore_errors=True)

    def mirror_everything(self, kind: str, names: list[str]) -> None:
        """One install through mirrorgate publishing into the Verdaccio, until all is there."""
        verdaccio = self.verdaccios[kind]
        proxy = self.mirrorgate(kind, verdaccio.url)
        try:
            timed_ci(self.npm, proxy.registry_url)
            wait_for(lambda: all(verdaccio.versions(name) for name in names), timeout=600,
                     message=f"every package to be mirrored into the {kind} Verdaccio")
        finally:
            proxy.terminate()


def run_phase(setup: Setup, phase: str, rounds: int) -> dict[str, tuple[list[float],
                                                                          list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {
        name: ([], []) for name in ("direct", "jwt", "legacy")}
    runs: dict[str, Callable[[], tuple[float, float]]] = {
        "direct": lambda: (timed_ci(setup.npm, setup.public.url), 0.0),
        "jwt": lambda: setup.through("jwt", phase),
        "legacy": lambda: setup.through("legacy", phase),
    }
    for round_index in range(rounds):
        order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for name in order:
            seconds, private = runs[name]()
            results[name][0].append(seconds)
            results[name][1].append(private)
            print(f"  {phase} round {round_index + 1} {name:<7} {seconds:6.2f} s  "
                  f"private requests {private:g}", flush=True)
    return results


def report(phase: str, results: dict[str, tuple[list[float], list[float]]],
           packages: int) -> bool:
    direct = statistics.median(results["direct"][0])
    print(f"\nphase {phase}: {packages} packages, median of {len(results['direct'][0])} runs")
    print(f"{'how':<8} {'median s':>9} {'vs direct':>10} {'private req/install':>20}")
    for name, (seconds, private) in results.items():
        median = statistics.median(seconds)
        print(f"{name:<8} {median:9.2f} {median / direct:9.2f}x {statistics.median(private):20g}")
    ratio = statistics.median(results["jwt"][0]) / direct
    verdict = "meets" if ratio <= TARGET else "misses"
    print(f"jwt {verdict} the target of <= {TARGET:.2f}x direct ({ratio:.2f}x)")
    return ratio <= TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phases", default="miss,hit")
    options = parser.parse_args()
    phases = [phase for phase in options.phases.split(",") if phase]
    workdir = Path(tempfile.mkdtemp(prefix="bench-cold-install-"))
    packages = build_tree(options.packages)
    names = [package.name for package in packages]
    try:
        with FixtureRegistry(*packages) as public, \
                Verdaccio(workdir / "jwt") as jwt, \
                Verdaccio(workdir / "legacy", tokens="legacy") as legacy:
            npm = NpmClient(workdir / "npm")
            npm.write_project({names[0]: "^1.0.0"}, name="bench-app")
            done = npm.install(registry=public.url, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"the lockfile install failed:\n{done.stderr[-3000:]}")
            installed = len(npm.lockfile()["packages"]) - 1
            print(f"lockfile: {installed} packages; npm ci with a fresh cache each run")
            setup = Setup(workdir, public, {"jwt": jwt, "legacy": legacy}, npm)
            met = True
            for phase in phases:
                if phase == "hit":
                    for kind in ("jwt", "legacy"):
                        setup.mirror_everything(kind, names)
                met = report(phase, run_phase(setup, phase, options.rounds),
                             installed) and met
    except ServerUnavailableError as error:
        print(f"cannot run: {error}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
