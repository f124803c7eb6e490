"""One contract, both stores: every case runs on SQLite and on a real PostgreSQL (`place`)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from mirrorgate.store import (
    FIRST_PARTY,
    INSTALLED,
    WITHDRAWN,
    Fact,
    MigrationError,
    Pruned,
    Pull,
    RefusalRow,
    Store,
    StoreUnavailableError,
    Verdict,
)
from mirrorgate.store.schema import LATEST, MIGRATIONS
from mirrorgate.store.waivers import WAIVER, Waiver, stored_waivers
from tests.store.conftest import Place
from tests.store.harness import writer_argv

T0 = datetime(2026, 3, 31, 0, 5, tzinfo=UTC)


def verdict(version: str = "1.14.1", integrity: str = "sha512-AAAA", **overrides: str) -> Verdict:
    fields = {"verdict": "refused", "evidence": '{"fired": ["install-scripts"]}',
              "compared_with": "1.14.0", "generation": "7"} | overrides
    return Verdict("axios", version, integrity, fields["verdict"], fields["evidence"],
                   fields["compared_with"], fields["generation"])


def pull(client: str, version: str, minutes: int, source: str = "public") -> Pull:
    return Pull(client, "axios", version, "sha512-AAAA", source, T0 + timedelta(minutes=minutes),
                f"req-{client}-{minutes}")


async def everything(store: Store) -> dict[tuple[str, str], str | None]:
    found: dict[tuple[str, str], str | None] = {}
    cursor = 0
    while True:
        changes = await store.changes(cursor, limit=500)
        if changes.cursor == cursor:
            return found
        found.update({(fact.kind, fact.key): fact.value for fact in changes.facts})
        cursor = changes.cursor


async def test_a_written_fact_is_read_back_from_the_start(store: Store) -> None:
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", ""),
                           Fact(WITHDRAWN, "axios@1.14.1", "2026-03-31T03:00:00Z"),
                           Fact(INSTALLED, "left-pad", "4")])
    assert await everything(store) == {(FIRST_PARTY, "@acme/ui"): "",
                                       (WITHDRAWN, "axios@1.14.1"): "2026-03-31T03:00:00Z",
                                       (INSTALLED, "left-pad"): "4"}


async def test_a_forgotten_fact_comes_back_as_a_tombstone(store: Store) -> None:
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", "")])
    cursor = (await store.changes(0)).cursor
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", None)])
    later = await store.changes(cursor)
    assert [(f.key, f.value) for f in later.facts] == [("@acme/ui", None)]
    assert await everything(store) == {(FIRST_PARTY, "@acme/ui"): None}


async def test_changes_after_a_cursor_are_only_the_later_ones_in_order(store: Store) -> None:
    await store.put_facts([Fact(INSTALLED, "a", "1")])
    cursor = (await store.changes(0)).cursor
    await store.put_facts([Fact(INSTALLED, "b", "1")])
    await store.put_facts([Fact(INSTALLED, "a", "2")])
    later = await store.changes(cursor)
    assert [(f.key, f.value) for f in later.facts] == [("b", "1"), ("a", "2")]
    assert later.facts[0].seq < later.facts[1].seq == later.cursor
    assert (await store.changes(later.cursor)).facts == []


async def test_a_limited_read_resumes_where_it_stopped(store: Store) -> None:
    await store.put_facts([Fact(INSTALLED, f"name-{n}", "1") for n in range(25)])
    await store.put_verdicts([verdict(f"1.0.{n}") for n in range(5)])
    seen: list[str] = []
    cursor = 0
    for _ in range(10):
        changes = await store.changes(cursor, limit=7)
        assert len(changes.facts) + len(changes.verdicts) <= 7
        seen += [f.key for f in changes.facts] + [v.version for v in changes.verdicts]
        cursor = changes.cursor
    assert sorted(seen) == sorted([f"name-{n}" for n in range(25)]
                                  + [f"1.0.{n}" for n in range(5)])


async def test_a_verdict_replaces_the_one_for_the_same_bytes_and_keeps_others(
        store: Store) -> None:
    await store.put_verdicts([verdict(), verdict(integrity="sha512-BBBB", verdict="clean")])
    await store.put_verdicts([verdict(verdict="clean", generation="8", compared_with="1.13.9")])
    found = {(v.integrity): v for v in (await store.changes(0)).verdicts}
    assert set(found) == {"sha512-AAAA", "sha512-BBBB"}
    assert (found["sha512-AAAA"].verdict, found["sha512-AAAA"].generation,
            found["sha512-AAAA"].compared_with) == ("clean", "8", "1.13.9")
    assert found["sha512-AAAA"].evidence == '{"fired": ["install-scripts"]}'


async def test_facts_and_verdicts_share_one_order_of_changes(store: Store) -> None:
    await store.put_facts([Fact(WITHDRAWN, "axios@1.14.1", "2026-03-31T03:00:00Z")])
    await store.put_verdicts([verdict()])
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", "")])
    changes = await store.changes(0)
    order = sorted([(f.seq, f.key) for f in changes.facts]
                   + [(v.seq, v.version) for v in changes.verdicts])
    assert [key for _, key in order] == ["axios@1.14.1", "1.14.1", "@acme/ui"]


async def test_the_pull_log_answers_by_version_and_by_client_oldest_first(
        store: Store) -> None:
    await store.append_pulls([pull("ci-web", "1.14.1", 30).row(),
                              pull("ci-api", "1.14.1", 10).row(),
                              pull("ci-web", "1.14.0", 5, source="mirror").row()])
    by_version = await store.pulls(name="axios", version="1.14.1")
    assert [(p.client, p.at) for p in by_version] == [("ci-api", T0 + timedelta(minutes=10)),
                                                      ("ci-web", T0 + timedelta(minutes=30))]
    by_client = await store.pulls(client="ci-web")
    assert [(p.version, p.source, p.request_id) for p in by_client] == [
        ("1.14.0", "mirror", "req-ci-web-5"), ("1.14.1", "public", "req-ci-web-30")]
    assert len(await store.pulls(since=T0 + timedelta(minutes=10))) == 2


async def test_a_pull_keeps_what_a_bill_of_materials_reads_and_is_found_by_ci_identity(
        store: Store) -> None:
    job = replace(pull("payments-ci (acme/payments-api, branch main)", "1.14.1", 10),
                  client_name="payments-ci", repository="acme/payments-api",
                  ref="refs/heads/main", workflow="release",
                  sha1="0123456789abcdef0123456789abcdef01234567", license="MIT",
                  verdict="admitted; would deny: license-unknown")
    other = replace(pull("payments-ci (acme/payments-api, branch next)", "1.14.0", 20),
                    client_name="payments-ci", repository="acme/payments-api",
                    ref="refs/heads/next", workflow="release")
    await store.append_pulls([job.row(), other.row(), pull("laptop", "1.14.1", 30).row()])

    assert await store.pulls(identity={"repository": "acme/payments-api",
                                       "ref": "refs/heads/main"}) == [job]
    assert [p.version for p in await store.pulls(identity={"client_name": "payments-ci",
                                                           "workflow": "release"})] == [
        "1.14.1", "1.14.0"]
    # the window: `since` included, `until` not
    assert await store.pulls(since=T0 + timedelta(minutes=10),
                             until=T0 + timedelta(minutes=20)) == [job]
    [old] = await store.pulls(client="laptop")
    assert (old.client_name, old.repository, old.sha1, old.license) == (None, None, None, None)
    with pytest.raises(ValueError, match="not filtered by 'client'"):
        await store.pulls(identity={"client": "laptop"})  # only the identity's columns


def refusal(client: str, version: str, minutes: int, rule: str = "minimum-age",
            pulls: int = 1, until: datetime | None = None) -> RefusalRow:
    at = (T0 + timedelta(minutes=minutes)).timestamp()
    return (client, "axios", version, rule, float(int(at) // 3600 * 3600), "sha512-AAAA", at,
            at, pulls, f"req-{client}-{minutes}", until.timestamp() if until else None)


async def test_the_retention_drops_only_pulls_older_than_it(store: Store) -> None:
    await store.append_pulls([pull("ci-web", "1.14.1", minutes).row() for minutes in (1, 2, 60)])
    await store.add_refusals([refusal("ci-web", "1.14.2", 3), refusal("ci-web", "1.14.2", 61)])
    assert await store.prune_pulls(T0 + timedelta(minutes=30), 1_000) == Pruned(3, 0, 2)
    assert [p.at for p in await store.pulls(name="axios")] == [T0 + timedelta(minutes=60)]
    [left] = await store.refused(name="axios")
    assert (left.first, left.pulls) == (T0 + timedelta(minutes=61), 1)


async def test_refusals_are_counted_per_client_version_rule_and_hour(store: Store) -> None:
    # a client repeating one refused pull: one row an hour, however many it sends
    for minutes in (1, 2, 3):
        await store.add_refusals([refusal("ci-web", "1.14.1", minutes, pulls=1_000)])
    await store.add_refusals([refusal("ci-web", "1.14.1", 5, rule="deny-list"),
                              refusal("ci-web", "1.14.1", 70), refusal("ci-api", "1.14.1", 4)])
    [api, web] = sorted(await store.refused(name="axios", version="1.14.1"),
                        key=lambda e: e.client)
    assert (web.pulls, web.first, web.last) == (3_002, T0 + timedelta(minutes=1),
                                                T0 + timedelta(minutes=70))
    assert web.sources == ("refused:deny-list", "refused:minimum-age")
    assert (api.client, api.pulls) == ("ci-api", 1)
    assert [e.pulls for e in await store.refused(since=T0 + timedelta(minutes=66))] == [1]
    assert await store.pulled(name="axios") == []  # refusals are not pulls served


async def test_the_versions_refused_and_held_back_are_counted_once_each(store: Store) -> None:
    held = T0 + timedelta(days=1)
    await store.add_refusals([refusal("ci-web", "1.14.1", 1, rule="deny-list"),
                              refusal("ci-api", "1.14.1", 2, rule="deny-list"),
                              refusal("ci-web", "1.14.2", 3, until=held),
                              refusal("ci-api", "1.14.2", 63, until=held),
                              refusal("ci-web", "1.14.3", 4, until=T0)])  # its hold is over
    assert await store.refusal_counts(T0 + timedelta(hours=2)) == (1, 1)


async def test_who_was_served_what_is_summed_per_client_and_version(store: Store) -> None:
    await store.append_pulls([pull("ci-web", "1.14.1", 30).row(),
                              pull("ci-api", "1.14.1", 10).row(),
                              pull("ci-web", "1.14.1", 40, source="mirror").row(),
                              pull("ci-web", "1.14.0", 5, source="mirror").row()])
    await store.add_refusals([refusal("laptop", "1.14.1", 1, pulls=100_050)])
    found = await store.pulled(name="axios")
    assert [(e.client, e.version, e.pulls, e.sources) for e in found] == [
        ("ci-web", "1.14.0", 1, ("mirror",)), ("ci-api", "1.14.1", 1, ("public",)),
        ("ci-web", "1.14.1", 2, ("mirror", "public"))]
    assert (found[2].first, found[2].last, found[2].integrity) == (
        T0 + timedelta(minutes=30), T0 + timedelta(minutes=40), ("sha512-AAAA",))
    assert [e.client for e in await store.pulled(version="1.14.1", client="ci-api")] == ["ci-api"]
    assert len(await store.pulled(since=T0 + timedelta(minutes=35))) == 1


async def test_past_its_bound_the_log_drops_the_oldest_refusal_counts_then_served_pulls(
        store: Store) -> None:
    await store.append_pulls([pull("ci-web", "1.14.1", minutes).row() for minutes in range(6)])
    await store.add_refusals([refusal("laptop", f"2.0.{n}", n * 60) for n in range(4)])
    before = T0 - timedelta(days=1)  # nothing is past the retention
    assert await store.prune_pulls(before, 8) == Pruned(0, 2, 8)
    assert [e.version for e in await store.refused()] == ["2.0.2", "2.0.3"]
    assert await store.prune_pulls(before, 4) == Pruned(0, 4, 4)
    assert await store.refused() == []
    assert [p.at for p in await store.pulls()] == [T0 + timedelta(minutes=m) for m in (2, 3, 4, 5)]


ONE_LOOP = 100_050  # the count: one client repeating a refused pull in a cooldown


async def test_a_log_of_schema_1_has_its_refusals_folded_and_its_served_pulls_kept(
        place: Place) -> None:
    # a store written before the fold: a loop of refused pulls kept as a row each, over three
    # hours, and a build's served pull after them; written by hand at schema 1, in one
    # statement (generate_series, a recursive CTE), then opened, which migrates it
    start = T0.timestamp()
    if place.kind == "sqlite":
        file = sqlite3.connect(place.spec.removeprefix("sqlite:"), isolation_level=None)
        file.executescript(MIGRATIONS[0].sqlite)
        file.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                           "INSERT INTO schema_version VALUES (1);")
        file.execute("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n "
                     "WHERE i + 1 < ?) INSERT INTO pulls (client, name, version, integrity, "
                     "source, at, request_id) SELECT 'laptop', 'axios', '1.14.1', "
                     "'sha512-AAAA', 'refused:minimum-age', ? + i * 0.1, 'r' || i FROM n",
                     (ONE_LOOP, start))
        file.execute("INSERT INTO pulls (client, name, version, integrity, source, at, "
                     "request_id) VALUES ('web-ci', 'axios', '1.14.1', 'sha512-AAAA', "
                     "'public', ?, 'build')", (start + ONE_LOOP * 0.1,))
        file.close()
    else:
        db = await asyncpg.connect(place.spec)
        await db.execute(MIGRATIONS[0].postgres)
        await db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL); "
                         "INSERT INTO schema_version VALUES (1)")
        await db.execute("INSERT INTO pulls (client, name, version, integrity, source, at, "
                         "request_id) SELECT 'laptop', 'axios', '1.14.1', 'sha512-AAAA', "
                         "'refused:minimum-age', to_timestamp($1 + i * 0.1), 'r' || i "
                         "FROM generate_series(0, $2 - 1) AS i", start, ONE_LOOP)
        await db.execute("INSERT INTO pulls (client, name, version, integrity, source, at, "
                         "request_id) VALUES ('web-ci', 'axios', '1.14.1', 'sha512-AAAA', "
                         "'public', to_timestamp($1), 'build')", start + ONE_LOOP * 0.1)
        await db.close()
    store = await place.open()
    try:
        assert store.info.schema == LATEST
        [served] = await store.pulled(name="axios", version="1.14.1")
        assert (served.client, served.pulls) == ("web-ci", 1)
        # through migration 3 as well: the build's pull without what it never recorded
        [build] = await store.pulls(name="axios", version="1.14.1")
        assert (build.request_id, build.client_name, build.sha1, build.verdict) == (
            "build", None, None, None)
        [refused] = await store.refused(name="axios", version="1.14.1")
        assert (refused.client, refused.pulls, refused.sources) == (
            "laptop", ONE_LOOP, ("refused:minimum-age",))
        # an hour's row each: 100,050 pulls a tenth of a second apart span three hours
        pruned = await store.prune_pulls(T0 - timedelta(days=1), 1_000_000)
        assert pruned.kept == 1 + 3
    finally:
        await store.close()


async def test_a_log_of_schema_2_gains_what_a_bill_of_materials_reads_and_keeps_its_rows(
        place: Place) -> None:
    # a store the release before the bill of materials' columns wrote (schema 2: served pulls
    # and refusal counts apart): opened, it is at the latest schema with every row kept, the
    # old pull without the new columns, a new pull with them
    for migration in MIGRATIONS[:2]:
        await _execute(place, migration.sqlite if place.kind == "sqlite" else migration.postgres)
    await _execute(place, "CREATE TABLE schema_version (version INTEGER NOT NULL); "
                   "INSERT INTO schema_version VALUES (2)")
    at = T0.timestamp() if place.kind == "sqlite" else f"to_timestamp({T0.timestamp()})"
    await _execute(place, "INSERT INTO pulls (client, name, version, integrity, source, at, "  # noqa: S608
                   "request_id) VALUES ('web-ci', 'axios', '1.14.0', 'sha512-AAAA', "
                   f"'public', {at}, 'build')")
    store = await place.open()
    try:
        assert store.info.schema == LATEST == 3
        await store.add_refusals([refusal("laptop", "1.14.1", 1)])
        job = replace(pull("payments-ci (acme/payments-api, branch main)", "1.14.1", 10),
                      client_name="payments-ci", repository="acme/payments-api",
                      ref="refs/heads/main", workflow="release", sha1="0" * 40,
                      license="MIT", verdict="admitted")
        await store.append_pulls([job.row()])
        [old, new] = await store.pulls(name="axios")
        assert (old.version, old.request_id, old.client_name, old.license) == (
            "1.14.0", "build", None, None)
        assert new == job
        [refused] = await store.refused(name="axios")
        assert (refused.client, refused.pulls) == ("laptop", 1)
    finally:
        await store.close()


async def test_a_claim_is_won_once_across_processes_racing_for_it(place: Place) -> None:
    # two replicas saw the same withdrawal: one notification, whichever claims first
    stores = [await place.open() for _ in range(2)]
    try:
        won = await asyncio.gather(*(s.claim("exposure-sent", f"axios@1.14.1#{n % 1}", "r")
                                     for n in range(6) for s in stores))
        assert won.count(True) == 1
        assert await stores[0].claim("exposure-sent", "axios@1.14.1#deny", "r")  # another cause
        seen = await everything(stores[1])
        assert seen[("exposure-sent", "axios@1.14.1#0")] == "r"
    finally:
        for opened in stores:
            await opened.close()


async def test_a_store_opened_again_is_at_the_latest_schema_and_keeps_its_facts(
        place: Place, store: Store) -> None:
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", "")])
    again = await place.open()
    try:
        assert again.info.schema == LATEST == store.info.schema
        assert await everything(again) == {(FIRST_PARTY, "@acme/ui"): ""}
    finally:
        await again.close()


async def test_a_store_at_a_newer_schema_refuses_to_open_and_says_why(
        place: Place, store: Store) -> None:
    await store.put_facts([])  # opened, migrated
    await _execute(place, f"INSERT INTO schema_version VALUES ({LATEST + 1})")  # noqa: S608
    with pytest.raises(MigrationError, match=f"schema version {LATEST + 1}, newer than"):
        await place.open()


async def test_a_migration_that_cannot_run_stops_start_up_naming_it(place: Place) -> None:
    # a table of that name already there, of another shape: migration 1 cannot create it
    await _execute(place, "CREATE TABLE facts (unrelated INTEGER)")
    with pytest.raises(MigrationError, match=r"migration 1 \(facts, verdicts and the pull log\)"):
        await place.open()


async def test_two_processes_writing_at_once_lose_nothing_and_a_follower_sees_it_all(
        place: Place, store: Store) -> None:
    writers = [await asyncio.create_subprocess_exec(*writer_argv(place.spec, prefix, 150),
                                                    stdout=asyncio.subprocess.DEVNULL)
               for prefix in ("one", "two")]
    followed: dict[tuple[str, str], str | None] = {}
    cursor = 0
    while any(writer.returncode is None for writer in writers):
        changes = await store.changes(cursor)
        assert changes.cursor >= cursor
        followed.update({(f.kind, f.key): f.value for f in changes.facts})
        cursor = changes.cursor
        await asyncio.sleep(0.01)
    assert [await writer.wait() for writer in writers] == [0, 0]
    changes = await store.changes(cursor)
    followed.update({(f.kind, f.key): f.value for f in changes.facts})
    expected = {(FIRST_PARTY, f"{prefix}-{n}") for prefix in ("one", "two") for n in range(150)}
    assert set(followed) == expected  # a follower's cursor never skipped a slower write


async def test_an_acknowledged_write_survives_a_kill_9_in_the_middle_of_writes(
        place: Place, store: Store) -> None:
    writer = await asyncio.create_subprocess_exec(*writer_argv(place.spec, "acked", 100_000),
                                                  stdout=asyncio.subprocess.PIPE)
    assert writer.stdout is not None
    acknowledged: list[str] = []
    while len(acknowledged) < 60:
        acknowledged.append((await writer.stdout.readline()).decode().strip())
    writer.kill()  # SIGKILL: no handler, no flush, no clean close
    assert await writer.wait() == -signal.SIGKILL
    kept = await everything(store)
    assert all((FIRST_PARTY, key) in kept for key in acknowledged)


async def test_a_store_that_goes_away_fails_writes_clearly_and_serves_again_when_back(
        place: Place, store: Store) -> None:
    await store.put_facts([Fact(FIRST_PARTY, "before", "")])
    with place.away():
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as failed:
            await store.put_facts([Fact(FIRST_PARTY, "during", "")])
        assert time.monotonic() - started < 15
        assert "pg-test" not in str(failed.value)  # never the password
    await store.put_facts([Fact(FIRST_PARTY, "after", "")])
    assert set(await everything(store)) == {(FIRST_PARTY, "before"), (FIRST_PARTY, "after")}


async def _execute(place: Place, statement: str) -> None:
    if place.kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(place.spec.removeprefix("sqlite:"))
        db.executescript(statement)  # one statement or a migration's several
        db.commit()
        db.close()
        return
    import asyncpg

    connection = await asyncpg.connect(place.spec)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def test_waivers_are_read_back_among_other_facts_and_a_revoke_removes_one(
        store: Store) -> None:
    # `mirrorgate allow` writes and lists waivers through the change feed alone
    fix = Waiver("axios", "1.14.2", "alice", "the fix for CVE-2026-1234",
                 T0 + timedelta(days=7), T0)
    other = Waiver("@acme/ui", "2.0.0", "bob", "vendor hotfix", T0 + timedelta(days=1), T0)
    await store.put_facts([fix.fact(), Fact(INSTALLED, "axios", "8"), other.fact()])
    await store.put_facts([Fact(FIRST_PARTY, "@acme/ui", "")])
    assert await stored_waivers(store) == [other, fix]  # soonest to end first
    await store.put_facts([Fact(WAIVER, other.subject, None)])
    assert await stored_waivers(store) == [fix]
    assert (await everything(store))[(WAIVER, "@acme/ui@2.0.0")] is None  # every replica forgets
