"""What is stored, for the status page: counts that survive a restart, behind one provider.

The page shows these beside the process's own counters, which start at zero with each
process. The mirror store is counted where it can be read (the embedded file store); the
versions refused and held back, and the waivers in force, come from the state store
(`with_state_store`): every replica's, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.kept.waivers import held_waivers
from mirrorgate.store import StoreUnavailableError

__all__ = ["Stored", "StoredCounts", "file_store_counts", "stored_counts_for",
           "with_state_store"]

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
    """Where the mirrored versions are counted."""
    waived: int | None = None
    kept_by: str | None = None
    """Where the refused, quarantined and waived counts come from; None: nowhere yet (the
    state store is not loaded, or the process keeps none)."""


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


def with_state_store(base: StoredCounts, facts: KeptFacts,
                     clock: Callable[[], float] = time.monotonic) -> StoredCounts:
    """`base`'s mirrored count, with what the state store holds for the whole fleet: the
    versions its pull log says were refused outright and held back until a moment still
    ahead (a cooldown, a quarantine), within the log's retention, and the waivers in force
    (the facts every replica follows). The store is asked at most every `_KEPT_FOR` seconds."""
    last: list[tuple[float, int, int]] = []

    async def counts() -> Stored:
        found = await base()
        store = facts.store
        if store is None or not facts.ready:
            return found
        now = clock()
        if not last or now - last[0][0] > _KEPT_FOR:
            try:
                refused, held = await store.refusal_counts(datetime.now(UTC))
            except StoreUnavailableError:
                return found
            last[:] = [(now, refused, held)]
        _at, refused, held = last[0]
        info = store.info
        every = "every replica's" if info.kind == "postgresql" else "this store's"
        return dataclasses.replace(
            found, refused=refused, quarantined=held,
            waived=len(held_waivers(facts, datetime.now(UTC))),
            kept_by=f"the state store ({info.kind}, {every})")

    return counts
