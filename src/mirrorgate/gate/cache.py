"""The packument cache: a short TTL, single-flight fills, an LRU bound on entries and bytes.

A packument is merged, gated and rendered once per fill; every request within the TTL is a
dictionary lookup. The cache knows nothing about npm: it holds any value, filled by a loader
that gets the previous entry so it can revalidate (If-None-Match, the same value on a 304).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mirrorgate.errors import MirrorgateError

__all__ = ["HIT", "MISS", "REFRESH", "STALE", "Cached", "Loaded", "NoStaleAnswer",
           "PackumentCache"]

V = TypeVar("V")
W = TypeVar("W")

HIT = "hit"
MISS = "miss"
REFRESH = "refresh"
STALE = "stale"


@dataclass(slots=True)
class Cached(Generic[V]):
    """A cached value and its clocks. `validator` is the upstream ETag to revalidate with."""

    key: str
    value: V
    validator: str | None
    size: int
    fresh_until: float
    stale_until: float
    retry_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Loaded(Generic[V]):
    """What a loader hands back: the value (the previous slot's own value after a 304),
    its size in bytes (what the value holds, serialised), the upstream validator, and
    optionally a shorter freshness: e.g. a packument served from the private upstream alone
    while the public one is down, so the degraded answer is retried soon."""

    value: V
    size: int
    validator: str | None = None
    fresh_for: float | None = None


class NoStaleAnswer(MirrorgateError):  # noqa: N818 - a marker, mixed into the errors it marks
    """A loader's failure that stale-if-error must not cover: the key's previous entry is not
    served in its place, and goes (what the fill learned makes it wrong)."""


Loader = Callable[["Cached[V] | None"], Awaitable[Loaded[V]]]


def _ignore(_result: str) -> None:
    return None


def _retrieve(task: asyncio.Task[object]) -> None:
    if not task.cancelled():
        task.exception()


class PackumentCache(Generic[V]):
    """At most `max_entries` entries and `max_bytes` bytes, least recently used evicted first.

    Stale-if-error, bounded: past its TTL an entry is revalidated before it is served, but when
    the revalidation fails, or takes longer than `revalidate_wait`, the previous entry is served
    for up to `stale_if_error` seconds past its TTL, and a failed key is not retried for
    `retry_interval` seconds: a dead upstream costs one attempt per key every few seconds, not
    one per request. After that window the failure is the answer. Time is injected (`clock`),
    so tests move it instead of sleeping.
    """

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int,
        max_bytes: int,
        stale_if_error: float = 600.0,
        revalidate_wait: float = 2.0,
        retry_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        on_result: Callable[[str], None] = _ignore,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stale_if_error = stale_if_error
        self.revalidate_wait = revalidate_wait
        self.retry_interval = retry_interval
        self._clock = clock
        self._on_result = on_result
        self._slots: OrderedDict[str, Cached[V]] = OrderedDict()
        self._flights: dict[str, asyncio.Task[Cached[V]]] = {}
        self._forgotten: set[asyncio.Task[Cached[V]]] = set()
        self._bytes = 0

    # --- reading ---------------------------------------------------------------------------

    def fresh(self, key: str) -> Cached[V] | None:
        """The entry for `key` when it is within its TTL (a hit), else None. No waiting."""
        slot = self._slots.get(key)
        if slot is not None and self._clock() < slot.fresh_until:
            self._slots.move_to_end(key)
            self._on_result(HIT)
            return slot
        return None

    def peek(self, key: str) -> Cached[V] | None:
        """The entry for `key`, fresh or not, without counting a lookup or touching its place
        in the eviction order (a look from inside the process, not a client's read)."""
        return self._slots.get(key)

    async def get(self, key: str, load: Loader[V]) -> Cached[V]:
        """The entry for `key`: fresh from the cache, or filled (once for all concurrent
        callers) by `load`, or, when a revalidation fails or is slow, the stale entry.
        Raises what `load` raised when there is nothing usable to fall back on."""
        slot = self._slots.get(key)
        now = self._clock()
        usable = slot is not None and now < slot.stale_until
        if slot is not None:
            if now < slot.fresh_until:
                self._slots.move_to_end(key)
                self._on_result(HIT)
                return slot
            if usable and now < slot.retry_at:
                self._on_result(STALE)
                return slot
        # Single flight: concurrent misses for one key share one fill. It runs in its own task,
        # so a client that disconnects does not cancel it for the others, and its result is
        # stored even when nobody waits for it any more (a slow revalidation still updates).
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(self._fill(key, slot, load))
            self._flights[key] = flight
            flight.add_done_callback(_retrieve)
        if slot is None or not usable:
            self._on_result(MISS)
            return await asyncio.shield(flight)
        try:
            filled = await asyncio.wait_for(asyncio.shield(flight), self.revalidate_wait)
        except TimeoutError:
            self._on_result(STALE)
            return slot
        except NoStaleAnswer:
            raise
        except Exception:  # the upstream failed: the bounded stale window covers for it
            slot.retry_at = self._clock() + self.retry_interval
            self._on_result(STALE)
            return slot
        self._on_result(REFRESH)
        return filled

    async def refresh(self, key: str, load: Loader[V]) -> Cached[V]:
        """Fill `key` now, fresh or not (revalidating what is there; joining a fill already
        in flight), and return what was stored. Raises what `load` raised: no stale answer."""
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(
                self._fill(key, self._slots.get(key), load))
            self._flights[key] = flight
            flight.add_done_callback(_retrieve)
        return await asyncio.shield(flight)

    # --- filling ---------------------------------------------------------------------------

    async def _fill(self, key: str, previous: Cached[V] | None, load: Loader[V]) -> Cached[V]:
        flight = asyncio.current_task()
        try:
            loaded = await load(previous)
        except NoStaleAnswer:
            self.forget(key, fills=False)  # nor is it served later, while a fill is slow
            raise
        finally:
            if self._flights.get(key) is flight:  # a forget() may have started another since
                del self._flights[key]
        now = self._clock()
        fresh_for = self.ttl if loaded.fresh_for is None else min(self.ttl, loaded.fresh_for)
        if flight in self._forgotten:
            # begun before a write changed the key: its waiters get it, the cache keeps nothing
            self._forgotten.discard(flight)
            return Cached(key, loaded.value, loaded.validator, loaded.size, now, now)
        if previous is not None and loaded.value is previous.value:
            previous.validator = loaded.validator or previous.validator
            previous.fresh_until = now + fresh_for
            previous.stale_until = now + fresh_for + self.stale_if_error
            previous.retry_at = 0.0
            if self._slots.get(key) is not previous:
                self._store(previous)
            return previous
        slot = Cached(key, loaded.value, loaded.validator, loaded.size, now + fresh_for,
                    now + fresh_for + self.stale_if_error)
        self._store(slot)
        return slot

    def _store(self, slot: Cached[V]) -> None:
        old = self._slots.pop(slot.key, None)
        if old is not None:
            self._bytes -= old.size
        if slot.size > self.max_bytes:  # larger than the whole budget: served once, not kept
            return
        self._slots[slot.key] = slot
        self._bytes += slot.size
        self._evict()

    def _evict(self) -> None:
        while self._slots and (len(self._slots) > self.max_entries
                               or self._bytes > self.max_bytes):
            _key, evicted = self._slots.popitem(last=False)
            self._bytes -= evicted.size

    def grow(self, slot: Cached[V], delta: int) -> None:
        """Account `delta` more bytes held by `slot`'s value (a rendering added to it)."""
        slot.size += delta
        if self._slots.get(slot.key) is slot:
            self._bytes += delta
            self._evict()

    def sibling(self, max_bytes: int) -> PackumentCache[W]:
        """An empty cache (of any values) with these clocks and windows, and its own byte
        budget."""
        return PackumentCache(ttl=self.ttl, max_entries=self.max_entries, max_bytes=max_bytes,
                              stale_if_error=self.stale_if_error,
                              revalidate_wait=self.revalidate_wait,
                              retry_interval=self.retry_interval, clock=self._clock,
                              on_result=self._on_result)

    def filling(self, key: str) -> bool:
        """Whether a fill of `key` is under way."""
        return key in self._flights

    # --- inspection ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    @property
    def bytes(self) -> int:
        return self._bytes

    def forget(self, key: str, *, fills: bool = True) -> None:
        """Drop `key`'s entry, so the next request fills it anew (after a write changed it);
        a fill already under way finishes for its waiters but is not kept (with `fills`
        False it is: it was begun knowing what changed)."""
        slot = self._slots.pop(key, None)
        if slot is not None:
            self._bytes -= slot.size
        flight = self._flights.pop(key, None) if fills else None
        if flight is not None:
            self._forgotten.add(flight)

    def forget_under(self, prefix: str, *, fills: bool = True) -> None:
        """`forget` every key that begins with `prefix`."""
        for key in [key for key in (*self._slots, *self._flights) if key.startswith(prefix)]:
            self.forget(key, fills=fills)

    def clear(self) -> None:
        """`forget` every key."""
        self._slots.clear()
        self._bytes = 0
        self._forgotten.update(self._flights.values())
        self._flights.clear()
