"""How the interpreter under a long-running mirrorgate is set up: loop, collector, arenas, inflate,
descriptors.

uvloop where it is installed (`MIRRORGATE_EVENT_LOOP`), a collector that rarely walks the
packument cache's many small objects, two malloc arenas with large blocks mapped apart,
ISA-L's inflate under aiohttp, and as many open files as the hard limit allows.
Each was measured on the cold bench: docs/serving.md ("The runtime") gives the figures.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import importlib.util
import resource
from collections.abc import Callable

import aiohttp
import structlog
from isal import isal_zlib

__all__ = ["ARENAS", "KEEP_TOP", "LOOPS", "MMAP_ABOVE", "OPEN_FILES_AT_MOST", "THRESHOLDS",
           "freeze_startup", "inflate_with_isal", "loop_factory", "open_files", "tune_allocator",
           "tune_collector"]

log = structlog.get_logger("mirrorgate")

LOOPS = ("auto", "uvloop", "asyncio")
"""MIRRORGATE_EVENT_LOOP's values: `auto` is uvloop when it can be imported."""
THRESHOLDS = (50_000, 50, 100)
"""gc.set_threshold's: a young collection every 50,000 allocations (700 by default), a full
one a hundred times rarer again; cycles are rare in mirrorgate's data (records, tuples). The
cache holds a few tracked objects per version, and every full collection walks them all: with
the defaults a cold install spent 12 s of its 70 in the collector, with these 0.7 s."""
ARENAS = 2
"""glibc's malloc arenas, at most: each thread a fill parses in keeps an arena of its own, and
what it freed stays mapped."""
MMAP_ABOVE = 1024 * 1024
"""Blocks of at least this many bytes are mapped apart and unmapped when freed (glibc's
`M_MMAP_THRESHOLD`, held here). Left to itself glibc raises it to the largest such block freed
(a 24 MiB packument's body, a 5 MiB file a reading captured), and every block below it is
carved from the arenas, where what is freed stays mapped between the small objects that
outlive it: 15 to 25 MiB of the defaults' peak on the scale tree (docs/serving.md, "The cold
path at scale"). Not glibc's own 128 KiB: every 256 KiB the tarball reader inflates at a time
and every file it captures would be a mapping made, faulted in page by page and unmapped, a
tenth of the capability reading's CPU (5.5 ms a MB against 4.8), for no lower peak (the
scale tree's and axios's the same at either)."""
KEEP_TOP = 4 * 1024 * 1024
"""Free bytes glibc keeps at the top of a heap before it gives them back (`M_TRIM_THRESHOLD`).
Holding the mapping threshold also holds this at glibc's 128 KiB, and a reading that frees
and takes a few hundred KiB at a time then shrinks and grows the heap each time, every page
faulted in again: the capability reading cost 6.2 ms of CPU a MB at 128 KiB against 4.8 at
4 MiB (`bench/release_relay.py --reading`)."""
OPEN_FILES_AT_MOST = 1 << 20
"""The soft limit on open files is raised to the hard one, at most this (an unlimited hard
limit is taken as this)."""
_M_ARENA_MAX = -8  # glibc's mallopt parameter numbers
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1


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
    """At most `ARENAS` malloc arenas, large blocks mapped apart from `MMAP_ABOVE` bytes and
    `KEEP_TOP` bytes kept free at a heap's top (glibc only; call it before any thread
    starts): False where the C library has no mallopt, which changes nothing else."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (bool(mallopt(_M_ARENA_MAX, ARENAS)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_ABOVE))
            and bool(mallopt(_M_TRIM_THRESHOLD, KEEP_TOP)))


def inflate_with_isal() -> None:
    """aiohttp's gzip by ISA-L (a dependency already: the tarball reader inflates with it):
    public's packuments arrive gzip'd, 475 MB of them inflated in a cold install of the scale
    tree, at 0.4 ms of CPU a MiB against zlib's 1.8. aiohttp still bounds each inflate's
    output (`max_length`), so the metadata cap counts inflated bytes as before. mirrorgate's
    own gzip (the served packuments') does not go through aiohttp."""
    aiohttp.set_zlib_backend(isal_zlib)


def open_files() -> int:
    """The soft limit on open descriptors raised to the hard one (systemd's services start at
    1,024 soft under 524,288 hard; containers mostly at their hard limit), and the limit now
    in force. The worker's handoff holds a descriptor a tarball waiting for its job
    (`handoff.files_for`), the one bound a cold install of a large tree reached."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = OPEN_FILES_AT_MOST if hard == resource.RLIM_INFINITY else min(
            hard, OPEN_FILES_AT_MOST)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    except (OSError, ValueError) as error:  # not allowed here: the limit stays as it was
        log.warning("open_files_not_raised", detail=str(error))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return OPEN_FILES_AT_MOST if soft == resource.RLIM_INFINITY else soft
