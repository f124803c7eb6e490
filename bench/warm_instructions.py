"""User-space instructions a warm packument hit costs: mirrorgate against the bare handler.

Run by hand, from the repository root: `.venv/bin/python -m bench.warm_instructions`
(`--src DIR` measures another tree's `src`, e.g. main's, with this harness). Exact where
`bench.serve_packuments`' CPU seconds follow the machine's load: `mirrorgate serve` (uvloop,
the fixture upstream of `serve_packuments`) runs under valgrind's callgrind with the
instrumentation off; once its cache is warm it is switched on, zeroed after a warm-up, and
dumped after `--requests` keep-alive GETs (npm's headers, 4 connections that always have one
waiting, so the loop is never idle while counted). The bare aiohttp handler of
`serve_packuments` is then counted the same way, answering the very bytes mirrorgate answered.
Needs valgrind (`callgrind_control` beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.loops import child_environment
from bench.serve_packuments import (
    ACCEPT_ENCODING,
    ACCEPTS,
    REPEATED_HEADERS,
    _get,
    _stop,
    _wait_until_up,
    serve_environment,
)

CONNECTIONS = 4
WARMUP = 200
UP_WITHIN = 300.0
"""Seconds a server under valgrind may take to answer first (it runs 20 to 50 times slower)."""
_TOTALS = re.compile(r"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


async def _drive(port: int, path: str, form: str, requests: int) -> int:
    """`requests` GETs over `CONNECTIONS` keep-alive connections; the number answered 200."""
    head = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {ACCEPTS[form]}\r\n"
            f"Accept-Encoding: {ACCEPT_ENCODING}\r\nUser-Agent: npm/11 bench\r\n"
            "Connection: keep-alive\r\n\r\n").encode()
    ok = 0

    async def one(count: int) -> None:
        nonlocal ok
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(count):
            writer.write(head)
            answer = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", answer)
            await reader.readexactly(int(length.group(1)) if length else 0)
            ok += answer.startswith(b"HTTP/1.1 200 ")
        writer.close()

    share = requests // CONNECTIONS
    await asyncio.gather(*(one(share) for _ in range(CONNECTIONS)))
    return ok


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True,
                   timeout=120)


def _counted(process: subprocess.Popen[bytes], out: Path, port: int, path: str, form: str,
             requests: int, keep: Path | None = None) -> float:
    """Instructions a request, `requests` of them counted after a warm-up."""
    _control(process.pid, "-i", "on")
    asyncio.run(_drive(port, path, form, WARMUP))
    _control(process.pid, "-z")
    answered = asyncio.run(_drive(port, path, form, requests))
    if answered != requests // CONNECTIONS * CONNECTIONS:
        raise SystemExit(f"{answered} of {requests} answered 200")
    _control(process.pid, "-d")
    _control(process.pid, "-i", "off")
    dumps, totals = _dumped(out)
    if keep is not None:  # for callgrind_annotate
        shutil.copy(dumps[-1], keep / f"{out.stem}-{path.rsplit('/', 1)[-1]}.callgrind")
    for dump in dumps:
        dump.unlink()
    return int(totals.group(1)) / answered


def _dumped(out: Path, within: float = 60.0) -> tuple[list[Path], re.Match[str]]:
    """Callgrind's dumps of `out`, oldest first, once the newest is whole: `callgrind_control
    -d` can return while the dump is still being written (its totals line comes last), and a
    busy machine once read it half-written."""
    deadline = time.monotonic() + within
    while True:
        dumps = sorted(out.parent.glob(out.name + "*"), key=lambda found: found.stat().st_mtime)
        totals = _TOTALS.search(dumps[-1].read_text(errors="replace")) if dumps else None
        if totals is not None:
            return dumps, totals
        if time.monotonic() > deadline:
            raise SystemExit(f"callgrind wrote no whole dump of {out.name} within {within:g} s")
        time.sleep(0.2)


def _valgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", "--dump-instr=no"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="the `src` directory of the tree to measure")
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--form", choices=sorted(ACCEPTS), default="full")
    parser.add_argument("--no-bare", action="store_true", help="mirrorgate alone")
    parser.add_argument("--keep", type=Path, help="a directory to keep callgrind's dumps in")
    args = parser.parse_args()
    if shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (callgrind_control)")

    from tests.servers.fixture_registry import FixtureRegistry
    from tests.servers.packages import realistic_package
    from tests.servers.ports import free_port

    root = Path(__file__).resolve().parents[1]
    workdir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    packages = {"express": realistic_package("bench-express"),
                "large": realistic_package("bench-large", versions=3_500, manifest_size=2_800)}
    upstream = FixtureRegistry(*packages.values()).start()
    src = args.src or os.environ.get("PYTHONPATH", str(root / "src"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        env = serve_environment(workdir, upstream.url, port, pythonpath=src, settings={
            "MIRRORGATE_CACHE_TTL": "3000", "MIRRORGATE_EVENT_LOOP": "uvloop"})
        out = workdir / "mirrorgate.callgrind"
        mirrorgate = subprocess.Popen(
            [*_valgrind(out), sys.executable, "-m", "mirrorgate", "serve"], env=env,
            cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        processes.append(mirrorgate)
        base = f"http://127.0.0.1:{port}/npm/"
        _wait_until_up(base + "-/ping", UP_WITHIN, mirrorgate, each=30)
        recorded = {}
        for key, package in packages.items():
            _status, headers, body = _get(base + package.name, args.form, timeout=600)
            (workdir / f"{key}.body").write_bytes(body)
            recorded["/" + package.name] = {
                "body": str(workdir / f"{key}.body"),
                "headers": {h: headers[h] for h in REPEATED_HEADERS if h in headers}}
        counts: dict[str, dict[str, float]] = {"mirrorgate": {}}
        for key, package in packages.items():
            counts["mirrorgate"][key] = _counted(mirrorgate, out, port, "/npm/" + package.name,
                                                 args.form, args.requests, args.keep)
        _stop(mirrorgate)
        if not args.no_bare:
            answers = workdir / "answers.json"
            answers.write_text(json.dumps(recorded))
            bare_port = free_port()
            out = workdir / "bare.callgrind"
            bare = subprocess.Popen(
                [*_valgrind(out), sys.executable, "-m", "bench.serve_packuments", "--bare",
                 str(bare_port), str(answers)],
                env={**os.environ, **child_environment(workdir, loop="uvloop")}, cwd=root,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
            processes.append(bare)
            _wait_until_up(f"http://127.0.0.1:{bare_port}/" + packages["express"].name,
                           UP_WITHIN, bare, each=30)
            counts["bare"] = {key: _counted(bare, out, bare_port, "/" + package.name,
                                            args.form, args.requests, args.keep)
                              for key, package in packages.items()}
        print(f"src {src}; {args.requests} warm GETs each ({args.form}), instructions a hit:")
        for label, found in counts.items():
            print(f"  {label:10} " + "   ".join(f"{key} {value / 1e3:.1f}k"
                                                for key, value in found.items()))
        if "bare" in counts:
            print("  bare / mirrorgate: " + "   ".join(
                f"{key} {counts['bare'][key] / counts['mirrorgate'][key]:.3f}x"
                for key in packages))
        return 0
    finally:
        for process in processes:
            _stop(process)
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
