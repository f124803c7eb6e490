"""What one packument fill costs, step by step, on the scale tree's real-sized packuments.

In this process, no HTTP: the packuments `bench.scale_tree` built (the six huge ones and every
tenth of the rest, about 1 in 9 of its bytes; `--all` for every one) are read from the cache and
timed, CPU seconds per step (`time.process_time`, the best of `--rounds`), as a fill does them:

- `count`: the upstream client's bound on a document's JSON values (`_json_values`);
- `parse`: `orjson.loads` of the public body;
- `gate`: `gate.packuments.merge.gate` with no private side (what a public name's fill runs), every
  version judged by the default rules and serialised in both forms;
- `worker`: the worker's re-gate of one job (`worker.regate.regate`), parse included, for the
  packument's latest version;
- `render`: the full form rendered and gzip'd (`gate.packuments.entry.build_rendered`), what the
  first packument request after a fill pays.

Printed: seconds per step over the selection, and microseconds per version listed.

    PYTHONPATH=src .venv/bin/python bench/gate_scale.py [--all] [--rounds R] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, as for -m
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.scale_tree import BASE, ScaleTree
from mirrorgate.gate.packuments.entry import build_rendered
from mirrorgate.gate.packuments.merge import gate
from mirrorgate.integrity import digests_from_dist
from mirrorgate.mirror import MirrorArtifact, MirrorJob
from mirrorgate.npm.names import parse_name, tarball_filename
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import DEFAULT_RULES
from mirrorgate.upstream.client import Upstream, _json_values
from mirrorgate.worker.regate import regate

NOW = datetime(2026, 12, 1, tzinfo=UTC)
PROXY_BASE = "http://127.0.0.1:8080/"


def _best(rounds: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def _job(name: str, version: str, manifest: dict[str, Any]) -> MirrorJob:
    dist = manifest["dist"]
    artifact = MirrorArtifact(dist["tarball"], tarball_filename(parse_name(name), version), None,
                              digests_from_dist(dist))
    return MirrorJob(name, version, artifact,
                     {key: value for key, value in manifest.items() if key != "readme"})


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every packument, not a sample")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--packages", type=int, default=1_700)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "mirrorgate-bench")
    options = parser.parse_args()
    tree = ScaleTree.build(options.cache, options.packages, options.seed)
    bodies: dict[str, bytes] = {}
    for index, name in enumerate(tree.names()):
        body = tree.packument_path(name).read_bytes()
        if options.all or index % 10 == 0 or len(body) > 5_000_000:
            bodies[name] = body
    origin = Origin.of(BASE)
    public = Upstream("public", BASE, timeout=30, max_metadata_bytes=32 << 20)
    documents = {name: orjson.loads(body) for name, body in bodies.items()}
    listed = sum(len(document["versions"]) for document in documents.values())
    print(f"{len(bodies)} packuments, {sum(map(len, bodies.values())) / 1e6:.1f} MB, "
          f"{listed:,} versions listed; CPU seconds, best of {options.rounds} rounds")

    def gate_all() -> None:
        for name, document in documents.items():
            gate(parse_name(name), None, document, rules=DEFAULT_RULES, now=NOW, origin=origin)

    gated = {name: gate(parse_name(name), None, document, rules=DEFAULT_RULES, now=NOW,
                        origin=origin) for name, document in documents.items()}
    jobs = {name: _job(name, document["dist-tags"]["latest"],
                       document["versions"][document["dist-tags"]["latest"]])
            for name, document in documents.items()}

    def worker_all() -> None:
        async def run() -> None:
            for name, body in bodies.items():
                await regate(jobs[name], parse_name(name), orjson.loads(body), 0,
                             public=public, rules=DEFAULT_RULES, now=NOW)
        asyncio.run(run())

    steps: dict[str, Callable[[], object]] = {
        "count": lambda: [_json_values(body, 0) for body in bodies.values()],
        "parse": lambda: [orjson.loads(body) for body in bodies.values()],
        "gate": gate_all,
        "worker": worker_all,
        "render": lambda: [build_rendered(g, False, PROXY_BASE) for g in gated.values()],
    }
    for step, work in steps.items():
        seconds = _best(options.rounds, work)
        print(f"  {step:<8} {seconds:7.2f} s   {seconds * 1e6 / listed:6.1f} us/version",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
