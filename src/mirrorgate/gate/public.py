"""Where the worker reads the public packument it re-gates a job against: through a cache.

A reader answers `name` with the public upstream's packument as it sent it (`PublicAnswer`), so
a job right after a pull costs no second public request. Only public's own bytes are shared,
never the merged, gated or rendered packument.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mirrorgate.config import Settings
from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.entry import PackumentEntry, PublicAnswer
from mirrorgate.npm.names import PackageName
from mirrorgate.upstream.client import FILLS, Upstream, UpstreamError

if TYPE_CHECKING:  # named in a signature only
    from mirrorgate.gate.packuments import Packuments

__all__ = ["CachedPublic", "PublicPackuments", "ServedPublic"]


class PublicPackuments(Protocol):
    """Reads public packuments; both raise `UpstreamError` (transient for a stale copy)."""

    async def read(self, name: PackageName) -> PublicAnswer:
        """The cached answer within its TTL, else one filled now (single flight)."""

    async def refresh(self, name: PackageName) -> PublicAnswer:
        """An answer revalidated with the upstream now (the same object when unchanged): a
        cached copy may predate the version a job names (published since), so the worker
        confirms a refusal with this before it retires the job."""


def _usable(fresh_until: float, answer: PublicAnswer | None, clock: Callable[[], float],
            label: str) -> PublicAnswer:
    # The cache serves a stale entry while a revalidation fails (stale-if-error), which suits
    # a client but not an admission: the job is retried until public answers again.
    if clock() >= fresh_until:
        raise UpstreamError(label, "unreachable", "the cached public packument is past its "
                            "TTL and could not be revalidated; a stale copy never admits a job")
    if answer is None:
        raise UpstreamError(label, "unreachable", "the cached packument was built without the "
                            "public upstream's answer (it failed, or the name is first-party)")
    return answer


class ServedPublic:
    """An in-process worker's reader: the packument service's own entries, the same entry (and
    the same single-flight fill) a client's request gets. The source keeps public's answer in
    each entry for it (`PackumentSource.keep_public`)."""

    def __init__(self, packuments: Packuments) -> None:
        self.packuments = packuments

    async def read(self, name: PackageName) -> PublicAnswer:
        return self._answer(await self.packuments.entry(name))

    async def refresh(self, name: PackageName) -> PublicAnswer:
        return self._answer(await self.packuments.refresh(name))

    def _answer(self, slot: Cached[PackumentEntry]) -> PublicAnswer:
        return _usable(slot.fresh_until, slot.value.public, self.packuments.clock,
                       self.packuments.source.public.label)


class CachedPublic:
    """`mirrorgate worker`'s reader: a `PackumentCache` of public answers with the serve
    path's settings (MIRRORGATE_CACHE_TTL, _MAX_ENTRIES, _MAX_BYTES; single flight; ETag
    revalidation), read on the public client's `FILLS` pool like a serve-path fill."""

    def __init__(self, public: Upstream, settings: Settings, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.public = public
        self.clock = clock
        self.cache: PackumentCache[PublicAnswer] = PackumentCache(
            ttl=settings.cache_ttl, max_entries=settings.cache_max_entries,
            max_bytes=settings.cache_max_bytes, clock=clock)

    async def read(self, name: PackageName) -> PublicAnswer:
        slot = await self.cache.get(name.full, lambda previous: self._load(name, previous))
        return _usable(slot.fresh_until, slot.value, self.clock, self.public.label)

    async def refresh(self, name: PackageName) -> PublicAnswer:
        slot = await self.cache.refresh(name.full, lambda previous: self._load(name, previous))
        return _usable(slot.fresh_until, slot.value, self.clock, self.public.label)

    async def _load(self, name: PackageName,
                    previous: Cached[PublicAnswer] | None) -> Loaded[PublicAnswer]:
        etag = previous.validator if previous is not None else None
        answer = await self.public.get_json(name.url_path(), etag=etag, pool=FILLS)
        if answer.status == 304 and previous is not None:
            return Loaded(previous.value, previous.size, answer.etag)
        if answer.status == 304:
            raise UpstreamError(self.public.label, "status", "answered 304 to a request "
                                "without If-None-Match", status=304)
        if answer.status == 404:
            return Loaded(PublicAnswer(None), 256)
        return Loaded(PublicAnswer(answer.body), answer.size + 256, answer.etag)
