"""The packument service: one cache, filled by one source, read by everyone in the process.

The serve path reads it for every request, an in-process worker re-gates through it
(`public.ServedPublic`), and the status page shows what it holds, so a client, the worker and a
person always see the same verdicts, and a cold name costs one fill however many ask at once.
A client under a policy set (`[policy.NAME]`) reads entries gated by its rules, kept under keys
of their own (`cache_key`): one policy's packument is never another's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.packuments.entry import PackumentEntry
from mirrorgate.gate.packuments.fill import PackumentSource
from mirrorgate.gate.records import Gated, VersionRecord
from mirrorgate.npm.names import PackageName
from mirrorgate.upstream.client import UpstreamError

__all__ = ["ALONE_SHARE", "PINS", "RECENT_SHARE", "Packuments", "Pinned", "cache_key"]

PINS = 4096
"""Versions whose records are pinned for the worker beside the proxy, at most (oldest go)."""
ALONE_SHARE = 8
"""The one-version entries (`for_tarball`) keep this fraction of the cache's byte budget..."""
RECENT_SHARE = 32
"""... and the public answers they were read from this one (16 MiB of the default 512): the
packuments' entries keep the rest, so MIRRORGATE_CACHE_MAX_BYTES counts all three. A cold
`npm ci` asks for a name's versions far apart (each under another parent in the lockfile):
a quarter of this budget kept its answers long enough for 7 of 217 such versions of the scale
tree, and was 64 MiB of its peak (docs/serving.md, "The cold path at scale")."""


def cache_key(key: str, policy: str | None) -> str:
    """The cache's key for `key` (a name, or `name@version`) gated under `policy`: the name
    alone for the default rules, else with the policy after a space, which no npm name holds."""
    return key if policy is None else f"{key} {policy}"


@dataclass(frozen=True, slots=True)
class Pinned:
    """A version's record as its entry held it when its job was enqueued, good until the entry
    would have gone stale, under the rules generation it was gated with."""

    record: VersionRecord
    published: str | None
    fresh_until: float
    generation: int


