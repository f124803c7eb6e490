"""What npm's own cache hides from mirrorgate, and what enqueuing at packument time would catch.

The report: npm served 83 of 96 tarballs from its cache, so only 13 versions were mirrored. The
question (issue 48): should serving a packument enqueue the versions a lockfile-less install
resolves? The proxy sees the packument request, not the range npm resolves against it, so the
only versions it could enqueue are a guess: `latest` (or every version, which is the whole
package). Measured here with the real npm on a tree of `--packages` names, a third of which
have a newer major as `latest` than the `^1.0.0` the tree asks for (as real trees do):

1. npm installs the tree straight from the public registry (its cache now holds every tarball
   and packument: a developer who installed before mirrorgate existed, or another project);
2. the lockfile and node_modules are removed and the same npm, same cache, installs through a
   fresh mirrorgate;
3. printed: the packument and tarball requests mirrorgate saw, the versions it enqueued, the
   versions the install resolved, and how many of those are their packument's `latest`.

    .venv/bin/python -m bench.npm_cache_gap [--packages N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import EPOCH, FixturePackage, make_package, make_version
from tests.servers.processes import MirrorgateProcess

VERSIONS = 10


def build_tree(count: int) -> list[FixturePackage]:
    """bench-i depends on bench-(2i+1) and bench-(2i+2) at ^1.0.0; every third package also
    has a 2.0.0, its `latest`, which the tree does not resolve."""
    packages = []
    for index in range(count):
        name = f"gap-{index:03d}"
        dependencies = {f"gap-{child:03d}": "^1.0.0"
                        for child in (2 * index + 1, 2 * index + 2) if child < count}
        versions = [make_version(name, f"1.0.{patch}", dependencies,
                                 published=EPOCH + timedelta(days=patch))
                    for patch in range(VERSIONS)]
        if index % 3 == 2:
            versions.append(make_version(name, "2.0.0", dependencies,
                                         published=EPOCH + timedelta(days=VERSIONS)))
        packages.append(make_package(name, versions))
    return packages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=96)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="npm-cache-gap-"))
    tree = build_tree(args.packages)
    latest = {p.name: p.dist_tags["latest"] for p in tree}
    public = FixtureRegistry(*tree)
    public.start()
    npm = NpmClient(workdir / "npm")
    npm.write_project({"gap-000": "^1.0.0"})
    proxy: MirrorgateProcess | None = None
    try:
        done = npm.install(registry=public.url, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        (npm.project / "package-lock.json").unlink()
        shutil.rmtree(npm.project / "node_modules")
        proxy = MirrorgateProcess("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                                            "MIRRORGATE_LOG_LEVEL": "warning"},
                                  workdir=workdir / "mirrorgate").start(timeout=30)
        done = npm.install(registry=proxy.registry_url, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        lock = json.loads((npm.project / "package-lock.json").read_text(encoding="utf-8"))
        resolved = {path.rpartition("node_modules/")[2]: entry["version"]
                    for path, entry in lock["packages"].items() if path}
        at_latest = sum(1 for name, version in resolved.items() if latest[name] == version)
        figures = {
            "packument requests": proxy.metric("mirrorgate_requests_total", route="packument"),
            "tarball requests": proxy.metric("mirrorgate_requests_total", route="tarball"),
            "versions enqueued": proxy.metric("mirrorgate_jobs_enqueued_total"),
            "versions resolved": len(resolved),
            "resolved at their packument's latest": at_latest,
        }
        for label, value in figures.items():
            print(f"{label:<40} {value:.0f}")
    finally:
        if proxy is not None:
            proxy.terminate()
        public.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
