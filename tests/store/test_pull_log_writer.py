"""The pull log's writer (`gate.pulls.log`) on both stores: records wait for a lost store in a
bounded buffer (the oldest dropped past it, counted) and are written when it returns; the
retention prunes at start-up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.pulls.log import PullLog
from mirrorgate.metrics import Metrics
from mirrorgate.store import Pull
from tests.metric_samples import metric_value, registry_samples
from tests.store.conftest import Place

NOW = datetime(2026, 3, 31, 3, 0, tzinfo=UTC)


async def settle(check: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)


async def test_pulls_wait_for_a_lost_store_bounded_and_are_written_when_it_returns(
        place: Place) -> None:
    metrics = Metrics()
    facts = KeptFacts(place.open, metrics=metrics, poll=0.05)
    await facts.open()
    log = PullLog(facts, retention_days=90, metrics=metrics, flush=0.05, max_buffered=3,
                  now=lambda: NOW)
    stop = asyncio.Event()
    running = asyncio.gather(facts.run(stop), log.run(stop))
    with place.away():
        for n in range(5):
            log.record("web-ci", "axios", f"1.14.{n}", "sha512-AAAA", "public", f"r{n}")
        await asyncio.sleep(0.6)  # the writer tries, the store refuses
        assert log.buffered == 3
    await settle(lambda: log.buffered == 0)
    stop.set()
    await running
    samples = registry_samples(metrics.registry)
    assert metric_value(samples, "mirrorgate_pulls_logged_total", outcome="dropped") == 2
    assert metric_value(samples, "mirrorgate_pulls_logged_total", outcome="written") == 3
    store = facts.store
    assert store is not None
    assert [p.request_id for p in await store.pulls(client="web-ci")] == ["r2", "r3", "r4"]
    await facts.close()


async def test_the_retention_prunes_older_pulls_at_start_up(place: Place) -> None:
    store = await place.open()
    await store.append_pulls([
        Pull("web-ci", "axios", "1.0.0", "sha512-AAAA", "public", NOW - timedelta(days=91),
             "old").row(),
        Pull("web-ci", "axios", "1.0.1", "sha512-AAAA", "public", NOW - timedelta(days=89),
             "kept").row(),
    ])
    await store.close()
    facts = KeptFacts(place.open)
    await facts.open()
    log = PullLog(facts, retention_days=90, flush=0.05, now=lambda: NOW)
    stop = asyncio.Event()
    running = asyncio.create_task(log.run(stop))
    kept = facts.store
    assert kept is not None
    await settle(lambda: False, 0.3)
    stop.set()
    await running
    assert [p.request_id for p in await kept.pulls(name="axios")] == ["kept"]
    await facts.close()


def test_a_process_without_a_store_keeps_no_log() -> None:
    log = PullLog(KeptFacts(), retention_days=90)
    log.record("web-ci", "axios", "1.14.1", "sha512-AAAA", "public", "r1")
    assert (log.enabled, log.buffered) == (False, 0)


async def test_records_the_store_cannot_hold_are_escaped_or_dropped_and_the_others_written(
        place: Place) -> None:
    # a NUL (PostgreSQL's text refuses it) and a lone surrogate (no UTF-8 for it) in the
    # integrity a public packument gave; a time that is not a number (no store takes it):
    # each in a batch between ordinary records, which must all be written
    metrics = Metrics()
    facts = KeptFacts(place.open, metrics=metrics)
    await facts.open()
    log = PullLog(facts, retention_days=90, metrics=metrics, now=lambda: NOW)
    log.record("web-ci", "axios", "1.14.0", "sha512-AAAA", "public", "r0")
    log.record("web-ci", "axios", "1.14.1", "sha512-AA\x00AA", "public", "nul")
    log.refusal("web-ci", "axios", "1.14.9", "sha512-AA\x00AA", "minimum-age", "nul-refused")
    log.record("web-ci", "axios", "1.14.2", "sha512-AA\udc80AA", "public", "surrogate")
    log._buffer.append(("web-ci", "axios", "1.14.3", "sha512-AAAA", "public", float("nan"),
                        "nan", None, None, None, None, None, None, None))
    log.record("web-ci", "axios", "1.14.4", "sha512-AAAA", "public", "r4")
    assert await log.flush() == 5
    log.record("web-ci", "axios", "1.14.5", "sha512-AAAA", "public", "r5")
    assert await log.flush() == 1
    store = facts.store
    assert store is not None
    kept = {p.request_id: p.integrity for p in await store.pulls(client="web-ci")}
    assert set(kept) == {"r0", "nul", "surrogate", "r4", "r5"}
    assert kept["nul"] == ("sha512-AA\\x00AA" if place.kind == "postgresql" else "sha512-AA\x00AA")
    assert kept["surrogate"] == "sha512-AA\\udc80AA"
    [refused] = await store.refused(client="web-ci")
    assert refused.integrity == (kept["nul"],)
    samples = registry_samples(metrics.registry)
    assert metric_value(samples, "mirrorgate_pulls_logged_total", outcome="written") == 6
    assert metric_value(samples, "mirrorgate_pulls_logged_total", outcome="unwritable") == 1
    assert metric_value(samples, "mirrorgate_pulls_logged_total", outcome="escaped") == (
        3 if place.kind == "postgresql" else 1)
    await facts.close()


async def test_a_loop_of_one_refused_pull_is_one_count_an_hour_in_memory_and_in_the_store(
        place: Place) -> None:
    clock = [NOW]
    facts = KeptFacts(place.open)
    await facts.open()
    log = PullLog(facts, retention_days=90, now=lambda: clock[0])
    for n in range(20_000):  # a client looping on the cheapest request there is
        log.refusal("laptop", "axios", "1.14.1", "sha512-AAAA", "minimum-age", f"r{n}")
    assert log.buffered == 1
    assert await log.flush() == 1
    clock[0] = NOW + timedelta(minutes=30)  # the same hour: added to the same row
    log.refusal("laptop", "axios", "1.14.1", "sha512-AAAA", "minimum-age", "later")
    clock[0] = NOW + timedelta(hours=1)  # the next hour: a row of its own
    log.refusal("laptop", "axios", "1.14.1", "sha512-AAAA", "minimum-age", "next-hour")
    assert await log.flush() == 2
    store = facts.store
    assert store is not None
    [refused] = await store.refused(name="axios")
    assert (refused.pulls, refused.first, refused.last) == (
        20_002, NOW, NOW + timedelta(hours=1))
    assert (await store.prune_pulls(NOW - timedelta(days=1), 1_000)).kept == 2
    await facts.close()
