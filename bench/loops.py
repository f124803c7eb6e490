"""Run a child Python process's asyncio on another event loop, without touching its code.

For measuring uvloop against asyncio's default loop: a `sitecustomize` on the child's
PYTHONPATH installs uvloop's policy before the program starts, so its `asyncio.run` gets a uvloop
loop. `uses_uvloop` confirms from outside that the child really loaded it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LOOPS", "loop_environment", "uses_uvloop"]

LOOPS = ("asyncio", "uvloop")


def loop_environment(loop: str, workdir: Path,
                     pythonpath: str | None = None) -> dict[str, str]:
    """Variables to add to a child's environment so it runs on `loop` (`asyncio`: none).
    `pythonpath` is the child's PYTHONPATH otherwise (default: this process's)."""
    if loop == "asyncio":
        return {}
    if loop != "uvloop":
        raise ValueError(f"unknown loop {loop!r}; one of {', '.join(LOOPS)}")
    import uvloop  # noqa: F401  # fails here, not in the child, when it is not installed

    shim = workdir / "uvloop-shim"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "sitecustomize.py").write_text("import uvloop\n\nuvloop.install()\n")
    inherited = pythonpath if pythonpath is not None else os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), inherited]))}


def uses_uvloop(pid: int) -> bool:
    """Whether process `pid` has uvloop's extension mapped."""
    try:
        return "uvloop/loop" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
