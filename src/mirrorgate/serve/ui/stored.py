"""What is stored, for the status page: counts that survive a restart, behind one provider.

The page shows these beside the process's own counters, which start at zero with each
process. Today the mirror store is counted where it can be read (the embedded file store);
refused and quarantined versions are kept by each process alone, so they are not counted
here. The state store supplies all three later through the same `StoredCounts`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["Stored", "StoredCounts", "file_store_counts", "stored_counts_for"]

_KEPT_FOR = 10.0
"""Seconds a count is reused: a page reloaded by an on-call engineer does not walk the store
each time."""


@dataclass(frozen=True, slots=True)
class Stored:
    """Counts of what is stored; None where nothing durable keeps it yet, with `where`
    saying what the counts come from."""

    mirrored: int | None
    refused: int | None
    quarantined: int | None
    where: str


StoredCounts = Callable[[], Awaitable[Stored]]
"""The provider the page asks: a coroutine function, cheap enough for every page view."""


def _count(root: Path) -> int:
    # <root>/<name>/versions/<version>.json and <root>/@<scope>/<name>/versions/<version>.json
    if not root.is_dir():
        return 0
    return (sum(1 for _ in root.glob("*/versions/*.json"))
            + sum(1 for _ in root.glob("@*/*/versions/*.json")))


def file_store_counts(root: Path, clock: Callable[[], float] = time.monotonic) -> StoredCounts:
    """The versions the embedded file store at `root` holds, counted in a thread and kept
    for `_KEPT_FOR` seconds."""
    last: list[tuple[float, int]] = []

    async def counts() -> Stored:
        now = clock()
        if not last or now - last[0][0] > _KEPT_FOR:
            found = await asyncio.to_thread(_count, root)
            last[:] = [(now, found)]
        return Stored(mirrored=last[0][1], refused=None, quarantined=None,
                      where=f"the file store {root}")

    return counts


def stored_counts_for(mirror_target: str) -> StoredCounts:
    """The provider for a mirror target URL: the file store's count, or none for a registry
    over HTTP (which lists no count of its versions)."""
    parts = urlsplit(mirror_target)
    if parts.scheme == "file":
        return file_store_counts(Path(unquote(parts.path)))

    async def uncounted() -> Stored:
        return Stored(mirrored=None, refused=None, quarantined=None,
                      where=f"the registry at {parts.hostname} (it lists no count)")

    return uncounted
