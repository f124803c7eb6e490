"""Withdrawals as the gate judges them, and the memory that keeps them (`gate.kept.withdrawals`).

The attack: a malicious version is live on the public registry for a few hours, is installed
through the mirror and mirrored, and is then taken down by the registry. A mirror that keeps
serving its copy keeps installing the malware. The end-to-end story, with Verdaccio and npm,
is tests/e2e/test_withdrawals.py; here is each decision on its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from mirrorgate.gate import PUBLIC_WITHDRAWN, WithdrawnVersions, gate
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import DEFAULT_RULES, parse_rules
from tests.servers.packages import FixtureVersion, make_package, make_version
from tests.store.kept import kept_on

UPSTREAM = "http://127.0.0.1:9/"
ORIGIN = Origin.of(UPSTREAM)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NAME = parse_name("takedown-pkg")
V100 = make_version("takedown-pkg", "1.0.0", size=0)
V101 = make_version("takedown-pkg", "1.0.1", size=0)
PLACEHOLDER = make_version("takedown-pkg", "0.0.1-security", size=0,
                           description="security holding package")


def doc(*versions: FixtureVersion, **fields: Any) -> dict[str, Any]:
    packument = make_package("takedown-pkg", list(versions), **fields).packument(UPSTREAM)
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(packument))
    return loaded


MIRRORED = doc(V100.marked(), V101.marked())
"""The private registry after the worker mirrored both versions."""


def judged(public: dict[str, Any] | None, withdrawn: dict[str, str] | None = None,
           private: dict[str, Any] = MIRRORED, rules: Any = DEFAULT_RULES) -> Any:
    return gate(NAME, private, public, rules=rules, now=NOW, origin=ORIGIN, withdrawn=withdrawn)


def test_a_mirrored_version_public_no_longer_lists_is_withdrawn_everywhere_it_shows() -> None:
    gated = judged(doc(V100))

    assert gated.survivors == ["1.0.0"]
    denial = gated.versions["1.0.1"].denial
    assert denial is not None
    assert denial.rule == PUBLIC_WITHDRAWN
    assert denial.since == "2026-12-01T12:00:00.000Z"
    assert "withdrawn from the public registry (first seen 2026-12-01T12:00:00.000Z)" in (
        denial.reason)
    assert gated.withdrawals == {"1.0.1": "2026-12-01T12:00:00.000Z"}
    assert gated.denials == {PUBLIC_WITHDRAWN: 1}
    rendered = orjson.loads(gated.render(False, "http://proxy.example.com/"))
    assert list(rendered["versions"]) == ["1.0.0"]
    assert rendered["dist-tags"]["latest"] == "1.0.0"
    assert rendered["policyRestrictions"]["denials"]["1.0.1"]["rule"] == PUBLIC_WITHDRAWN
    assert rendered["policyRestrictions"]["denials"]["1.0.1"]["since"] == (
        "2026-12-01T12:00:00.000Z")


def test_npms_placeholder_withdraws_every_mirrored_version() -> None:
    gated = judged(doc(PLACEHOLDER, dist_tags={"latest": "0.0.1-security"}))

    assert sorted(gated.withdrawals) == ["1.0.0", "1.0.1"]
    assert "1.0.0" not in gated.survivors
    assert "1.0.1" not in gated.survivors


def test_npms_unpublished_tombstone_withdraws_every_mirrored_version() -> None:
    tombstone = {"name": "takedown-pkg", "time": {
        "created": "2020-01-01T00:00:00.000Z", "modified": "2026-12-01T11:00:00.000Z",
        "unpublished": {"time": "2026-12-01T11:00:00.000Z", "versions": ["1.0.0", "1.0.1"]}}}

    assert sorted(judged(tombstone).withdrawals) == ["1.0.0", "1.0.1"]


def test_silence_from_public_withdraws_nothing() -> None:
    # a failing public upstream (or a whole-package 404: docs/withdrawals.md) answers None
    gated = judged(None)

    assert gated.survivors == ["1.0.0", "1.0.1"]
    assert gated.withdrawals == {}


def test_a_remembered_withdrawal_holds_while_public_is_silent() -> None:
    gated = judged(None, withdrawn={"1.0.1": "2026-11-30T08:00:00.000Z"})

    assert gated.survivors == ["1.0.0"]
    denial = gated.versions["1.0.1"].denial
    assert denial is not None
    assert denial.since == "2026-11-30T08:00:00.000Z"


def test_listed_again_with_the_bytes_the_mirror_holds_it_is_served_again() -> None:
    gated = judged(doc(V100, V101), withdrawn={"1.0.1": "2026-11-30T08:00:00.000Z"})

    assert gated.survivors == ["1.0.0", "1.0.1"]
    assert gated.withdrawals == {}


def test_listed_again_with_other_bytes_it_stays_withdrawn() -> None:
    other = make_version("takedown-pkg", "1.0.1", size=0, description="other bytes")

    gated = judged(doc(V100, other), withdrawn={"1.0.1": "2026-11-30T08:00:00.000Z"})

    assert gated.survivors == ["1.0.0"]
    assert gated.withdrawals == {"1.0.1": "2026-11-30T08:00:00.000Z"}


def test_a_first_party_version_is_never_touched_by_what_public_says() -> None:
    ours = doc(make_version("takedown-pkg", "1.0.0", size=0, description="ours"))

    gated = judged(doc(PLACEHOLDER), private=ours)

    assert gated.survivors == ["1.0.0"]
    assert gated.withdrawals == {}


def test_no_exception_or_report_mode_brings_a_withdrawn_version_back() -> None:
    rules = parse_rules('mode = "report"\n[deny]\npackages = ["other"]\n\n'
                        '[[exception]]\npackage = "takedown-pkg@1.0.1"\n'
                        'until = 2030-01-01T00:00:00Z\nreason = "vendor fix"\nby = "alice"\n')

    gated = judged(doc(V100), rules=rules)

    assert gated.survivors == ["1.0.0"]
    assert gated.versions["1.0.1"].excepted == ()


async def test_withdrawals_survive_a_restart_and_a_relisting_is_forgotten(
        tmp_path: Path) -> None:
    path = tmp_path / "data" / "state.sqlite3"
    memory = WithdrawnVersions(await kept_on(path))
    versions: dict[str, object] = {"1.0.0": {}, "1.0.1": {}}

    assert memory.record("takedown-pkg", versions, {"1.0.1": "2026-12-01T12:00:00.000Z"}) == [
        "1.0.1"]
    assert memory.record("takedown-pkg", versions, {"1.0.1": "2026-12-01T13:00:00.000Z"}) == []
    await _written(memory)

    again = WithdrawnVersions(await kept_on(path))
    assert again.of("takedown-pkg", versions) == {"1.0.1": "2026-12-01T12:00:00.000Z"}
    assert again.entries() == [("takedown-pkg", "1.0.1", "2026-12-01T12:00:00.000Z")]
    again.record("takedown-pkg", versions, {})
    await _written(again)
    assert WithdrawnVersions(await kept_on(path)).of("takedown-pkg", versions) == {}


async def test_a_second_process_on_the_same_store_sees_what_the_first_learned(
        tmp_path: Path) -> None:
    # the sidecar worker and the proxy of one pod share the data volume (one SQLite file)
    path = tmp_path / "shared.sqlite3"
    proxy = await kept_on(path, poll=0.05)
    worker = await kept_on(path, poll=0.05)
    stop = asyncio.Event()
    running = [asyncio.create_task(facts.run(stop)) for facts in (proxy, worker)]
    seen = WithdrawnVersions(worker)
    assert seen.seen("takedown-pkg", "1.0.1") is None

    WithdrawnVersions(proxy).record("takedown-pkg", {"1.0.1": {}},
                                    {"1.0.1": "2026-12-01T12:00:00.000Z"})
    await _within_a_second(lambda: seen.seen("takedown-pkg", "1.0.1") is not None)
    assert seen.seen("takedown-pkg", "1.0.1") == "2026-12-01T12:00:00.000Z"

    WithdrawnVersions(proxy).record("takedown-pkg", {"1.0.1": {}}, {})
    await _within_a_second(lambda: seen.seen("takedown-pkg", "1.0.1") is None)
    stop.set()
    await asyncio.gather(*running)
    await proxy.close()
    await worker.close()


def test_a_memory_without_a_store_keeps_working_in_process() -> None:
    memory = WithdrawnVersions()

    memory.record("takedown-pkg", {"1.0.1": {}}, {"1.0.1": "2026-12-01T12:00:00.000Z"})

    assert memory.seen("takedown-pkg", "1.0.1") == "2026-12-01T12:00:00.000Z"
    assert not memory.persistent


async def _within_a_second(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 1.0
    while not condition():
        assert time.monotonic() < deadline, "not seen within a second"
        await asyncio.sleep(0.02)


async def _written(memory: WithdrawnVersions) -> None:
    """What `memory` learned, written to its store (the background writer's one pass)."""
    stop = asyncio.Event()
    stop.set()
    await memory.facts.run(stop)
    await memory.facts.close()
