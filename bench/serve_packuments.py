"""Warm-cache packument GETs: mirrorgate against Verdaccio and a bare aiohttp handler.

Run by hand, from the repository root: `.venv/bin/python -m bench.serve_packuments`. One run
starts everything on 127.0.0.1 and takes about two minutes:

- the fixture public upstream (`tests.servers.FixtureRegistry`, in a thread of this process)
  serving an express-sized packument (about 750 KB full, 300 versions) and a large one
  (about 10 MB, 3,500 versions);
- `mirrorgate serve` (the real command, in its own process) with that upstream;
- Verdaccio 6.8.0 with the same upstream as its uplink (what a team would run otherwise);
- a bare aiohttp handler (its own process) answering pre-computed bytes: the very body and
  headers mirrorgate answered for the same request, so both send the same bytes on the wire
  (gzip included: npm sends `Accept-Encoding: gzip,deflate`). It is the limit for a Python
  server here: mirrorgate can only approach it.

Each server is warmed (its cache filled), then a load generator in its own process drives
keep-alive GETs over a fixed number of connections, with npm's own Accept and
Accept-Encoding headers (`--form full`, the default, is what npm 11 sends when it installs;
`--form abbreviated` is npm 10's), for a fixed time, and reports requests/s, p50 and p99. The
servers are pinned to CPU 0 and the load generator to CPU 1 (when the machine allows it), so every
server gets the same single core and the generator never competes with it. The generator is a
raw asyncio protocol (no HTTP client library) so that it is not the bottleneck.

mirrorgate runs with `MIRRORGATE_CACHE_TTL=300` so no revalidation lands inside a measurement:
the run measures warm hits, which is what the target is about (a revalidation is one upstream
round trip per package per TTL, answered 304).

Beside each rate, the server's CPU seconds a request (the kernel's count over the round, its
warm-up included, the median round's): on a shared machine they follow the code more than
the rate does.

Targets (express-sized packument): mirrorgate >= 20x Verdaccio's requests/s and >= 50% of the
bare handler's.

`--loop uvloop` runs mirrorgate on uvloop and `--bare-loop uvloop` the bare handler
(`bench.loops`, no change to either program); both default to asyncio's own loop.

`--policies` measures policy sets (docs/configuration.md#policy-sets) instead: mirrorgate with
a tokens file of two clients, one judged by the default rules and one by `[policy.team]`, and
the same warm GETs sent with one policy in use (every connection the default client's token)
and with two (half the connections each client's), in alternating rounds; the only difference
between the two is which cached entry each request reads.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpus import pin
from bench.loops import LOOPS, child_environment, uses_uvloop
from bench.procstat import usage

ACCEPTS = {
    # npm 11 (the npm on these machines) asks for the full document when it installs;
    "full": "application/json",
    # npm 10 and older, and `npm view`-style lookups, ask for the abbreviated one.
    "abbreviated": "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*",
}
ACCEPT_ENCODING = "gzip,deflate"
CONNECTIONS = 16
ROUNDS = 3
"""mirrorgate and the bare handler are measured in alternating rounds and the median round
reported, so a burst of load from something else on the machine hits both alike."""
POLICY_ROUNDS = 5
"""`--policies`' rounds: the two modes differ by less than the machine's noise, so more."""
WARMUP_SECONDS = 1.0
MEASURE_SECONDS = 4.0
SLOW_WARMUP_SECONDS = 2.0
SLOW_MEASURE_SECONDS = 8.0
"""Verdaccio is measured once, longer, since it answers a few dozen requests a second."""
SERVER_CPU = 0
LOAD_CPU = 1
REPEATED_HEADERS = ("Content-Type", "Content-Encoding", "ETag", "Vary")


# --- the load generator (runs in its own process) -----------------------------------------

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r]*chunked", re.IGNORECASE)


class _Connection(asyncio.Protocol):
    """One keep-alive connection sending the same GET as soon as the previous answer ends.

    Bodies are counted, not kept: by Content-Length, or chunk by chunk for a chunked answer
    (Verdaccio streams its gzip output that way)."""

    def __init__(self, request: bytes, run: _Run) -> None:
        self.request = request
        self.run = run
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.in_body = False
        self.chunked = False
        self.remaining = 0
        self.started = 0.0
        self.status = 0
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.buffer.clear()
        self.in_body = False
        self.started = time.perf_counter()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.in_body:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            header = bytes(self.buffer[:end])
            self.status = int(header[9:12])
            self.chunked = _CHUNKED.search(header) is not None
            match = _CONTENT_LENGTH.search(header)
            self.remaining = int(match.group(1)) if match else 0
            data = bytes(self.buffer[end + 4:])
            self.buffer.clear()
            self.in_body = True
        finished = self._chunks(data) if self.chunked else self._counted(data)
        if finished:
            self.run.done(self.status, time.perf_counter() - self.started)
            if self.run.running:
                self._send()
            elif self.transport is not None:
                self.transport.close()

    def _counted(self, data: bytes) -> bool:
        self.remaining -= len(data)
        return self.remaining <= 0

    def _chunks(self, data: bytes) -> bool:
        self.buffer += data
        while True:
            if self.remaining > 0:
                take = min(self.remaining, len(self.buffer))
                del self.buffer[:take]
                self.remaining -= take
                if self.remaining > 0:
                    return False
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return False
            line = bytes(self.buffer[:line_end]).split(b";")[0].strip()
            del self.buffer[:line_end + 2]
            if not line:
                continue  # the CRLF closing the previous chunk's data
            size = int(line, 16)
            if size == 0:
                return True
            self.remaining = size

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class _Run:
    def __init__(self, warmup: float, measure: float) -> None:
        now = time.perf_counter()
        self.measure_from = now + warmup
        self.stop_at = self.measure_from + measure
        self.latencies: list[float] = []
        self.errors = 0
        self.answered = 0
        """Every answer, the warm-up's too (what the server's CPU seconds are divided by)."""
        self.statuses: dict[int, int] = {}

    @property
    def running(self) -> bool:
        return time.perf_counter() < self.stop_at

    def done(self, status: int, latency: float) -> None:
        self.answered += 1
        if time.perf_counter() < self.measure_from:
            return
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status == 200:
            self.latencies.append(latency)
        else:
            self.errors += 1


async def _drive(host: str, port: int, path: str, accept: str, connections: int,
                 warmup: float, measure: float, tokens: list[str]) -> dict[str, Any]:
    """`tokens`: connection i sends the (i mod n)th as its Bearer token (none: no header)."""
    requests = [(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {accept}\r\n"
                 f"Accept-Encoding: {ACCEPT_ENCODING}\r\nUser-Agent: npm/11 bench\r\n"
                 + (f"Authorization: Bearer {token}\r\n" if token else "")
                 + "Connection: keep-alive\r\n\r\n").encode() for token in tokens or [""]]
    loop = asyncio.get_running_loop()
    run = _Run(warmup, measure)
    protocols = []
    for index in range(connections):
        request = requests[index % len(requests)]
        _transport, protocol = await loop.create_connection(
            lambda request=request: _Connection(request, run), host, port)  # type: ignore[misc]
        protocols.append(protocol)
    deadline = run.stop_at + 120
    for protocol in protocols:
        await asyncio.wait_for(protocol.closed, max(0.1, deadline - time.perf_counter()))
    latencies = sorted(run.latencies)

    def percentile(fraction: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(fraction * len(latencies)))] * 1000

    return {"requests": len(latencies), "answered": run.answered, "errors": run.errors,
            "statuses": run.statuses,
            "rps": len(latencies) / measure, "p50_ms": percentile(0.50),
            "p99_ms": percentile(0.99)}


def load_main(argv: list[str]) -> int:
    """`--load HOST PORT PATH FORM CONNECTIONS WARMUP MEASURE [TOKEN,...]`: print one JSON
    result line."""
    host, port, path, form, connections, warmup, measure, *tokens = argv
    pin(LOAD_CPU)
    result = asyncio.run(_drive(host, int(port), path, ACCEPTS[form], int(connections),
                                float(warmup), float(measure),
                                tokens[0].split(",") if tokens else []))
    print(json.dumps(result))
    return 0


# --- the bare handler (runs in its own process) -------------------------------------------

def bare_main(argv: list[str]) -> int:
    """`--bare PORT RESPONSES.json`: answer each path with its recorded body and headers."""
    from aiohttp import web

    port, recorded = int(argv[0]), json.loads(Path(argv[1]).read_text())
    pin(SERVER_CPU)
    answers: dict[str, tuple[bytes, dict[str, str]]] = {
        path: (Path(entry["body"]).read_bytes(), entry["headers"])
        for path, entry in recorded.items()}

    async def handler(request: web.Request) -> web.Response:
        body, headers = answers[request.path]
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
    return 0


# --- the orchestrator ---------------------------------------------------------------------

@dataclass
class Target:
    label: str
    base: str  # http://127.0.0.1:PORT/ plus the registry prefix
    pid: int | None = None
    """The server's process: its CPU seconds a request are reported beside its rate."""


