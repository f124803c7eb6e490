"""The packument service: one cache, filled by one source, read by everyone in the process.

The serve path reads it for every request, an in-process worker re-gates through it
(`public.ServedPublic`), and the status page shows what it holds, so a client, the worker and a
person always see the same verdicts, and a cold name costs one fill however many ask at once.
"""

from __future__ import annotations

from collections.abc import Callable

from mirrorgate.gate.cache import Cached, PackumentCache
from mirrorgate.gate.entry import PackumentEntry
from mirrorgate.gate.fill import PackumentSource
from mirrorgate.gate.records import Gated
from mirrorgate.npm.names import PackageName

__all__ = ["Packuments"]


class Packuments:
    """`cache` of `PackumentEntry`, filled by `source.load` on a miss or past the TTL."""

    def __init__(self, source: PackumentSource, cache: PackumentCache[PackumentEntry],
                 clock: Callable[[], float]) -> None:
        self.source = source
        self.cache = cache
        self.clock = clock

    def fresh(self, name: PackageName) -> Cached[PackumentEntry] | None:
        """The entry within its TTL, or None: never fills, never waits (the warm path)."""
        return self.cache.fresh(name.full)

    async def entry(self, name: PackageName) -> Cached[PackumentEntry]:
        """The entry, filled now when it is missing or past its TTL (stale-if-error applies).
        Raises UpstreamError or TooManyVersionsError when nothing usable can be had."""
        return await self.cache.get(name.full, lambda previous: self.source.load(name,
                                                                                 previous))

    async def refresh(self, name: PackageName) -> Cached[PackumentEntry]:
        """The entry filled now, fresh or not (revalidated; no stale answer)."""
        return await self.cache.refresh(name.full, lambda previous: self.source.load(name,
                                                                                     previous))

    async def gated(self, name: PackageName) -> Gated | None:
        return (await self.entry(name)).value.gated

    def private_answered(self, name: PackageName) -> bool:
        """Whether the fresh entry of `name` was built with the private upstream's answer."""
        slot = self.fresh(name)
        return slot is not None and slot.value.private_answered

    def forget(self, name: PackageName) -> None:
        """Drop `name`'s entry after a write changed it."""
        self.cache.forget(name.full)
