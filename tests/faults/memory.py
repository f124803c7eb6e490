"""A process's resident memory and CPU time, read from /proc, for the rows that bound them (11,
13 and 31).

`VmRSS` is what the process holds now and `VmHWM` the most it has held (its peak);
`reset_peak` writes `5` to `/proc/<pid>/clear_refs`, which sets the peak back to the current
figure, so each case measures its own peak. Figures are bytes; `mib()` formats them for the
report lines the tests print (run pytest with `-s` to see them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MIB", "Rss", "cpu_seconds", "mib", "reset_peak", "rss"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Rss:
    current: int
    peak: int


def _field(status: str, name: str) -> int:
    for line in status.splitlines():
        if line.startswith(name + ":"):
            value, unit = line.split(":", 1)[1].split()
            if unit != "kB":
                raise ValueError(f"unexpected unit {unit!r} for {name}")
            return int(value) * 1024
    raise ValueError(f"{name} is not in /proc status")


def rss(pid: int) -> Rss:
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    return Rss(current=_field(status, "VmRSS"), peak=_field(status, "VmHWM"))


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time of every thread of the process so far (/proc/PID/stat's
    utime and stime, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5", encoding="ascii")


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
