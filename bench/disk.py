"""Which filesystem a bench writes to, and whether it keeps a journal: said beside its figures.

ext4 without a journal (this machine's root disk) checks each inode it would allocate against
those deleted in the last minute, so every file made after a bench deleted a node_modules costs
a walk past them: a fifth of mirrorgate's cold CPU here, and much of npm's. Measure with TMPDIR
on a journaled filesystem (docs/serving.md, "The disk under the bench").
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["filesystem_of"]


def filesystem_of(path: Path | str) -> str:
    """"ext4 on /dev/vda, no journal", say, for the filesystem holding `path`."""
    target = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        mount = fields[4].replace("\\040", " ")
        rest = fields[fields.index("-") + 1:]
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[0])) and len(rest) >= 2:
            best = (mount, rest[0], rest[1])
    if best is None:
        return "unknown"
    _mount, kind, source = best
    if kind != "ext4":
        return f"{kind} on {source}"
    device = os.path.basename(source)
    try:
        journaled = any(entry.startswith(f"{device}-") for entry in os.listdir("/proc/fs/jbd2"))
    except OSError:
        journaled = False
    return f"ext4 on {source}, {'journaled' if journaled else 'no journal'}"
