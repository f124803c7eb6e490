"""A process's resident memory, read from /proc, for the rows that bound it (11 and 13).

`VmRSS` is what the process holds now and `VmHWM` the most it has held (its peak);
`reset_peak` writes `5` to `/proc/<pid>/clear_refs`, which sets the peak back to the current
figure, so each case measures its own peak. Figures are bytes; `mib()` formats them for the
report lines the tests print (run pytest with `-s` to see them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["MIB", "Rss", "mib", "reset_peak", "rss"]

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


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5", encoding="ascii")


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
