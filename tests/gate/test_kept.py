"""The gate's memory over the store (`gate.kept.facts`): a buffer that waits for a lost store and
drops the oldest past its bound, and the one-time import of the files before the store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mirrorgate.gate.kept.facts import KeptFacts, UnrecordedError
from mirrorgate.gate.kept.imported import import_files
from mirrorgate.gate.kept.waivers import follow_waivers, held_waivers
from mirrorgate.gate.records import Gated
from mirrorgate.gate.verdicts.findings import Findings
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.rules import LiveRules, Rules, parse_rules
from mirrorgate.rules.patterns import Subject
from mirrorgate.rules.release import Fired
from mirrorgate.store import (
    FIRST_PARTY,
    INSTALLED,
    WITHDRAWN,
    Fact,
    Store,
    StoreUnavailableError,
    Verdict,
)
from mirrorgate.store.sqlite import open_sqlite
from mirrorgate.store.waivers import WAIVER, Waiver
from mirrorgate.upstream.client import Upstream
from tests.metric_samples import metric_value, registry_samples
from tests.store.conftest import Place
from tests.store.kept import kept_on


async def test_writes_wait_for_a_lost_store_and_a_flood_of_what_may_be_lost_drops_nothing_else(
        place: Place) -> None:
    metrics = Metrics()
    facts = KeptFacts(place.open, metrics=metrics, max_pending=3, poll=0.05)
    await facts.open()
    stop = asyncio.Event()
    with place.away():
        facts.put(WITHDRAWN, "gone-pkg@1.0.1", "2026-12-01T00:00:00.000Z")  # learned first
        facts.put(FIRST_PARTY, "acme-widget")
        facts.put(WAIVER, "left-pad@1.3.1", "{}")
        facts.forget(WAIVER, "left-pad@1.3.1")  # the revoke: a tombstone, kept as the fact
        for name in ("a", "b", "c", "d", "e"):  # first pulls of new names, after them
            facts.put(INSTALLED, name, "1")
        running = asyncio.create_task(facts.run(stop))
        await asyncio.sleep(0.8)  # the writer tries, the store refuses
        assert (facts.reachable, facts.pending) == (False, 6)
        assert "a" in facts.keys(INSTALLED)  # memory holds all five
    await _written(facts)
    stop.set()
    await running
    await facts.close()
    samples = registry_samples(metrics.registry)
    assert metric_value(samples, "mirrorgate_store_writes_dropped_total") == 2
    assert metric_value(samples, "mirrorgate_store_failures_total", operation="write") >= 1
    again = KeptFacts(place.open)
    await again.open()
    assert sorted(again.keys(INSTALLED)) == ["c", "d", "e"]  # the two oldest were dropped
    assert again.get(WITHDRAWN, "gone-pkg@1.0.1") == "2026-12-01T00:00:00.000Z"
    assert again.keys(FIRST_PARTY) == ["acme-widget"]
    assert again.keys(WAIVER) == []  # the revoke reached the store, not the grant alone
    await again.close()


async def test_past_its_bound_a_fact_that_must_be_kept_is_refused_and_never_one_dropped(
        place: Place) -> None:
    metrics = Metrics()
    facts = KeptFacts(place.open, metrics=metrics, max_kept=2, poll=0.05)
    await facts.open()
    stop = asyncio.Event()
    with place.away():
        running = asyncio.create_task(facts.run(stop))
        facts.put(WITHDRAWN, "gone-pkg@1.0.1", "2026-12-01T00:00:00.000Z")
        facts.put(FIRST_PARTY, "acme-widget")
        with pytest.raises(UnrecordedError, match="cannot record what it learned"):
            facts.put(WITHDRAWN, "gone-pkg@1.0.2", "2026-12-02T00:00:00.000Z")
        with pytest.raises(UnrecordedError):
            facts.keep(_verdict("evil-pkg", "6.6.6", "flagged"))
        facts.put(FIRST_PARTY, "acme-widget")  # held already: no new write
        facts.put(INSTALLED, "chalk", "1")  # what may be lost still waits, bounded apart
        facts.keep(_verdict("fine-pkg", "1.0.0", "clean"))
        await asyncio.sleep(0.3)
        # refused, not learned: learned again once there is room
        assert facts.get(WITHDRAWN, "gone-pkg@1.0.2") is None
        assert facts.verdict("evil-pkg", "6.6.6", "sha512-x") is None
        assert metric_value(registry_samples(metrics.registry),
                            "mirrorgate_store_pending_kept_writes") == 2
    await _written(facts)
    facts.put(WITHDRAWN, "gone-pkg@1.0.2", "2026-12-02T00:00:00.000Z")  # room again
    stop.set()
    await running
    await facts.close()
    samples = registry_samples(metrics.registry)
    assert metric_value(samples, "mirrorgate_store_writes_refused_total") == 2
    assert metric_value(samples, "mirrorgate_store_writes_dropped_total") == 0
    again = KeptFacts(place.open)
    await again.open()
    assert sorted(again.keys(WITHDRAWN)) == ["gone-pkg@1.0.1", "gone-pkg@1.0.2"]
    assert again.keys(INSTALLED) == ["chalk"]
    await again.close()


async def _written(facts: KeptFacts) -> None:
    """Until the store is back and has taken every waiting write (5 s at most)."""
    for _ in range(100):
        if facts.reachable and facts.pending == 0:
            return
        await asyncio.sleep(0.05)


def _verdict(name: str, version: str, verdict: str) -> Verdict:
    return Verdict(name, version, "sha512-x", verdict, "{}", None, "1")


async def test_the_files_before_the_store_are_imported_once_at_its_first_start(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "first-party-names").write_text("+@acme/ui\n?junk\n+\n" + "+" + "x" * 400 + "\n")
    (data / "withdrawn-versions").write_text("+axios@1.14.1\t2026-03-31T03:00:00Z\n")
    (data / "installed-names").write_text("+left-pad\t8\n")

    async def opener() -> Store:
        return await open_sqlite(data / "state.sqlite3")

    async def importer(store: Store) -> int:
        return await import_files(data, store)

    first = KeptFacts(opener, importer=importer)
    await first.open()
    await first.close()
    (data / "first-party-names").write_text("+@acme/later\n")  # not read again
    second = KeptFacts(opener, importer=importer)
    await second.open()

    assert second.keys(FIRST_PARTY) == ["@acme/ui"]  # the unusable lines left out
    assert second.get(WITHDRAWN, "axios@1.14.1") == "2026-03-31T03:00:00Z"
    assert second.get(INSTALLED, "left-pad") == "8"
    await second.close()


async def test_a_store_that_never_answered_leaves_the_facts_unknown_with_the_reason(
        tmp_path: Path) -> None:
    async def opener() -> Store:
        raise StoreUnavailableError("the state store at postgresql://mg:**redacted**@db/mg "
                                    "did not answer: ConnectionRefusedError")

    facts = KeptFacts(opener)
    await facts.open()

    assert (facts.ready, facts.reachable) == (False, False)
    assert "did not answer" in str(facts.problem)


async def test_a_release_verdict_outlives_the_process_and_is_judged_again_under_new_rules(
        tmp_path: Path) -> None:
    # the Shai-Hulud shape: a release that adds a postinstall the one before did not have
    fired = Fired("new-install-script", "adds a postinstall script: node ./bundle.js",
                  ("package.json: scripts.postinstall",))
    path = tmp_path / "state.sqlite3"
    before = _judge(RELEASE_RULES, await kept_on(path))
    before.remember("colour-kit", "5.6.1", BYTES, Findings((fired,), None, "5.6.0"))
    refused = before.remembered("colour-kit", "5.6.1", BYTES)
    assert refused is not None
    assert refused.rule == "new-install-script"
    stop = asyncio.Event()
    stop.set()
    await before.facts.run(stop)  # the last write, as at a SIGTERM
    await before.facts.close()

    after = _judge(RELEASE_RULES, await kept_on(path))
    again = after.remembered("colour-kit", "5.6.1", BYTES)
    allowed = _judge(parse_rules('[age]\nminimum = "0"\n\n[release]\nallow = '
                                 '["colour-kit@5.6.1"]\n', "r.toml"), after.facts)

    assert again is not None
    assert (again.rule, again.reason, again.fired, again.compared_with) == (
        refused.rule, refused.reason, refused.fired, refused.compared_with)
    assert after.refused_versions("colour-kit")["5.6.1"].keys() == {BYTES}
    assert after.facts.verdict("colour-kit", "5.6.1", BYTES).compared_with == "5.6.0"  # type: ignore[union-attr]
    assert allowed.refused_versions("colour-kit") == {}  # an allow entry added later: no read
    await after.facts.close()


BYTES = "sha512-" + "A" * 86 + "=="
RELEASE_RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
JUDGED_AT = datetime.now(UTC).replace(microsecond=0)
"""One clock for every judge of a test: the verdict's reason says when its quarantine ends,
which two judges reading the wall clock a second apart would say differently."""


def _judge(rules: Rules, facts: KeptFacts) -> ReleaseJudge:
    metrics = Metrics()
    public = Upstream("public", "http://127.0.0.1:9/", timeout=1.0,
                      max_metadata_bytes=1 << 20, metrics=metrics)

    async def no_packument(_name: PackageName) -> Gated | None:
        return None
    return ReleaseJudge(rules=rules, public=public, metrics=metrics, packument=no_packument,
                        now=lambda: JUDGED_AT, facts=facts,
                        previous_max_bytes=1 << 20, timeout=1.0)


async def test_a_waiver_another_process_writes_is_in_the_rules_within_a_poll_and_leaves_on_revoke(
        tmp_path: Path) -> None:
    # the proxy's rules refuse axios@1.14.2 (too young); `mirrorgate allow`, another process,
    # writes a waiver to the store: the proxy's rules admit it at a new generation (every cached
    # packument gated again), and refuse it again once it is revoked
    path = tmp_path / "state.sqlite3"
    facts = await kept_on(path, poll=0.05)
    rules = LiveRules(parse_rules('[age]\nminimum = "8d"\n', "rules.toml"))
    follow_waivers(facts, rules)
    stop = asyncio.Event()
    running = asyncio.create_task(facts.run(stop))
    now = datetime.now(UTC).replace(microsecond=0)  # kept to the second
    subject = Subject("axios", "1.14.2", BYTES)
    assert rules.current.exception_for("minimum-age", subject, now) is None
    before = rules.generation
    command = await open_sqlite(path)
    waiver = Waiver("axios", "1.14.2", "alice", "the fix", now.replace(year=now.year + 1), now,
                    BYTES)
    await command.put_facts([waiver.fact()])
    for _ in range(40):
        if rules.current.exception_for("minimum-age", subject, now) is not None:
            break
        await asyncio.sleep(0.025)
    lifted = rules.current.exception_for("minimum-age", subject, now)
    assert lifted is not None
    assert (lifted.by, lifted.waiver) == ("alice", True)
    assert rules.generation == before + 1
    assert held_waivers(facts, now) == [waiver]
    assert rules.current.exception_for("minimum-age", Subject("axios", "1.14.3", BYTES),
                                       now) is None
    await command.put_facts([Fact(WAIVER, waiver.subject, None)])
    for _ in range(40):
        if rules.current.exception_for("minimum-age", subject, now) is None:
            break
        await asyncio.sleep(0.025)
    assert rules.current.exception_for("minimum-age", subject, now) is None
    assert rules.generation == before + 2
    await command.close()
    stop.set()
    await running
    await facts.close()


async def test_a_verdict_read_back_from_the_store_is_no_change_and_another_process_s_is(
        tmp_path: Path) -> None:
    # each poll reads back what this process wrote: telling the listeners would rebuild the
    # index of refusals (every verdict held) at every poll of a cold install. Another
    # process's verdict, or this one's changed by it, is a change they hear of
    path = tmp_path / "state.sqlite3"
    facts = await kept_on(path)
    heard: list[str] = []
    facts.listeners.append(heard.append)
    judge = _judge(RELEASE_RULES, facts)
    fired = Fired("new-install-script", "adds a postinstall script: node ./bundle.js",
                  ("package.json: scripts.postinstall",))
    for version in ("1.0.1", "1.0.2", "1.0.3"):
        judge.remember("colour-kit", version, BYTES, Findings((fired,), None, "1.0.0"))
    assert facts.store is not None
    await facts._flush(facts.store)
    heard.clear()  # what the judge said of its own verdicts as it kept them
    await facts._follow(facts.store)
    assert heard == []

    other = _judge(RELEASE_RULES, await kept_on(path))
    other.remember("colour-kit", "1.0.4", BYTES, Findings((fired,), None, "1.0.3"))
    assert other.facts.store is not None
    await other.facts._flush(other.facts.store)
    await facts._follow(facts.store)
    assert heard == ["verdict"]
    assert judge.refused_versions("colour-kit").keys() == {"1.0.1", "1.0.2", "1.0.3", "1.0.4"}
    await other.facts.close()
    await facts.close()


async def test_what_may_be_lost_waits_for_the_poll_and_leaves_with_the_next_kept_write(
        tmp_path: Path) -> None:
    # the cost this stops: an offline replay wrote each name's install count in a write
    # transaction of its own and read the change feed back after it (963 and 1,010 of each in
    # a 19 s replay of the scale tree). What may be lost waits for the poll's pass; what the
    # fleet must hold within a second is written at once, and takes what waited with it
    path = tmp_path / "state.sqlite3"
    facts = await kept_on(path, poll=30.0)
    stop = asyncio.Event()
    running = asyncio.create_task(facts.run(stop))
    reader = await open_sqlite(path)

    async def stored() -> set[tuple[str, str]]:
        return {(fact.kind, fact.key) for fact in (await reader.changes(0)).facts}

    await asyncio.sleep(0.1)  # the run's first pass, over what was loaded
    counts = {(INSTALLED, name) for name in ("a", "b", "c")}
    for _kind, name in counts:
        facts.put(INSTALLED, name, "1")
    await asyncio.sleep(0.3)
    assert not counts & await stored()  # waiting for the poll, thirty seconds away
    facts.put(WITHDRAWN, "gone-pkg@1.0.1", "2026-12-01T00:00:00.000Z")
    for _ in range(40):
        if (WITHDRAWN, "gone-pkg@1.0.1") in await stored():
            break
        await asyncio.sleep(0.025)
    assert {(WITHDRAWN, "gone-pkg@1.0.1"), *counts} <= await stored()
    assert facts.pending == 0
    await reader.close()
    stop.set()
    await running
    await facts.close()
