"""Which CPUs a bench's processes run on: one way to pin a process, whole, and to keep a core
for mirrorgate.

A bench that measures one server's CPU puts it on a CPU of its own and its load on another, so
that the two do not take turns on one core. `os.sched_setaffinity(pid, ...)` moves one thread
alone (Linux's affinity is per thread, and the pid is the main thread's id): a server already
running keeps its other threads (executors, reading lanes, a Node process's workers) on every
CPU. `pin` moves each thread the process has, and those it starts after inherit the CPU from
the thread that starts them.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["EVERYWHERE", "own_core", "pin"]

EVERYWHERE = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
    frozenset()
"""The CPUs this process may use, read when the bench starts, before any pin: a child forked by
a pinned thread inherits its one CPU, and must still be able to move to its own."""


def pin(cpu: int, pid: int = 0) -> None:
    """Run process `pid` (0: this one) on `cpu` alone, every thread of it. Nothing on a machine
    of one CPU, or for a CPU the bench may not use (the figures then say so by their spread)."""
    if len(EVERYWHERE) < 2 or cpu not in EVERYWHERE:
        return
    tasks = f"/proc/{pid or os.getpid()}/task"
    try:
        threads = [int(task) for task in os.listdir(tasks)]
    except OSError:  # no /proc: the one thread named
        threads = [pid]
    for thread in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(thread, {cpu})


def own_core() -> str:
    """Keep the first CPU for mirrorgate, as a mirror on a host apart from the build would run:
    this thread moves to the others (every thread and child it makes after, npm's included,
    inherit that), and the line of start-up code returned moves a child to the first before any
    thread of its own starts. ValueError on a machine of one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise ValueError(f"mirrorgate on a core of its own needs two CPUs or more; this process "
                         f"may use {len(cpus)}")
    os.sched_setaffinity(0, set(cpus[1:]))
    return f"import os; os.sched_setaffinity(0, {{{cpus[0]}}})"
