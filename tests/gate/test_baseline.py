"""Which release a version's bytes are compared with (`gate.verdicts.baseline`, docs/verdicts.md):
the nearest one published before it whose own verdict is clean, judged first when it never was,
within a bound that refuses rather than admits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from mirrorgate.gate import Gated, VersionRecord, gate
from mirrorgate.gate.kept.facts import MAX_VERDICTS, KeptFacts
from mirrorgate.gate.verdicts.baseline import (
    DEPTH,
    Baseline,
    Budget,
    Unsettled,
    choose_baseline,
    earlier_releases,
)
from mirrorgate.gate.verdicts.findings import Findings
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName, parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import parse_rules
from mirrorgate.rules.release import Fired
from mirrorgate.store import Verdict
from mirrorgate.upstream.client import Upstream
from tests.servers.packages import make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
WEEK = timedelta(days=7)


def gated(name: str, published: dict[str, datetime]) -> Gated:
    versions = [make_version(name, version, published=when, size=0)
                for version, when in published.items()]
    document: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(name, versions).packument(UPSTREAM)))
    return gate(parse_name(name), None, document, rules=RULES, now=NOW,
                origin=Origin.of(UPSTREAM))


def history(*fresh: str) -> dict[str, datetime]:
    """1.4.0 to 1.4.2 published months ago, then `fresh` a minute apart, minutes ago."""
    old = {f"1.4.{n}": NOW - timedelta(days=90 - n) for n in range(3)}
    return {**old, **{version: NOW - timedelta(minutes=10 - n)
                      for n, version in enumerate(fresh)}}


async def walk(packument: Gated, version: str, kept: dict[str, bool],
               bad: frozenset[str] = frozenset(), budget: int = DEPTH,
               ) -> tuple[Baseline | Unsettled, list[str]]:
    """choose_baseline with `kept` verdicts (True clean); a release judged first is clean
    unless in `bad`, its own baseline chosen the same way. Returns what was judged first."""
    judged: list[str] = []
    shared = Budget(budget)

    async def judge_first(record: VersionRecord) -> bool:
        judged.append(record.version)
        await choose_baseline(packument, record.version, judged=lambda r: kept.get(r.version),
                              judge_first=judge_first, budget=shared, settled_after=WEEK)
        kept[record.version] = record.version not in bad
        return kept[record.version]

    chosen = await choose_baseline(packument, version, judged=lambda r: kept.get(r.version),
                                   judge_first=judge_first, budget=shared, settled_after=WEEK)
    return chosen, judged


def test_earlier_releases_are_ordered_by_publish_time_not_version() -> None:
    packument = gated("low-host", {"1.0.0": NOW - timedelta(days=30),
                                   "1.2.0": NOW - timedelta(days=20),
                                   "1.1.0": NOW - timedelta(days=10),
                                   "0.0.1": NOW - timedelta(minutes=5)})

    before = [record.version for record in earlier_releases(packument, "0.0.1")]

    # below the whole history by version, yet three releases were published before it
    assert before == ["1.1.0", "1.2.0", "1.0.0"]
    assert earlier_releases(packument, "1.0.0") == []


async def test_two_bad_releases_published_together_never_vouch_for_each_other() -> None:
    packument = gated("burst-host", history("1.4.3", "1.4.4"))

    chosen, judged = await walk(packument, "1.4.4", {}, bad=frozenset({"1.4.3"}))

    assert judged == ["1.4.3"]  # 1.4.2 is old enough to be the floor
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert (chosen.record.version, chosen.passed_over) == ("1.4.2", ("1.4.3",))


async def test_a_kept_refusal_is_passed_over_without_a_read() -> None:
    packument = gated("burst-host", history("1.4.3", "1.4.4"))

    chosen, judged = await walk(packument, "1.4.4", {"1.4.3": False})

    assert judged == []
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert chosen.record.version == "1.4.2"


async def test_a_clean_release_before_it_is_the_baseline_without_looking_further() -> None:
    packument = gated("burst-host", history("1.4.3", "1.4.4"))

    chosen, judged = await walk(packument, "1.4.4", {"1.4.3": True})

    assert judged == []
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert chosen.record.version == "1.4.3"


async def test_more_young_releases_never_judged_than_the_bound_is_a_refusal() -> None:
    burst = [f"1.4.{n}" for n in range(3, 9)]  # six bad releases in ten minutes
    packument = gated("burst-host", history(*burst))

    chosen, judged = await walk(packument, "1.4.8", {}, bad=frozenset(burst))

    assert isinstance(chosen, Unsettled)
    assert len(judged) == DEPTH
    assert "never judged" in chosen.reason


async def test_a_first_version_has_no_baseline_and_nothing_passed_over() -> None:
    packument = gated("solo", {"1.0.0": NOW - timedelta(minutes=5)})

    chosen, judged = await walk(packument, "1.0.0", {})

    assert chosen == Baseline(None, ())
    assert judged == []


def _judge() -> ReleaseJudge:
    metrics = Metrics()
    public = Upstream("public", UPSTREAM, timeout=1.0, max_metadata_bytes=1 << 20,
                      metrics=metrics)

    async def no_packument(_name: PackageName) -> Gated | None:
        return None
    return ReleaseJudge(rules=RULES, public=public, metrics=metrics, packument=no_packument,
                        now=lambda: NOW, facts=KeptFacts(), previous_max_bytes=1 << 20,
                        timeout=1.0)


async def test_a_young_packages_releases_with_their_build_hook_vouch_once_it_is_old() -> None:
    # a native addon's first month: every release runs `node-gyp rebuild` and was held by
    # young-package-install-script (a word on the package's age, not on what changed). Once
    # the package is old, a release whose install hook now pipes a download to a shell must
    # be compared with them; were they not clean, it would be judged as a first version
    packument = gated("gyp-addon", {"1.0.0": NOW - timedelta(days=45),
                                    "1.0.1": NOW - timedelta(days=38),
                                    "1.0.2": NOW - timedelta(days=36),
                                    "1.1.0": NOW - timedelta(minutes=5)})
    judge = _judge()
    young = Fired("young-package-install-script", "it runs code at install (install "
                  "(node-gyp rebuild)) and the package was first published 45 days ago",
                  ("install (node-gyp rebuild)",))
    worm = Fired("new-install-script", "it runs code at install (postinstall (node x.js))",
                 ("postinstall (node x.js)",))
    for version, fired, compared in (("1.0.0", (young,), None), ("1.0.1", (young,), "1.0.0"),
                                     ("1.0.2", (young, worm), "1.0.1")):
        judge.remember("gyp-addon", version, packument.versions[version].integrity(),
                       Findings(fired, NOW - timedelta(days=40), compared))

    chosen = await judge.baseline(parse_name("gyp-addon"), packument, "1.1.0", Budget())

    assert judge.clean("gyp-addon", packument.versions["1.0.1"]) is True
    # its new postinstall still counts
    assert judge.clean("gyp-addon", packument.versions["1.0.2"]) is False
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert (chosen.record.version, chosen.passed_over) == ("1.0.1", ("1.0.2",))


def test_no_burst_of_clean_verdicts_pushes_a_refusal_out_of_memory() -> None:
    facts = KeptFacts()
    facts.keep(Verdict("worm-host", "1.4.3", "sha512-AA==", "flagged", "{}", "1.4.2", "1"))
    for n in range(MAX_VERDICTS + 50):
        facts.keep(Verdict("busy", f"1.0.{n}", "sha512-BB==", "clean", "{}", None, "1"))

    kept = facts.verdict("worm-host", "1.4.3", "sha512-AA==")

    assert kept is not None
    assert kept.verdict == "flagged"
    assert facts.verdict("busy", "1.0.0", "sha512-BB==") is None  # the oldest clean one went
    assert facts.verdict("busy", f"1.0.{MAX_VERDICTS + 49}", "sha512-BB==") is not None
