"""The versions a lockfile pins, whatever client wrote it: npm (v1 to v3), pnpm (v6, v9),
yarn (classic, berry) and bun (`bun.lock`). Registry versions are `LockedEntry`s (name,
version, the ranges that asked for it, where it is written); git, file, link, workspace and
URL pins are `SkippedEntry`s, which no registry rule can judge."""

from __future__ import annotations

from pathlib import Path

from mirrorgate.commands.lockfiles.entries import (
    LockedEntry,
    Lockfile,
    LockfileError,
    SkippedEntry,
)

__all__ = ["LockedEntry", "Lockfile", "LockfileError", "SkippedEntry", "read_lockfile",
           "read_lockfiles"]

MAX_BYTES = 64 * 1024 * 1024
"""A lockfile larger than this is refused rather than read into memory (a large monorepo's is
a few MB)."""


def read_lockfile(path: Path) -> Lockfile:
    """The lockfile at `path`, its kind told by its name (`yarn.lock`'s flavour by its text).
    Raises `LockfileError` for an unknown name, an unreadable file or malformed content."""
    from mirrorgate.commands.lockfiles import bun, npm, pnpm, yarn

    readers = {"package-lock.json": npm.read, "npm-shrinkwrap.json": npm.read,
               "pnpm-lock.yaml": pnpm.read, "yarn.lock": yarn.read, "bun.lock": bun.read}
    reader = readers.get(path.name)
    if path.name == "bun.lockb":
        # bun's older binary lockfile: no reader, but bun writes the text one on request
        raise LockfileError(path, 0, "is bun's binary lockfile, which mirrorgate does not "
                            "read: run `bun install --save-text-lockfile` to write bun.lock "
                            "beside it, and check that")
    if reader is None:
        raise LockfileError(path, 0, "is not a lockfile mirrorgate reads (expected "
                            "package-lock.json, npm-shrinkwrap.json, pnpm-lock.yaml, "
                            "yarn.lock or bun.lock)")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise LockfileError(path, 0, f"is larger than {MAX_BYTES // (1024 * 1024)} MiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LockfileError(path, 0, f"cannot be read: {error}") from None
    return reader(path, text)


def read_lockfiles(paths: list[Path]) -> list[Lockfile]:
    """Every lockfile in `paths`, in order; the first that cannot be read raises."""
    return [read_lockfile(path) for path in paths]
