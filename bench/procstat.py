"""What a running process has used, read from /proc: CPU seconds (whole and per thread) and memory.

CPU seconds are the kernel's own accounting (utime + stime, in clock ticks), far less noisy on a
shared machine than wall time; VmHWM is the peak resident set since the process started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Usage", "usage"]

_TICK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


def _cpu(stat: Path) -> float:
    # the command name (field 2) may hold spaces and parentheses: count from its last ')'
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _status(pid: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


@dataclass(frozen=True)
class Usage:
    """A process's CPU seconds so far (`main`: its first thread, the event loop in
    mirrorgate; `threads`: every other thread alive now, ended ones only in `cpu`) and its
    resident memory now and at its peak, in bytes."""

    cpu: float
    main: float
    threads: float
    rss: int
    peak_rss: int

    def minus(self, earlier: Usage) -> Usage:
        """CPU used since `earlier`, memory as now."""
        return Usage(self.cpu - earlier.cpu, self.main - earlier.main,
                     self.threads - earlier.threads, self.rss, self.peak_rss)


def usage(pid: int) -> Usage:
    total = _cpu(Path(f"/proc/{pid}/stat"))
    main = 0.0
    others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            spent = _cpu(task / "stat")
        except OSError:  # a thread that ended just now
            continue
        if task.name == str(pid):
            main = spent
        else:
            others += spent
    memory = _status(pid)
    return Usage(total, main, others, memory.get("VmRSS", 0), memory.get("VmHWM", 0))
