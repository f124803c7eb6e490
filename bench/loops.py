"""Start a child Python process on another event loop, or with a few lines run first, unchanged.

For measuring what a change of runtime would bring before making it: a `sitecustomize` on the
child's PYTHONPATH runs before the program does, so it can install uvloop's policy (the
program's `asyncio.run` then gets a uvloop loop), tune the garbage collector, or count the time
the collector takes (`GC_STATS`: written as JSON to the file `BENCH_GC_STATS` names when the
process exits). `uses_uvloop` confirms from outside that the child really loaded uvloop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["GC_STATS", "LOOPS", "child_environment", "gc_stats", "uses_uvloop"]

LOOPS = ("asyncio", "uvloop")
GC_STATS = """\
import atexit, gc, json, os, time
_gc = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0], "started": 0.0}
def _gc_timed(phase, info):
    if phase == "start":
        _gc["started"] = time.perf_counter()
        return
    _gc["collections"][info["generation"]] += 1
    _gc["seconds"][info["generation"]] += time.perf_counter() - _gc["started"]
gc.callbacks.append(_gc_timed)
def _gc_write():
    with open(os.environ["BENCH_GC_STATS"], "w") as out:
        json.dump({"collections": _gc["collections"], "seconds": _gc["seconds"],
                   "threshold": gc.get_threshold()}, out)
atexit.register(_gc_write)
"""


def child_environment(workdir: Path, *, loop: str = "asyncio", startup: Sequence[str] = (),
                      pythonpath: str | None = None) -> dict[str, str]:
    """Variables to add to a child's environment so it runs on `loop` with the `startup`
    code run first (none for asyncio and no code). `pythonpath` is the child's PYTHONPATH
    otherwise (default: this process's)."""
    if loop not in LOOPS:
        raise ValueError(f"unknown loop {loop!r}; one of {', '.join(LOOPS)}")
    lines = list(startup)
    if loop == "uvloop":
        import uvloop  # noqa: F401  # fails here, not in the child, when it is not installed

        lines += ["import uvloop", "uvloop.install()"]
    if not lines:
        return {}
    shim = workdir / f"startup-{abs(hash(tuple(lines))):x}"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "sitecustomize.py").write_text("\n".join(lines) + "\n")
    inherited = pythonpath if pythonpath is not None else os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), inherited]))}


def gc_stats(path: Path) -> dict[str, Any] | None:
    """What `GC_STATS` wrote at the child's exit, or None."""
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found


def uses_uvloop(pid: int) -> bool:
    """Whether process `pid` has uvloop's extension mapped."""
    try:
        return "uvloop/loop" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
