"""The tarball reader's cost on hostile shapes: peak memory and CPU of one reading, each shape
read in a fresh process (`npm.contents.contents_of`, the relay's reading: the install-scripts
scan and the release signals' files), this tree against a baseline revision's `src/`.

Run by hand from the repository root:
`PYTHONPATH=src .venv/bin/python -m bench.tarball_reader --before main` (`--shapes a,b` for
some of them; `--before ''` for this tree alone). For each shape: its compressed size, the
reading's CPU seconds (user + system, `getrusage`), the peak resident memory it added over
the process before reading, and what the reader said (refused with which reason, or read).
docs/serving.md#a-tarball-read-as-npm-reads-it keeps the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import zstandard
from tests.npm.tarshapes import END, PLAIN, file, pax

MIB = 1024 * 1024


def pax_paths(count: int = 3) -> bytes:
    """`count` entries whose pax paths are 1,000 folders of 999 characters (issue 53's)."""
    body = b""
    for index in range(count):
        folders = "/".join(f"{index}{folder:04d}".ljust(999, "d") for folder in range(1000))
        body += pax([("path", f"package/{folders}/x.js")]) + file("package/x.js", b"1")
    return gzip.compress(file("package/package.json", PLAIN) + body + END, mtime=0)


def zstd_frames(size: int = 6 * MIB) -> bytes:
    """`size` bytes of empty zstd frames, then the package in one frame."""
    empty = zstandard.ZstdCompressor().compress(b"")
    tar = file("package/package.json", PLAIN) + END
    return empty * (size // len(empty)) + zstandard.ZstdCompressor().compress(tar)


def gzip_members(size: int = 6 * MIB) -> bytes:
    """`size` bytes of empty gzip members, then the package in one member."""
    empty = gzip.compress(b"", mtime=0)
    tar = file("package/package.json", PLAIN) + END
    return empty * (size // len(empty)) + gzip.compress(tar, mtime=0)


def pax_records(headers: int = 64) -> bytes:
    """`headers` pax headers of 1 MiB each, every record the shortest a `path` can be."""
    record = b"9 path=a\n"
    body = file("PaxHeader/x", record * (MIB // len(record)), b"x")
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(file("package/package.json", PLAIN))]
    for _ in range(headers):
        parts.append(deflate.compress(body + file("package/a.js", b"1")))
    parts += [deflate.compress(END), deflate.flush()]
    return b"".join(parts)


def entries(count: int = 199_000) -> bytes:
    """`count` empty files under short names."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(file("package/package.json", PLAIN))]
    parts += [deflate.compress(file(f"package/{index:x}", b"")) for index in range(count)]
    parts += [deflate.compress(END), deflate.flush()]
    return b"".join(parts)


def deep_package_json(depth: int = 500_000) -> bytes:
    document = b'{"name":"x","a":' + b"[" * depth + b"]" * depth + b"}"
    return gzip.compress(file("package/package.json", document) + END, mtime=0)


SHAPES: dict[str, Callable[[], bytes]] = {
    "pax-paths": pax_paths, "zstd-frames": zstd_frames, "gzip-members": gzip_members,
    "pax-records": pax_records, "entries": entries, "deep-package-json": deep_package_json,
}

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
        for name in arguments.shapes.split(","):
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
