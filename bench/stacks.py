"""Where a sampled process spent its CPU: py-spy's raw stacks folded into sides and activities.

py-spy (`record --format raw`, idle frames left out) writes one line per distinct stack, root
first, with its sample count. Each stack is given a *side* (the serve path, the worker, or
neither: the loop and HTTP machinery between requests) from the frames it passes through, and
an *activity* from its innermost frame that a rule names (time inside a C call such as
`orjson.loads` or a sha512 update is charged to the Python frame that made it). Work handed to a
thread is placed by the function handed over (`_THREADED`), since its stack starts at the
thread, not at whoever handed it over.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Profile", "read_profile"]

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")

ACTIVITIES: tuple[tuple[str, str, str], ...] = (
    # (file part, function or "" for any, activity), tried on each frame from the innermost;
    # a frame no rule names (urllib, base64, json...) is charged to the one that called it
    ("mirrorgate/upstream/client.py", "_json_values", "count a public packument's values"),
    ("mirrorgate/upstream/client.py", "get_json", "parse a public packument (orjson.loads)"),
    ("mirrorgate/upstream/client.py", "_read_capped", "read a packument body (aiohttp)"),
    ("aiohttp/compression_utils.py", "", "gunzip a packument body"),
    ("mirrorgate/gate/packuments/entry.py", "document", "worker: parse public's bytes again"),
    ("mirrorgate/gate/packuments/entry.py", "fingerprint", "fingerprint a private answer"),
    ("gzip.py", "", "render: gzip"),
    ("mirrorgate/gate/packuments/entry.py", "build_rendered", "render: etag (blake2b)"),
    ("mirrorgate/npm/packument.py", "render", "render: orjson.dumps of the document"),
    ("mirrorgate/npm/packument.py", "on_base", "render: base URL swap"),
    ("mirrorgate/npm/packument.py", "serialise", "gate: serialise each version (orjson)"),
    ("mirrorgate/npm/packument.py", "_compact", "gate: serialise each version (orjson)"),
    ("mirrorgate/gate/records.py", "manifest", "parse a version record again (job, re-gate)"),
    ("mirrorgate/gate/records.py", "", "gated packument bookkeeping"),
    ("mirrorgate/rules/", "", "gate: rules.evaluate"),
    ("mirrorgate/integrity.py", "update", "hash tarballs (sha512, sha1)"),
    ("mirrorgate/integrity.py", "finish", "hash tarballs (sha512, sha1)"),
    ("mirrorgate/integrity.py", "dist_digests", "hash tarballs (sha512, sha1)"),
    ("mirrorgate/integrity.py", "digest_of", "hash tarballs (sha512, sha1)"),
    ("mirrorgate/serve/relayhash.py", "", "hash tarballs (sha512, sha1)"),
    ("mirrorgate/integrity.py", "", "gate: digests of each dist"),
    ("mirrorgate/npm/versions.py", "", "gate: version strings"),
    ("mirrorgate/npm/origins.py", "", "gate: origin lock (urlsplit)"),
    ("mirrorgate/npm/mirrormark.py", "", "gate: mirror marks"),
    ("mirrorgate/npm/ownership.py", "", "gate: mirror marks"),
    ("mirrorgate/npm/scripts.py", "", "gate: install scripts"),
    ("mirrorgate/gate/packuments/merge.py", "", "gate: the per-version loop itself"),
    ("mirrorgate/worker/regate.py", "", "worker: compare job and record"),
    ("mirrorgate/npm/publish.py", "", "worker: publish document (base64)"),
    ("mirrorgate/upstream/filestore.py", "", "file store (read, write, fsync)"),
    ("mirrorgate/npm/tarscripts.py", "", "read a tarball's package.json"),
    ("mirrorgate/npm/tarball.py", "", "read a tarball's package.json"),
    ("mirrorgate/npm/packagejson.py", "", "read a tarball's package.json"),
    ("structlog", "", "logging"),
    ("mirrorgate/logs.py", "", "logging"),
    ("prometheus_client", "", "metrics"),
    ("mirrorgate/metrics.py", "", "metrics"),
    ("asyncio/selector_events.py", "write", "socket writes"),
    ("asyncio/selector_events.py", "_write_to_self", "thread hand-offs (wake-ups, submit)"),
    ("concurrent/futures", "", "thread hand-offs (wake-ups, submit)"),
    ("asyncio/threads.py", "", "thread hand-offs (wake-ups, submit)"),
    ("aiohttp/", "", "aiohttp (HTTP server and client)"),
    ("multidict", "", "aiohttp (HTTP server and client)"),
    ("yarl", "", "aiohttp (HTTP server and client)"),
    ("asyncio/", "", "asyncio (event loop, tasks)"),
    ("uvloop", "", "asyncio (event loop, tasks)"),
)
WAITS = ("_worker (concurrent/futures/thread.py:81)", "_Lane._run (mirrorgate/serve/relayhash.py",
         "EpollSelector.select (selectors.py")
"""Innermost frames of a thread waiting for work: not CPU, whatever a sampler took them for."""
FILL = "fill"
SERVE = "handlers"
WORKER = "worker"
LOOP = "loop"
PRIVATE = "private reads"
SIDES = {
    FILL: "packument fills: fetch, parse, gate (for a client, or for the worker's re-gate of an "
          "entry expired or evicted)",
    SERVE: "the serve path's request handlers (tarball relay, enqueue, packument answers)",
    WORKER: "the worker's jobs (re-gate, download, verify, publish)",
    LOOP: "the event loop and HTTP machinery outside any handler",
    PRIVATE: "reads of the file store (for a fill or the worker)",
}
_THREADED = {
    # what a thread was handed -> the side it works for
    ("mirrorgate/gate/packuments/fill.py", "_gate"): FILL,
    ("mirrorgate/serve/app.py", ""): SERVE,
    ("mirrorgate/gate/packuments/entry.py", "build_rendered"): SERVE,
    ("mirrorgate/serve/relayhash.py", ""): SERVE,
    ("mirrorgate/worker/regate.py", "_gate"): WORKER,
    ("mirrorgate/gate/packuments/entry.py", "document"): WORKER,
    ("mirrorgate/integrity.py", "dist_digests"): WORKER,
    ("mirrorgate/worker/", ""): WORKER,
    ("mirrorgate/upstream/filestore.py", "_write"): WORKER,
    ("mirrorgate/upstream/filestore.py", "_read_packument"): PRIVATE,
}


def _parse(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    if match is None:
        return frame, ""
    return match["function"], match["file"]


def _matches(rule_file: str, rule_function: str, function: str, file: str) -> bool:
    # py-spy names a method `Class.method` and a comprehension `function.<locals>.<listcomp>`
    return rule_file in file and (not rule_function or rule_function in function.split("."))


def _activity(frames: list[tuple[str, str]]) -> str:
    for function, file in reversed(frames):
        for rule_file, rule_function, activity in ACTIVITIES:
            if _matches(rule_file, rule_function, function, file):
                return activity
    return "other"


def _side(frames: list[tuple[str, str]]) -> str:
    """Who the work was for. A fill runs in the cache's own task, whoever asked for it (a
    client's request, or the worker's re-gate finding an entry expired or evicted)."""
    files = [file for _function, file in frames]
    if any("mirrorgate/worker/" in file for file in files):
        return WORKER
    threaded = not any("asyncio/base_events.py" in file or "uvloop" in file for file in files)
    if threaded:
        for function, file in frames:
            for (rule_file, rule_function), side in _THREADED.items():
                if _matches(rule_file, rule_function, function, file):
                    return side
    if any("mirrorgate/gate/cache.py" in file or "mirrorgate/gate/packuments/fill.py" in file
           for file in files):
        return FILL
    if any("mirrorgate/serve/" in file or "mirrorgate/gate/" in file for file in files):
        return SERVE
    return LOOP


@dataclass(frozen=True)
class Profile:
    """Sample counts by (side, activity)."""

    samples: Counter[tuple[str, str]]

    @property
    def total(self) -> int:
        return sum(self.samples.values())

    def by_side(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for (side, _activity), count in self.samples.items():
            found[side] += count
        return found

    def by_activity(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for (_side, activity), count in self.samples.items():
            found[activity] += count
        return found

    def lines(self, top: int = 25) -> Iterable[str]:
        total = max(1, self.total)
        yield f"{self.total} samples (CPU only: idle frames left out)"
        yield "by side:"
        for side, count in self.by_side().most_common():
            yield f"  {count / total:6.1%}  {side}: {SIDES.get(side, side)}"
        yield "by activity (side split in brackets):"
        for activity, count in self.by_activity().most_common(top):
            sides = ", ".join(f"{side} {n / total:.1%}" for (side, act), n
                              in sorted(self.samples.items()) if act == activity)
            yield f"  {count / total:6.1%}  {activity}  [{sides}]"


def read_profile(path: Path) -> Profile:
    samples: Counter[tuple[str, str]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        if stack.rsplit(";", 1)[-1].startswith(WAITS):
            continue
        frames = [_parse(frame) for frame in stack.split(";")[1:]]  # [0] is the thread
        samples[(_side(frames), _activity(frames))] += int(count)
    return Profile(samples)