def _get(url: str, form: str = "full", timeout: float = 120.0,
         token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(  # noqa: S310 - loopback http only, built here
        url, headers={"Accept": ACCEPTS[form], "Accept-Encoding": ACCEPT_ENCODING,
                      **({"Authorization": f"Bearer {token}"} if token else {})})
    with opener.open(request, timeout=timeout) as response:
        return response.status, dict(response.headers.items()), response.read()


def _wait_until_up(url: str, timeout: float = 30.0,
                   process: subprocess.Popen[bytes] | None = None, each: float = 2.0) -> None:
    """Until `url` answers 200, asked with `each` seconds to answer; a `process` that exits
    first ends the bench."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"{url}: the process exited {process.returncode}")
        try:
            if _get(url, timeout=each)[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout:g}s")


def _load(target: Target, path: str, form: str, warmup: float,
          measure: float, tokens: list[str] | None = None) -> dict[str, Any]:
    host_port = target.base.split("/")[2]
    host, port = host_port.rsplit(":", 1)
    prefix = "/" + target.base.split("/", 3)[3]
    done = subprocess.run(
        [sys.executable, "-m", "bench.serve_packuments", "--load", host, port,
         prefix + path, form, str(CONNECTIONS), str(warmup), str(measure),
         *([",".join(tokens)] if tokens else [])],
        capture_output=True, text=True, check=True, timeout=300)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _load_timed(target: Target, path: str, form: str, warmup: float,
                measure: float) -> dict[str, Any]:
    """`_load`, with the server's CPU seconds a request (`cpu_us`, warm-up included) when its
    process is known: the kernel's count, far steadier than the rate on a shared machine."""
    before = usage(target.pid) if target.pid is not None else None
    result = _load(target, path, form, warmup, measure)
    if before is not None and target.pid is not None and result.get("answered"):
        result["cpu_us"] = (usage(target.pid).cpu - before.cpu) / result["answered"] * 1e6
    return result


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rounds, key=lambda result: float(result["rps"]))
    chosen = dict(ordered[len(ordered) // 2])
    chosen["rounds"] = [round(float(result["rps"]), 1) for result in rounds]
    if all("cpu_us" in result for result in rounds):
        cpu = sorted(float(result["cpu_us"]) for result in rounds)
        chosen["cpu_us"] = cpu[len(cpu) // 2]
    return chosen


def serve_environment(workdir: Path, public: str, port: int, *, data: Path | None = None,
                      pythonpath: str | None = None,
                      settings: dict[str, str] | None = None) -> dict[str, str]:
    """`mirrorgate serve`'s environment in a bench: the fixture registry `public` as its public
    upstream, listening on `port` (its worker on a free one), `data` (default `workdir/data`)
    as its data directory, a 300 s cache, warnings as JSON, `pythonpath` (default this
    process's) as its PYTHONPATH; `settings` add to it or replace any of it."""
    from tests.servers.ports import free_port

    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(workdir), "LANG": "C.UTF-8",
           "MIRRORGATE_PUBLIC_UPSTREAM": public, "MIRRORGATE_LISTEN": f"127.0.0.1:{port}",
           "MIRRORGATE_WORKER_LISTEN": f"127.0.0.1:{free_port()}",
           "MIRRORGATE_DATA_DIR": str(data if data is not None else workdir / "data"),
           "MIRRORGATE_CACHE_TTL": "300", "MIRRORGATE_LOG_FORMAT": "json",
           "MIRRORGATE_LOG_LEVEL": "warning"}
    pythonpath = pythonpath if pythonpath is not None else os.environ.get("PYTHONPATH")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return {**env, **(settings or {})}


def _start(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    pin(SERVER_CPU, process.pid)
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


def _policies(form: str, loop: str) -> int:
    """`--policies`: warm GETs with one policy set in use against two (see the module head)."""
    from tests.servers.fixture_registry import FixtureRegistry
    from tests.servers.packages import realistic_package
    from tests.servers.ports import free_port
    from tests.servers.processes import mirrorgate_argv

    from mirrorgate.access.tokens import new_token, token_line

    workdir = Path(tempfile.mkdtemp(prefix="bench-policies-"))
    packages = {"express": realistic_package("bench-express"),
                "large": realistic_package("bench-large", versions=3_500, manifest_size=2_800)}
    upstream = FixtureRegistry(*packages.values()).start()
    default, team = new_token(), new_token()
    (workdir / "tokens").write_text(f"{token_line('builds', default)}\n"
                                    f"{token_line('team', team)} policy:team\n")
    # the team's set differs from the default rules, so its entries are gated on their own
    (workdir / "rules.toml").write_text('[policy.team.deny]\npackages = ["bench-express@<2", '
                                        '"bench-large@<2"]\n')
    port = free_port()
    env = serve_environment(workdir, upstream.url, port, settings={
        "MIRRORGATE_CLIENT_TOKENS_FILE": str(workdir / "tokens"),
        "MIRRORGATE_RULES_FILE": str(workdir / "rules.toml"), "MIRRORGATE_EVENT_LOOP": loop,
        **child_environment(workdir, loop=loop)})
    process = _start([*mirrorgate_argv(), "serve"], env, workdir)
    try:
        _wait_until_up(f"http://127.0.0.1:{port}/readyz")
        mirrorgate = Target("mirrorgate", f"http://127.0.0.1:{port}/npm/")
        for key, package in packages.items():
            bodies = [_get(mirrorgate.base + package.name, form, token=token)[2]
                      for token in (default, team)]
            same = "the same bytes" if bodies[0] == bodies[1] else "other bytes"
            print(f"{key}: the default rules' body {len(bodies[0]) / 1e3:.0f} KB, the team's "
                  f"{len(bodies[1]) / 1e3:.0f} KB ({same})")
        modes = {"one policy": [default], "two policies": [default, team]}
        print(f"{CONNECTIONS} connections, Accept: {ACCEPTS[form]}; median of {POLICY_ROUNDS} "
              f"alternating {MEASURE_SECONDS:g} s rounds; event loop {loop}")
        for key, package in packages.items():
            rounds: dict[str, list[dict[str, Any]]] = {}
            for _ in range(POLICY_ROUNDS):
                for mode, tokens in modes.items():
                    rounds.setdefault(mode, []).append(_load(
                        mirrorgate, package.name, form, WARMUP_SECONDS, MEASURE_SECONDS,
                        tokens))
            measured = {mode: _median_round(found) for mode, found in rounds.items()}
            for mode, result in measured.items():
                print(f"  {key:8} {mode:13} {result['rps']:9.1f} req/s   "
                      f"p50 {result['p50_ms']:8.2f} ms   p99 {result['p99_ms']:8.2f} ms   "
                      f"({result['requests']} ok, {result['errors']} not 200)   "
                      f"rounds {result['rounds']}", flush=True)
            ratio = measured["two policies"]["rps"] / measured["one policy"]["rps"]
            print(f"  {key}: two policies / one = {ratio:.3f}")
        return 0
    finally:
        _stop(process)
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-verdaccio", action="store_true",
                        help="measure mirrorgate and the bare handler only")
    parser.add_argument("--loop", choices=LOOPS, default="asyncio",
                        help="the event loop mirrorgate runs on (`bench.loops`)")
    parser.add_argument("--bare-loop", choices=LOOPS, default="asyncio",
                        help="the event loop the bare aiohttp handler runs on")
    parser.add_argument("--form", choices=sorted(ACCEPTS), default="full",
                        help="the packument form asked for: full (npm 11's install, the "
                        "default) or abbreviated (npm 10 and older)")
    parser.add_argument("--policies", action="store_true",
                        help="measure one policy set in use against two instead (module head)")
    args = parser.parse_args()
    form: str = args.form
    if args.policies:
        return _policies(form, args.loop)

    from tests.servers.fixture_registry import FixtureRegistry
    from tests.servers.packages import realistic_package
    from tests.servers.ports import free_port
    from tests.servers.processes import mirrorgate_argv
    from tests.servers.verdaccio import VERDACCIO_BIN, Verdaccio

    root = Path(__file__).resolve().parents[1]
    workdir = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    packages = {"express": realistic_package("bench-express"),
                "large": realistic_package("bench-large", versions=3_500, manifest_size=2_800)}
    upstream = FixtureRegistry(*packages.values()).start()
    processes: list[subprocess.Popen[bytes]] = []
    verdaccio: Verdaccio | None = None

    try:
        sizes = {key: len(json.dumps(upstream.packument(package.name)))
                 for key, package in packages.items()}
        print("packuments (full, from the fixture upstream): " + ", ".join(
            f"{key} {sizes[key] / 1e6:.2f} MB, {len(p.versions)} versions"
            for key, p in packages.items()))

        port = free_port()
        env = serve_environment(workdir, upstream.url, port,
                                settings=child_environment(workdir, loop=args.loop))
        # a tree with `runtime.py` picks its loop by this (the shim above serves older ones)
        env["MIRRORGATE_EVENT_LOOP"] = args.loop
        processes.append(_start([*mirrorgate_argv(), "serve"], env, workdir))
        mirrorgate = Target("mirrorgate", f"http://127.0.0.1:{port}/npm/", processes[0].pid)
        _wait_until_up(mirrorgate.base + "-/ping")

        recorded: dict[str, dict[str, Any]] = {}
        for key, package in packages.items():
            status, headers, body = _get(mirrorgate.base + package.name, form)
            if status != 200:
                raise SystemExit(f"mirrorgate answered {status} for {package.name}")
            body_file = workdir / f"{key}.body"
            body_file.write_bytes(body)
            recorded["/" + package.name] = {
                "body": str(body_file),
                "headers": {h: headers[h] for h in REPEATED_HEADERS if h in headers}}
            print(f"mirrorgate answers {package.name}: {len(body) / 1e3:.0f} KB on the wire "
                  f"({headers.get('Content-Encoding', 'identity')}, "
                  f"{headers.get('Content-Type')})")
        answers = workdir / "answers.json"
        answers.write_text(json.dumps(recorded))
        bare_port = free_port()
        processes.append(_start([sys.executable, "-m", "bench.serve_packuments", "--bare",
                                 str(bare_port), str(answers)],
                                {**os.environ, **child_environment(workdir, loop=args.bare_loop)},
                                root))
        bare = Target("bare aiohttp", f"http://127.0.0.1:{bare_port}/", processes[1].pid)
        _wait_until_up(bare.base + packages["express"].name)
        for key, package in packages.items():
            mine = _get(mirrorgate.base + package.name, form)[2]
            theirs = _get(bare.base + package.name, form)[2]
            if hashlib.sha256(mine).digest() != hashlib.sha256(theirs).digest():
                raise SystemExit(f"the bare handler's {key} body differs from mirrorgate's")

        targets = [mirrorgate, bare]
        if not args.skip_verdaccio:
            if not VERDACCIO_BIN.exists():
                raise SystemExit(f"Verdaccio is not installed ({VERDACCIO_BIN}); run npm "
                                 "install in tests/registry, or pass --skip-verdaccio")
            verdaccio = Verdaccio(workdir / "verdaccio", uplink=upstream.url)
            verdaccio.start(timeout=30)
            assert verdaccio.process is not None
            pin(SERVER_CPU, verdaccio.process.pid)
            for package in packages.values():
                _get(verdaccio.url + package.name, form)
            targets.append(Target("verdaccio", verdaccio.url))

        loops = {"mirrorgate": (processes[0].pid, args.loop),
                 "the bare handler": (processes[1].pid, args.bare_loop)}
        for label, (pid, loop) in loops.items():
            if uses_uvloop(pid) != (loop == "uvloop"):
                raise SystemExit(f"{label} is not running on {loop}")
        print(f"event loops: mirrorgate {args.loop}, bare handler {args.bare_loop}")
        print(f"{CONNECTIONS} connections, Accept: {ACCEPTS[form]}, Accept-Encoding: "
              f"{ACCEPT_ENCODING}; mirrorgate and "
              f"bare: median of {ROUNDS} alternating {MEASURE_SECONDS:g} s rounds; Verdaccio: "
              f"one {SLOW_MEASURE_SECONDS:g} s round")
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for key, package in packages.items():
            rounds: dict[str, list[dict[str, Any]]] = {}
            for _ in range(ROUNDS):
                for target in targets[:2]:
                    rounds.setdefault(target.label, []).append(_load_timed(
                        target, package.name, form, WARMUP_SECONDS, MEASURE_SECONDS))
            measured = {label: _median_round(found) for label, found in rounds.items()}
            for target in targets[2:]:
                measured[target.label] = _load(target, package.name, form,
                                               SLOW_WARMUP_SECONDS, SLOW_MEASURE_SECONDS)
            results[key] = measured
            for label, result in measured.items():
                spread = (f"   rounds {result['rounds']}" if "rounds" in result else "")
                if "cpu_us" in result:
                    spread += f"   CPU {result['cpu_us']:.1f} us a request"
                print(f"  {key:8} {label:13} {result['rps']:9.1f} req/s   "
                      f"p50 {result['p50_ms']:8.2f} ms   p99 {result['p99_ms']:8.2f} ms   "
                      f"({result['requests']} ok, {result['errors']} not 200){spread}",
                      flush=True)
        print()
        for key, measured in results.items():
            mine = measured["mirrorgate"]["rps"]
            bare_rps = measured["bare aiohttp"]["rps"]
            line = f"{key}: mirrorgate / bare aiohttp = {mine / bare_rps:.0%}"
            if "cpu_us" in measured["mirrorgate"] and "cpu_us" in measured["bare aiohttp"]:
                by_cpu = measured["bare aiohttp"]["cpu_us"] / measured["mirrorgate"]["cpu_us"]
                line += f", by CPU a request {by_cpu:.2f}x"
            if "verdaccio" in measured and measured["verdaccio"]["rps"] > 0:
                line += f", mirrorgate / Verdaccio = {mine / measured['verdaccio']['rps']:.1f}x"
            print(line)
        express = results["express"]
        verdict = express["mirrorgate"]["rps"] >= 0.5 * express["bare aiohttp"]["rps"]
        if "verdaccio" in express:
            verdict = verdict and express["mirrorgate"]["rps"] >= 20 * express["verdaccio"]["rps"]
        print(f"target (express-sized: >= 20x Verdaccio, >= 50% of bare): "
              f"{'met' if verdict else 'NOT met'}")
        return 0 if verdict else 1
    finally:
        if verdaccio is not None:
            verdaccio.stop()
        for process in processes:
            _stop(process)
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        sys.exit(load_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "--bare":
        sys.exit(bare_main(sys.argv[2:]))
    sys.exit(main())
