"""The packument cache on its own: TTL, single flight, LRU bounds, bounded stale-if-error."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from tests.clock import ManualClock


@dataclass
class Upstream:
    """A loader that counts its calls, can be made to fail or to wait for a gate."""

    calls: int = 0
    fail: bool = False
    gate: asyncio.Event | None = None
    size: int = 10
    answers: list[str] = field(default_factory=list)

    async def load(self, previous: Cached[str] | None) -> Loaded[str]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("upstream down")
        value = f"v{self.calls}"
        self.answers.append(value)
        return Loaded(value, self.size, validator=f'"{value}"')


def make_cache(clock: ManualClock, **overrides: float) -> tuple[PackumentCache[str], list[str]]:
    results: list[str] = []
    options: dict[str, float] = {"ttl": 60, "max_entries": 100, "max_bytes": 10_000,
                                 "stale_if_error": 600, "revalidate_wait": 2,
                                 "retry_interval": 5, **overrides}
    cache: PackumentCache[str] = PackumentCache(
        ttl=options["ttl"], max_entries=int(options["max_entries"]),
        max_bytes=int(options["max_bytes"]), stale_if_error=options["stale_if_error"],
        revalidate_wait=options["revalidate_wait"], retry_interval=options["retry_interval"],
        clock=clock, on_result=results.append)
    return cache, results


async def test_an_entry_is_served_from_memory_until_its_ttl_then_filled_again() -> None:
    clock = ManualClock()
    cache, results = make_cache(clock)
    upstream = Upstream()

    first = await cache.get("a", upstream.load)
    clock.advance(59)
    second = await cache.get("a", upstream.load)
    clock.advance(2)
    third = await cache.get("a", upstream.load)

    assert (first.value, second.value, third.value) == ("v1", "v1", "v2")
    assert upstream.calls == 2
    assert results == ["miss", "hit", "refresh"]


async def test_the_loader_sees_the_previous_entry_and_can_keep_it_on_a_304() -> None:
    clock = ManualClock()
    cache, _ = make_cache(clock)
    seen: list[str | None] = []

    async def revalidate(previous: Cached[str] | None) -> Loaded[str]:
        seen.append(previous.validator if previous else None)
        if previous is not None:
            return Loaded(previous.value, previous.size, previous.validator)
        return Loaded("doc", 10, '"etag-1"')

    first = await cache.get("a", revalidate)
    clock.advance(61)
    second = await cache.get("a", revalidate)

    assert seen == [None, '"etag-1"']
    assert second is first
    assert cache.fresh("a") is first


async def test_concurrent_misses_share_one_fill() -> None:
    cache, _ = make_cache(ManualClock())
    upstream = Upstream(gate=asyncio.Event())

    waiting = [asyncio.create_task(cache.get("a", upstream.load)) for _ in range(50)]
    await asyncio.sleep(0)
    upstream.gate.set()  # type: ignore[union-attr]
    slots = await asyncio.gather(*waiting)

    assert upstream.calls == 1
    assert {slot.value for slot in slots} == {"v1"}


async def test_a_caller_that_gives_up_does_not_cancel_the_fill_for_the_others() -> None:
    cache, _ = make_cache(ManualClock())
    upstream = Upstream(gate=asyncio.Event())

    impatient = asyncio.create_task(cache.get("a", upstream.load))
    patient = asyncio.create_task(cache.get("a", upstream.load))
    await asyncio.sleep(0)
    impatient.cancel()
    upstream.gate.set()  # type: ignore[union-attr]

    assert (await patient).value == "v1"
    assert "a" in cache


async def test_a_forgotten_entry_is_filled_anew_on_the_next_request() -> None:
    cache, _ = make_cache(ManualClock())
    upstream = Upstream()
    await cache.get("a", upstream.load)

    cache.forget("a")  # a publish changed the package

    assert "a" not in cache
    assert cache.bytes == 0
    assert (await cache.get("a", upstream.load)).value == "v2"


async def test_a_fill_begun_before_a_forget_answers_its_waiters_but_is_not_kept() -> None:
    # the race: a fill reading the pre-publish packument lands after the publish; kept, it
    # would hide the new version for a whole TTL
    cache, _ = make_cache(ManualClock())
    before = Upstream(gate=asyncio.Event())
    waiting = asyncio.create_task(cache.get("a", before.load))
    await asyncio.sleep(0)

    cache.forget("a")
    after = await cache.get("a", Upstream(answers=[], calls=1).load)  # a fill of its own
    before.gate.set()  # type: ignore[union-attr]

    assert (await waiting).value == "v1"
    assert after.value == "v2"
    assert cache.fresh("a") is after


async def test_the_least_recently_used_entry_goes_when_the_entry_count_is_exceeded() -> None:
    cache, _ = make_cache(ManualClock(), max_entries=2)
    upstream = Upstream()

    await cache.get("a", upstream.load)
    await cache.get("b", upstream.load)
    cache.fresh("a")
    await cache.get("c", upstream.load)

    assert "a" in cache
    assert "c" in cache
    assert "b" not in cache
    assert len(cache) == 2


async def test_the_byte_budget_evicts_old_entries_and_never_keeps_an_oversized_one() -> None:
    cache, _ = make_cache(ManualClock(), max_bytes=100)
    small, huge = Upstream(size=40), Upstream(size=500)

    await cache.get("a", small.load)
    await cache.get("b", small.load)
    await cache.get("c", small.load)
    served = await cache.get("huge", huge.load)

    assert cache.bytes <= 100
    assert "a" not in cache
    assert "b" in cache
    assert "c" in cache
    assert served.value == "v1"
    assert "huge" not in cache


async def test_growing_an_entry_counts_against_the_byte_budget() -> None:
    cache, _ = make_cache(ManualClock(), max_bytes=100)
    upstream = Upstream(size=40)

    await cache.get("a", upstream.load)
    second = await cache.get("b", upstream.load)
    cache.grow(second, 30)

    assert cache.bytes == 70
    assert "a" not in cache
    assert "b" in cache


async def test_a_failed_revalidation_serves_the_stale_entry_and_waits_before_retrying() -> None:
    clock = ManualClock()
    cache, results = make_cache(clock)
    upstream = Upstream()
    await cache.get("a", upstream.load)
    upstream.fail = True
    clock.advance(61)

    stale = await cache.get("a", upstream.load)
    again = await cache.get("a", upstream.load)
    clock.advance(6)
    retried = await cache.get("a", upstream.load)

    assert stale.value == again.value == retried.value == "v1"
    assert upstream.calls == 3
    assert results == ["miss", "stale", "stale", "stale"]


async def test_past_the_stale_window_the_failure_is_the_answer() -> None:
    clock = ManualClock()
    cache, _ = make_cache(clock, stale_if_error=600)
    upstream = Upstream()
    await cache.get("a", upstream.load)
    upstream.fail = True
    clock.advance(60 + 601)

    with pytest.raises(ConnectionError):
        await cache.get("a", upstream.load)


async def test_a_slow_revalidation_serves_stale_now_and_updates_the_entry_when_done() -> None:
    clock = ManualClock()
    cache, results = make_cache(clock, revalidate_wait=0.01)
    upstream = Upstream()
    await cache.get("a", upstream.load)
    upstream.gate = asyncio.Event()
    clock.advance(61)

    stale = await cache.get("a", upstream.load)
    upstream.gate.set()
    for _ in range(10):
        await asyncio.sleep(0)

    assert stale.value == "v1"
    assert results[-1] == "stale"
    fresh = cache.fresh("a")
    assert fresh is not None
    assert fresh.value == "v2"


async def test_a_shorter_freshness_asked_by_the_loader_is_honoured() -> None:
    clock = ManualClock()
    cache, _ = make_cache(clock)
    calls = 0

    async def degraded(_previous: Cached[str] | None) -> Loaded[str]:
        nonlocal calls
        calls += 1
        return Loaded("partial", 10, None, fresh_for=5)

    await cache.get("a", degraded)
    clock.advance(6)
    await cache.get("a", degraded)

    assert calls == 2