class Packuments:
    """`cache` of `PackumentEntry`, filled by `source.load` on a miss or past the TTL."""

    def __init__(self, source: PackumentSource, cache: PackumentCache[PackumentEntry],
                 clock: Callable[[], float], *, pins: int = 0) -> None:
        self.source = source
        self.cache = cache
        self.clock = clock
        # The worker beside the proxy judges a job by the entry's record of its version, a few
        # seconds after the pull; on a cold install of thousands of names the byte budget has
        # often evicted that entry by then, and judging it meant filling the packument again
        # (a third of a cold install's fills). The record itself is kept for the job instead:
        # a few KB a version, for no longer than the entry would have been served.
        self._pins: OrderedDict[tuple[str, str], Pinned] | None = (
            OrderedDict() if pins > 0 else None)
        self._max_pins = pins
        # A tarball's admission needs its own version judged, not the thousands its packument
        # may list (a cold `npm ci` asks for tarballs alone): such one-version entries live in
        # a cache of their own, keyed `name@version`, so one never stands for the packument.
        alone, recent = cache.max_bytes // ALONE_SHARE, cache.max_bytes // RECENT_SHARE
        self.alone: PackumentCache[PackumentEntry] = cache.sibling(alone)
        # ... and the public packument's bytes, for another version of the name a moment
        # later (a cold install's tarballs of one name come one by one): read again lazily,
        # not fetched again
        source.recent = cache.sibling(recent)
        cache.max_bytes -= alone + recent

    def pin(self, name: PackageName, version: str) -> None:
        """Keep the cached record of `name@version` for the job just enqueued for it."""
        slot = self.cache.peek(name.full)
        if slot is None or slot.value.gated is None:
            slot = self.alone.peek(f"{name.full}@{version}")
        if self._pins is None or slot is None or slot.value.gated is None:
            return
        gated = slot.value.gated
        record = gated.versions.get(version)
        if record is None:
            return
        key = (name.full, version)
        self._pins[key] = Pinned(record, gated.time.get(version), slot.fresh_until,
                                 gated.rules_generation)
        self._pins.move_to_end(key)
        while len(self._pins) > self._max_pins:
            self._pins.popitem(last=False)

    def pinned(self, name: PackageName, version: str) -> Pinned | None:
        """The pinned record of `name@version` while it is good (fresh, and gated with the
        rules in force), taken out; None otherwise."""
        if self._pins is None:
            return None
        pinned = self._pins.pop((name.full, version), None)
        if (pinned is None or self.clock() >= pinned.fresh_until
                or pinned.generation != self.source.rules.generation):
            return None
        return pinned

    def fresh(self, name: PackageName,
              policy: str | None = None) -> Cached[PackumentEntry] | None:
        """The entry within its TTL and gated with the rules in force (those of `policy`, a
        policy set's name, None for the default rules), or None: never fills, never waits (the
        warm path)."""
        # `cache_key`, written out: this is every warm request's lookup
        slot = self.cache.fresh(name.full if policy is None else f"{name.full} {policy}")
        if slot is not None and not self._current(slot):
            return None
        return slot

    async def entry(self, name: PackageName,
                    policy: str | None = None) -> Cached[PackumentEntry]:
        """The entry, filled now when it is missing or past its TTL (stale-if-error applies),
        or gated with rules no longer in force. Raises UpstreamError or TooManyVersionsError
        when nothing usable can be had, UnknownPolicyError for a policy the rules lack."""
        key = cache_key(name.full, policy)
        if (slot := self.cache.fresh(key)) is not None and not self._current(slot):
            return await self.refresh(name, policy)  # gated again now, whatever its TTL says
        slot = await self.cache.get(key, lambda previous: self.source.load(
            name, previous, policy=policy))
        if not self._current(slot):
            # a stale copy stands in for a fill that failed, but no answer after a rules
            # change is built from the rules it replaced
            raise UpstreamError("public", "unreachable", "the rules changed and the upstreams "
                                "could not be asked to gate this package again")
        return slot

    async def for_tarball(self, name: PackageName, version: str,
                          policy: str | None = None) -> Gated | None:
        """What admits a tarball of `name@version` (`version_entry`'s gating)."""
        return (await self.version_entry(name, version, policy)).value.gated

    async def version_entry(self, name: PackageName, version: str,
                            policy: str | None = None) -> Cached[PackumentEntry]:
        """The entry that judges `name@version`: the packument's when it is fresh or being
        filled, else that version's judged alone (filled from the public packument read
        lazily, `npm.lazydoc`): the same verdict on it, at a fraction of the cost. Raises as
        `entry` does."""
        whole = cache_key(name.full, policy)
        cached = self.cache.peek(whole)  # a look: `entry` counts the read
        if self.cache.filling(whole) or (cached is not None
                                         and self.clock() < cached.fresh_until):
            return await self.entry(name, policy)
        key = cache_key(f"{name.full}@{version}", policy)

        def load(previous: Cached[PackumentEntry] | None) -> Awaitable[Loaded[PackumentEntry]]:
            return self.source.load(name, previous, only=version, policy=policy)

        slot = self.alone.fresh(key)
        if slot is not None and not self._current(slot):
            slot = await self.alone.refresh(key, load)
        elif slot is None:
            slot = await self.alone.get(key, load)
        if not self._current(slot):
            raise UpstreamError("public", "unreachable", "the rules changed and the upstreams "
                                "could not be asked to gate this package again")
        return slot

    def _current(self, slot: Cached[PackumentEntry]) -> bool:
        gated = slot.value.gated
        return gated is None or gated.rules_generation == self.source.rules.generation

    async def refresh(self, name: PackageName,
                      policy: str | None = None) -> Cached[PackumentEntry]:
        """The entry filled now, fresh or not (revalidated; no stale answer)."""
        return await self.cache.refresh(cache_key(name.full, policy), lambda previous:
                                        self.source.load(name, previous, policy=policy))

    async def gated(self, name: PackageName, policy: str | None = None) -> Gated | None:
        return (await self.entry(name, policy)).value.gated

    def private_answered(self, name: PackageName, version: str | None = None,
                         policy: str | None = None) -> bool:
        """Whether the fresh entry of `name` (else of `name@version` judged alone) was built
        with the private upstream's answer."""
        slot = self.fresh(name, policy)
        if slot is None and version is not None:
            # a look, not a client's read
            slot = self.alone.peek(cache_key(f"{name.full}@{version}", policy))
            if slot is not None and self.clock() >= slot.fresh_until:
                slot = None
        return slot is not None and slot.value.private_answered

    def forget(self, name: PackageName) -> None:
        """Drop `name`'s entries, under every policy set, after a write changed it."""
        self.drop(name.full)

    def drop(self, full: str, version: str | None = None, *, here: bool = False) -> None:
        """Drop what was gated for the name `full` (of its one-version entries, `version`'s
        alone when given), fresh or stale, and the records pinned for the worker: a fact it
        was gated without has changed (`Gate`). Learned `here`, by a fill of this process,
        the fills under way stay (that fill knows it, and its entry is what stale-if-error
        falls back on). Learned by another process, the fills under way are not kept, nor
        public's kept answer for the name, being older than the fact: a withdrawal another
        replica saw, judged again against public's answer from before it, would read as
        listed again and be forgotten by the whole fleet."""
        fills = not here
        policies = (None, *self.source.rules.policies)  # each set's entries are its own
        for policy in policies:
            self.cache.forget(cache_key(full, policy), fills=fills)
        if version is None:  # every set's one-version entries start with the name and "@"
            self.alone.forget_under(f"{full}@", fills=fills)
        else:
            for policy in policies:
                self.alone.forget(cache_key(f"{full}@{version}", policy), fills=fills)
        self.source.forget_history(full)
        if not here and self.source.recent is not None:
            self.source.recent.forget(full)
        if self._pins:
            for key in [key for key in self._pins if key[0] == full
                        and (version is None or key[1] == version)]:
                del self._pins[key]

    def clear(self) -> None:
        """`drop` every name."""
        self.cache.clear()
        self.alone.clear()
        self.source.forget_history()
        if self.source.recent is not None:
            self.source.recent.clear()
        if self._pins:
            self._pins.clear()
