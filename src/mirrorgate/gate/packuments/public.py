"""Where the worker reads the public packument it re-gates a job against: through a cache.

A reader answers `name` with the public upstream's packument as it sent it (`PublicAnswer`), so
a job right after a pull costs no second public request; each reader parses its own copy.

The worker beside the proxy first asks for the proxy's own verdict on the job's version
(`verdict`), so a job costs no second parse and gate; only a record of public's own is used,
never a private copy's. docs/untrusted-queue.md tells why that is safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mirrorgate.config import CacheSettings
from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.packuments.entry import PackumentEntry, PublicAnswer
from mirrorgate.gate.records import VersionRecord
from mirrorgate.npm.names import PackageName
from mirrorgate.upstream.client import FILLS, Upstream, UpstreamError

if TYPE_CHECKING:  # named in a signature only
    from mirrorgate.gate.packuments.service import Packuments

__all__ = ["FALLBACK_BYTES", "CachedPublic", "PublicPackuments", "PublicVerdict",
           "ServedPublic"]

FALLBACK_BYTES = 32 * 1024 * 1024
"""The byte budget of the public answers the worker beside the proxy keeps for the jobs the
proxy's verdicts cannot judge (a version the private registry also holds, one published since
the fill); `mirrorgate worker` alone keeps MIRRORGATE_CACHE_MAX_BYTES of them."""


@dataclass(frozen=True, slots=True)
class PublicVerdict:
    """The serve path's record of a public version, gated with the rules in force and within
    its entry's freshness, and the version's publish time."""

    record: VersionRecord
    published: str | None


class PublicPackuments(Protocol):
    """Reads public packuments; both raise `UpstreamError` (transient for a stale copy)."""

    async def read(self, name: PackageName) -> PublicAnswer:
        """The cached answer within its TTL, else one filled now (single flight)."""

    async def refresh(self, name: PackageName) -> PublicAnswer:
        """An answer revalidated with the upstream now (the same object when unchanged): a
        cached copy may predate the version a job names (published since), so the worker
        confirms a refusal with this before it retires the job."""

    async def verdict(self, name: PackageName, version: str) -> PublicVerdict | None:
        """The proxy's own verdict on public's `version`, when this process serves and it is
        current; None: judge the job from `read`'s answer."""


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
    """An in-process worker's reader: the packument service's own verdicts (the same entry,
    and the same single-flight fill, a client's request gets), and public's answers from a
    small cache of its own (`answers`) for the jobs those cannot judge."""

    def __init__(self, packuments: Packuments, answers: PublicPackuments) -> None:
        self.packuments = packuments
        self.answers = answers

    async def read(self, name: PackageName) -> PublicAnswer:
        return await self.answers.read(name)

    async def refresh(self, name: PackageName) -> PublicAnswer:
        return await self.answers.refresh(name)

    async def verdict(self, name: PackageName, version: str) -> PublicVerdict | None:
        # the record the serve path gated from public's answer with the rules in force, the
        # one that admitted the pull: judging by it cost a third of a cold install's CPU less
        # than parsing and gating public's packument again
        pinned = self.packuments.pinned(name, version)
        cached = self.packuments.cache.peek(name.full)
        if pinned is not None and (cached is None
                                   or self.packuments.clock() >= cached.fresh_until):
            # evicted since the pull: the record kept for this job (`Packuments.pin`) is the
            # verdict the entry would still give, no fill needed
            return (PublicVerdict(pinned.record, pinned.published)
                    if not pinned.record.private else None)
        # its version judged alone unless the whole packument is at hand (`version_entry`)
        slot: Cached[PackumentEntry] = await self.packuments.version_entry(name, version)
        gated = slot.value.gated
        # a stale entry (served while a fill fails) never admits a job, as `_usable` says
        if gated is None or self.packuments.clock() >= slot.fresh_until:
            return None
        record = gated.versions.get(version)
        if record is None or record.private:
            return None  # not listed when filled, or the private copy's record: public's say
        return PublicVerdict(record, gated.time.get(version))


class CachedPublic:
    """`mirrorgate worker`'s reader: a `PackumentCache` of public answers with the serve
    path's settings (MIRRORGATE_CACHE_TTL, _MAX_ENTRIES, _MAX_BYTES; single flight; ETag
    revalidation), read on the public client's `FILLS` pool like a serve-path fill."""

    def __init__(self, public: Upstream, settings: CacheSettings, *, max_bytes: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.public = public
        self.clock = clock
        self.cache: PackumentCache[PublicAnswer] = PackumentCache(
            ttl=settings.cache_ttl, max_entries=settings.cache_max_entries,
            max_bytes=settings.cache_max_bytes if max_bytes is None else max_bytes,
            clock=clock)

    async def read(self, name: PackageName) -> PublicAnswer:
        slot = await self.cache.get(name.full, lambda previous: self._load(name, previous))
        return _usable(slot.fresh_until, slot.value, self.clock, self.public.label)

    async def refresh(self, name: PackageName) -> PublicAnswer:
        slot = await self.cache.refresh(name.full, lambda previous: self._load(name, previous))
        return _usable(slot.fresh_until, slot.value, self.clock, self.public.label)

    async def verdict(self, name: PackageName, version: str) -> PublicVerdict | None:
        return None  # no proxy in this process: every job is judged from public's answer

    async def _load(self, name: PackageName,
                    previous: Cached[PublicAnswer] | None) -> Loaded[PublicAnswer]:
        etag = previous.validator if previous is not None else None
        answer = await self.public.get_json(name.url_path(), etag=etag, pool=FILLS,
                                            parse=False)
        # a 200 that is not its packument is a failure; read lazily, as the serve path's
        # one-version fill reads it, since a job reads one version: a whole parse here (on
        # the loop) was thrown away, a 20 MB packument's 100 MiB of objects at once
        await self.public.lazy_packument_of(name, answer)
        if answer.status == 304 and previous is not None:
            return Loaded(previous.value, previous.size, answer.etag)
        if answer.status == 304:
            raise UpstreamError(self.public.label, "status", "answered 304 to a request "
                                "without If-None-Match", status=304)
        if answer.status == 404:
            return Loaded(PublicAnswer(None), 256)
        return Loaded(PublicAnswer(answer.body), answer.size + 256, answer.etag)
