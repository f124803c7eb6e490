"""The registry versions a command's lockfile arguments pin, with what they skip said as notes.

One place for what `check`, `prewarm` and `audit` do with `LOCKFILE...`: read every file
(`lockfiles`), note each git, file, link or workspace dependency as skipped (never an error),
and turn a lockfile that cannot be read into the usage error (exit 2) naming its file and line.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.commands.lockfiles import LockedEntry, LockfileError, read_lockfiles
from mirrorgate.commands.report import Report, usage_error

__all__ = ["pinned"]


def pinned(paths: list[Path], report: Report) -> list[LockedEntry] | int:
    """Every registry version the lockfiles pin, or the exit code of a usage error."""
    try:
        lockfiles = read_lockfiles(paths)
    except LockfileError as error:
        return usage_error(f"{error}; fix or regenerate the lockfile (its client's install "
                           "writes it anew)")
    for lockfile in lockfiles:
        for skipped in lockfile.skipped:
            origin = f" ({skipped.source})" if skipped.source != skipped.name else ""
            report.note(f"{skipped.where}: {skipped.name}{origin} is {skipped.reason}; "
                        "not checked")
    return [entry for lockfile in lockfiles for entry in lockfile.entries]
