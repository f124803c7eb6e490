"""The tarball reader's cost on hostile shapes: peak memory and CPU of one reading, each shape
read in a fresh process (`npm.contents.contents_of`, the relay's reading: the install-scripts
scan and the release signals' files), this tree against a baseline revision's `src/`.

Run by hand from the repository root:
`PYTHONPATH=src .venv/bin/python -m bench.tarball_reader --before main` (`--shapes a,b` for
some of them; `--before ''` for this tree alone). For each shape: its compressed size, the
reading's CPU seconds (user + system, `getrusage`), the peak resident memory it added over
the process before reading, and what the reader said (refused with which reason, or read).
docs/serving.md#the-readers-bounds-against-what-npm-accepts keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

from tests.npm.bombs import (
    BOMBS,
    MIB,
    entries,
    gzip_members,
    pax_paths,
    pax_records,
    zstd_frames,
)

SHAPES: dict[str, Callable[[], bytes]] = {
    "pax-paths": pax_paths, "zstd-empty-frames": zstd_frames, "gzip-members": gzip_members,
    "pax-records": pax_records, "entries": entries, **BOMBS,
}
"""issue 53's shapes (`tests/npm/bombs.py`): the two findings' first, then the costliest a
reading can be within the bounds, then the rest of the eight bombs."""

CHILD = """
import json, resource, sys
from mirrorgate.npm.contents import contents_of
data = open(sys.argv[1], 'rb').read()
def used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
before_rss, before = rss(), used()
read = contents_of(data)
cpu = used() - before
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"cpu": cpu, "peak": peak - before_rss, "problem": read.problem}))
"""


def _baseline_source(revision: str, into: Path) -> str:
    """`src/` of `revision` unpacked under `into`; returns the commit it names."""
    commit = subprocess.run(["git", "rev-parse", "--short", revision],
                            capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "src"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def _read(source: Path, tarball: Path, limit: int) -> dict[str, object]:
    """One reading in a fresh process, its memory capped at `limit` bytes."""
    def cap() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    done = subprocess.run([sys.executable, "-c", CHILD, str(tarball)],
                          env={**os.environ, "PYTHONPATH": str(source)},
                          capture_output=True, text=True, preexec_fn=cap, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"failed": tail[0][:120]}
    found: dict[str, object] = json.loads(done.stdout)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="the baseline revision ('' for none)")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--limit-gib", type=float, default=4.0,
                        help="address space each reading may take (GiB) before it fails")
    arguments = parser.parse_args()
    limit = int(arguments.limit_gib * 1024 * MIB)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        trees = {"after": Path("src").resolve()}
        if arguments.before:
            commit = _baseline_source(arguments.before, work / "before")
            trees = {f"before ({commit})": work / "before" / "src", **trees}
        for name in dict.fromkeys(arguments.shapes.split(",")):
            tarball = work / f"{name}.tgz"
            tarball.write_bytes(SHAPES[name]())
            print(f"{name}: {tarball.stat().st_size:,} bytes")
            for label, source in trees.items():
                found = _read(source, tarball, limit)
                if "failed" in found:
                    print(f"  {label:>18}: failed ({found['failed']})")
                    continue
                cpu, peak = float(str(found["cpu"])), int(str(found["peak"]))
                problem = found["problem"] or "read"
                print(f"  {label:>18}: {cpu:6.2f} s CPU, +{peak / MIB:7.1f} MiB peak; "
                      f"{str(problem)[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
