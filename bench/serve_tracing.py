"""What tracing costs the warm path: warm packument req/s before tracing, with it off, with it on.

Run by hand from the repository root: `.venv/bin/python -m bench.serve_tracing`. One run takes
about a minute and a half and starts everything on 127.0.0.1:

- the fixture public upstream (in a thread of this process) with an express-sized packument
  (about 750 KB full, 300 versions), and an OTLP/HTTP sink (a thread too) that answers every
  export and counts the spans it decodes;
- four `mirrorgate serve` processes: `before`, the code of `--baseline` (a git revision,
  `main` by default: while tracing is on a branch, the tree it would land on; once it has
  landed, name the commit before it; its `src/` is extracted with `git archive`, the working
  tree is untouched), and this tree three times: `off` (no OTEL_* variable), `on`
  (`OTEL_EXPORTER_OTLP_ENDPOINT` at the sink, every request traced, the SDK's default batch
  processor) and `sampled` (the same with `OTEL_TRACES_SAMPLER=parentbased_traceidratio` and
  `OTEL_TRACES_SAMPLER_ARG=0.1`, a tenth of the traces recorded);
- then rounds of warm GETs against each in turn, the order turning every round, with the load
  generator of `bench.serve_packuments` (its own process, npm 11's headers, 16 keep-alive
  connections), the servers pinned to CPU 0 and the generator to CPU 1 when the machine allows.

Two figures per server and round: requests/s as the generator saw them, and requests per
CPU-second of the server process (its own `utime + stime` from /proc over the round, against
its own request count from /metrics, warm-ups included; the export thread of `on` is in the same
process, so it counts). The second is what tracing costs: on a machine other work shares, the
first moves with that work by tens of percent from round to round, the second by a few. It
reports each server's median round and the median of the per-round ratios to `before`, and how
many of `on`'s and `sampled`'s requests reached their sinks as spans (the SDK drops spans, never
requests, when its queue of 2,048 fills faster than it exports). Target (issue 34): `off` >=
0.98 of `before` in requests per CPU-second (the exit code); the rest is reported. Figures:
docs/operations.md#traces.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from tests.servers.threaded import ThreadedApp

from bench.serve_packuments import (
    MEASURE_SECONDS,
    WARMUP_SECONDS,
    Target,
    _get,
    _load,
    _start,
    _stop,
    _wait_until_up,
    serve_environment,
)

TARGET = 0.98
SERVERS = ("before", "off", "on", "sampled")
SAMPLED = "0.1"
"""`sampled`: tracing on, a tenth of the traces recorded (parentbased_traceidratio)."""


class SpanSink(ThreadedApp):
    """An OTLP/HTTP endpoint that decodes each export and counts its spans."""

    def __init__(self) -> None:
        super().__init__(self._build, name="span-sink")
        self._lock = threading.Lock()
        self.spans = 0

    def _build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        count = sum(len(scope.spans) for resource in export.resource_spans
                    for scope in resource.scope_spans)
        with self._lock:
            self.spans += count
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")


def _cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _baseline_source(root: Path, revision: str, into: Path) -> str:
    """`src/` of `revision` unpacked under `into`; returns the commit it names."""
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", revision],
                            capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit, "src"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def _answered(target: Target) -> float:
    """Packument requests the server answered, warm-ups included (its own /metrics)."""
    from tests.metric_samples import metric_value, text_samples

    page = _get(target.base.removesuffix("npm/") + "metrics")[2].decode()
    return metric_value(text_samples(page), "mirrorgate_requests_total", route="packument")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main",
                        help="the git revision measured as `before` (default: main)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per server (default 5)")
    args = parser.parse_args()

    from tests.servers.fixture_registry import FixtureRegistry
    from tests.servers.packages import realistic_package
    from tests.servers.ports import free_port
    from tests.servers.processes import mirrorgate_argv

    root = Path(__file__).resolve().parents[1]
    workdir = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    package = realistic_package("bench-express")
    upstream = FixtureRegistry(package).start()
    sinks = {"on": SpanSink().start(), "sampled": SpanSink().start()}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        baseline = args.baseline
        commit = _baseline_source(root, baseline, workdir / "before")
        sources = dict.fromkeys(SERVERS, str(root / "src"))
        sources["before"] = str(workdir / "before" / "src")
        targets: dict[str, Target] = {}
        pids: dict[str, int] = {}
        for label in SERVERS:
            port = free_port()
            env = serve_environment(workdir, upstream.url, port,
                                    data=workdir / f"data-{label}", pythonpath=sources[label])
            if label == "on":
                env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": sinks[label].url.rstrip("/"),
                            "OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "bench"})
            elif label == "sampled":
                env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": sinks[label].url.rstrip("/"),
                            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                            "OTEL_TRACES_SAMPLER_ARG": SAMPLED, "OTEL_SERVICE_NAME": "bench"})
            processes.append(_start([*mirrorgate_argv(), "serve"], env, workdir))
            targets[label] = Target(label, f"http://127.0.0.1:{port}/npm/")
            pids[label] = processes[-1].pid
        for target in targets.values():
            _wait_until_up(target.base + "-/ping")
            status, _headers, body = _get(target.base + package.name)
            if status != 200:
                raise SystemExit(f"{target.label} answered {status}")
        print(f"before = {baseline} ({commit}); off, on and sampled = this tree; "
              f"{package.name}: {len(body) / 1e3:.0f} KB on the wire (gzip); median of "
              f"{args.rounds} rounds of {MEASURE_SECONDS:g} s, the order turning each round")

        rps: dict[str, list[float]] = {label: [] for label in SERVERS}
        per_cpu: dict[str, list[float]] = {label: [] for label in SERVERS}
        ratios: dict[str, list[float]] = {label: [] for label in SERVERS[1:]}
        cpu_ratios: dict[str, list[float]] = {label: [] for label in SERVERS[1:]}
        for round_index in range(args.rounds):
            turn = round_index % len(SERVERS)
            measured: dict[str, dict[str, Any]] = {}
            for label in SERVERS[turn:] + SERVERS[:turn]:
                answered, cpu = _answered(targets[label]), _cpu_seconds(pids[label])
                measured[label] = _load(targets[label], package.name, "full", WARMUP_SECONDS,
                                        MEASURE_SECONDS)
                served = _answered(targets[label]) - answered
                measured[label]["per_cpu"] = served / (_cpu_seconds(pids[label]) - cpu)
                rps[label].append(float(measured[label]["rps"]))
                per_cpu[label].append(float(measured[label]["per_cpu"]))
            for label in SERVERS[1:]:
                ratios[label].append(float(measured[label]["rps"])
                                     / float(measured["before"]["rps"]))
                cpu_ratios[label].append(float(measured[label]["per_cpu"])
                                         / float(measured["before"]["per_cpu"]))
            print(f"  round {round_index + 1}: " + ", ".join(
                f"{label} {measured[label]['rps']:.0f} req/s, "
                f"{measured[label]['per_cpu']:.0f} per CPU-s" for label in SERVERS),
                flush=True)
        print()
        for label in SERVERS:
            print(f"  {label:8} {statistics.median(rps[label]):8.0f} req/s "
                  f"{statistics.median(per_cpu[label]):8.0f} requests per CPU-second   "
                  f"rounds {[round(value) for value in per_cpu[label]]}")
        for label in SERVERS[1:]:
            print(f"{label} / before = {statistics.median(cpu_ratios[label]):.3f} per "
                  f"CPU-second, {statistics.median(ratios[label]):.3f} req/s "
                  "(medians of the per-round ratios)")
        time.sleep(6)  # the batch processor's schedule (5 s): the last spans reach the sinks
        for label, sink in sinks.items():
            answered = _answered(targets[label])
            print(f"{label}: {sink.spans} spans reached the sink for {answered:.0f} requests "
                  f"({sink.spans / answered:.1%})")
        off = statistics.median(cpu_ratios["off"])
        verdict = off >= TARGET
        print(f"target (tracing off >= {TARGET:.2f}x before, per CPU-second): "
              f"{'met' if verdict else 'NOT met'}")
        return 0 if verdict else 1
    finally:
        for process in processes:
            _stop(process)
        for sink in sinks.values():
            sink.stop()
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
