"""How the interpreter under a long-running mirrorgate is set up: its loop, collector, arenas.

Measured on the cold path at scale (bench/cold_scale.py, docs/serving.md "The cold path at
scale"), three settings of the runtime itself, not of mirrorgate's code, cost CPU and memory:

- the event loop: uvloop serves a warm packument for less CPU than asyncio's own loop (the
  express-sized bench 1.01x a bare aiohttp handler on asyncio's loop, against 0.83x), so it is
  used when it is installed (`MIRRORGATE_EVENT_LOOP`, default `auto`); asyncio's loop works
  unchanged where it is not;
- the garbage collector: the packument cache holds a few tracked objects per version (670,000
  for a 2,000-package tree), and every full collection walks them all: with the default
  thresholds a cold install spent a fifth of its CPU there. Collections are made rarer
  (`THRESHOLDS`) and what start-up built is frozen out of them;
- glibc's malloc arenas: each thread a fill parses in keeps an arena of its own, and what it
  freed stays mapped; two arenas hold the peak RSS of a cold install ~10% lower for no CPU.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import importlib.util
from collections.abc import Callable

import structlog

__all__ = ["ARENAS", "LOOPS", "THRESHOLDS", "freeze_startup", "loop_factory",
           "tune_allocator", "tune_collector"]

log = structlog.get_logger("mirrorgate")

LOOPS = ("auto", "uvloop", "asyncio")
"""MIRRORGATE_EVENT_LOOP's values: `auto` is uvloop when it can be imported."""
THRESHOLDS = (50_000, 50, 100)
"""gc.set_threshold's: a young collection every 50,000 allocations (700 by default), a full
one a hundred times rarer again; cycles are rare in mirrorgate's data (records, tuples)."""
ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def loop_factory(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The loop factory for `asyncio.Runner` (None: asyncio's own) and the loop's name.
    Raises ValueError for `uvloop` when it is not installed (the config loader says so)."""
    if choice not in LOOPS:
        raise ValueError(f"unknown event loop {choice!r}; one of {', '.join(LOOPS)}")
    if choice == "asyncio" or (choice == "auto" and importlib.util.find_spec("uvloop") is None):
        return None, "asyncio"
    try:
        import uvloop
    except ImportError as error:
        if choice == "auto":
            return None, "asyncio"
        raise ValueError("MIRRORGATE_EVENT_LOOP=uvloop but uvloop cannot be imported "
                         f"({error}); install it (pip install uvloop) or use auto") from None
    return uvloop.new_event_loop, "uvloop"


def tune_collector() -> None:
    gc.set_threshold(*THRESHOLDS)


def freeze_startup() -> None:
    """What start-up built (modules, settings, rules) lives as long as the process: moved
    out of the collector's sight, so no full collection walks it again."""
    gc.collect()
    gc.freeze()


def tune_allocator() -> bool:
    """At most `ARENAS` malloc arenas (glibc only; call it before any thread starts): False
    where the C library has no mallopt, which changes nothing else."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, ARENAS))
