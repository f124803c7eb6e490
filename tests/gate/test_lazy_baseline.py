"""The baseline walked lazily (`gate.packuments.lazyhistory`: each version gated alone as the walk
reaches it) against the walk over the whole packument's gating it replaces (`baseline.Whole`): over
generated packuments shaped as real ones are (patch and minor lines, majors, prereleases, backports)
with what makes a candidate not count (a deny-list entry, a license refused, an age minimum, a
tarball off the origin, no digest, a release refusal, a mirrored copy withdrawn) and times that
cannot be trusted (missing, unreadable, contradicting version order, a version published below the
whole history, releases published in the same second), every version's baseline, its candidates in
order, its time and the contradictions named are the same.

The attack it guards: a lazy walk that skipped a denied or refused release differently, or
ordered a backport otherwise, would compare a release with one the whole gating never lets
vouch (a refused release vouching for its successor's same new hook)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from mirrorgate.gate import Gated, gate
from mirrorgate.gate.packuments.lazyhistory import LazyHistory
from mirrorgate.gate.packuments.merge import Gating
from mirrorgate.gate.records import Denial
from mirrorgate.gate.verdicts.baseline import (
    Baseline,
    Whole,
)
from mirrorgate.npm.lazydoc import lazy_packument
from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import Rules, parse_rules
from tests.gate.test_publish_times import walk
from tests.servers.packages import DigestMode, iso, make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
ORIGIN = Origin.of(UPSTREAM)
NOW = datetime(2026, 3, 1, tzinfo=UTC)
WEEK = timedelta(days=7)
NAME = "lazy-host"

RULE_SETS = {
    "release": '[age]\nminimum = "0"\n\n[release]\n',
    "deny list and licenses": ('[age]\nminimum = "0"\n\n[release]\n\n[deny]\npackages = '
                               '["lazy-host@~1.1.0", "lazy-host@2.0.1"]\n\n[license]\n'
                               'deny = ["GPL-*"]\n'),
    "age minimum": '[age]\nminimum = "3d"\n\n[release]\n',
    "publisher change": ('[age]\nminimum = "0"\n\n[release]\n\n[publisher]\n'
                         'change = "quarantine"\n'),
}


def _versions(rng: random.Random, count: int) -> list[str]:
    """Versions in publish order as a real package publishes them: patches, minors, a few
    majors, prereleases of the next patch, and a backport to an older line now and then."""
    found: list[str] = []
    major, minor, patch = rng.choice([(0, 1, 0), (1, 0, 0)])
    lines: list[tuple[int, int, int]] = []
    while len(found) < count:
        draw = rng.random()
        if found and draw < 0.12:
            found.append(f"{major}.{minor}.{patch + 1}-beta.{len(found)}")
            continue
        if lines and draw < 0.2:
            # a backport: the next patch of an older line, published now
            at = rng.randrange(len(lines))
            old_major, old_minor, old_patch = lines[at]
            text = f"{old_major}.{old_minor}.{old_patch + 1}"
            if text not in found:
                lines[at] = (old_major, old_minor, old_patch + 1)
                found.append(text)
            continue
        if found:
            lines.append((major, minor, patch))
            if draw < 0.27:
                major, minor, patch = major + 1, 0, 0
            elif draw < 0.5:
                minor, patch = minor + 1, 0
            else:
                patch += 1
        text = f"{major}.{minor}.{patch}"
        if text not in found:
            found.append(text)
    return found


def _documents(seed: int) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, str],
                                   dict[str, dict[str, Denial]]]:
    """A private document (mirrored copies, some withdrawn from public), the public packument,
    the withdrawals remembered and the release refusals, from `seed`."""
    rng = random.Random(seed)
    texts = _versions(rng, rng.randrange(3, 40))
    if rng.random() < 0.3:
        texts.append("0.0.1")  # published below the whole history
    start = NOW - timedelta(days=rng.choice([3, 20, 400]))
    step = timedelta(hours=rng.choice([1, 9, 30]))
    published: dict[str, datetime] = {}
    when = start
    for text in texts:
        when += step * rng.random()
        if rng.random() < 0.08 and published:
            when = rng.choice(list(published.values()))  # the same stamp as an earlier one
        published[text] = when
    fixtures = []
    for text in texts:
        extra: dict[str, Any] = {}
        if rng.random() < 0.1:
            extra["license"] = "GPL-3.0-only"
        if rng.random() < 0.15:
            extra["_npmUser"] = {"name": rng.choice(["alice", "mallory"]),
                                 "email": "someone@example.com"}
        digests: DigestMode = "none" if rng.random() < 0.06 else "sha512"
        fixtures.append(make_version(NAME, text, published=published[text], size=0,
                                     digests=digests, **extra))
    public: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(NAME, fixtures).packument(UPSTREAM)))
    times = public["time"]
    for text in texts:
        draw = rng.random()
        if draw < 0.06:
            del times[text]  # no time
        elif draw < 0.09:
            times[text] = "yesterday"  # no time that can be read
        elif draw < 0.13:
            # a copy stamp: a registry in front dated it the day it copied it
            times[text] = iso(NOW - timedelta(days=1, seconds=rng.randrange(600)))
        if rng.random() < 0.05:
            public["versions"][text]["dist"]["tarball"] = f"http://127.0.0.2:9/{NAME}.tgz"
    refused: dict[str, dict[str, Denial]] = {}
    for text in rng.sample(texts, k=min(len(texts), rng.randrange(3))):
        sri = public["versions"][text]["dist"].get("integrity")
        if sri:
            refused[text] = {sri: Denial("new-install-script", "refused at its pull")}
    private: dict[str, Any] | None = None
    withdrawn: dict[str, str] = {}
    if rng.random() < 0.4:
        mirrored = rng.sample(texts, k=min(len(texts), rng.randrange(1, 4)))
        private = {"name": NAME, "versions": {}, "time": {}}
        for text in mirrored:
            manifest = dict(public["versions"][text])
            mark = MirrorMark(times.get(text), manifest["dist"].get("integrity") or "sha512-x")
            private["versions"][text] = with_mark(manifest, mark)
            private["time"][text] = iso(NOW - timedelta(hours=1))  # the moment of mirroring
            if rng.random() < 0.3:
                del public["versions"][text]  # withdrawn from public since
                times.pop(text, None)
                if rng.random() < 0.5:
                    withdrawn[text] = "2026-02-27T00:00:00.000Z"
    return private, public, withdrawn, refused


def _gatings(private: dict[str, Any] | None, public: dict[str, Any], rules: Rules,
             withdrawn: dict[str, str], refused: dict[str, dict[str, Denial]], *,
             lazily: bool = True) -> tuple[Gated, LazyHistory]:
    """The whole gating of the packument parsed whole (a packument request's), and the lazy
    history of it read as a tarball's pull reads it (`npm.lazydoc`) or parsed whole."""
    name = parse_name(NAME)
    whole = gate(name, private, public, rules=rules, now=NOW, origin=ORIGIN,
                 withdrawn=withdrawn, refused=refused)
    read = lazy_packument(orjson.dumps(public)) if lazily else public
    assert read is not None
    lazy = LazyHistory(Gating(name, private, read, rules=rules, now=NOW, origin=ORIGIN,
                              withdrawn=withdrawn, refused=refused))
    return whole, lazy


@pytest.mark.parametrize("rules_name", sorted(RULE_SETS))
async def test_the_lazy_walk_chooses_what_the_whole_gating_chose(rules_name: str) -> None:
    rules = parse_rules(RULE_SETS[rules_name], "rules.toml")
    compared = denied_candidates = contradicted = by_version = 0
    for seed in range(60):
        private, public, withdrawn, refused = _documents(seed)
        whole_gated, lazy = _gatings(private, public, rules, withdrawn, refused,
                                     lazily=seed % 2 == 0)
        whole = Whole(whole_gated)
        assert lazy.doubts() == whole.doubts(), seed
        contradicted += bool(whole.doubts())
        rng = random.Random(seed * 7 + 1)
        listed = list(whole_gated.versions)
        kept: dict[str, bool | None] = {
            text: rng.choice([True, True, False, None]) for text in listed}
        bad = frozenset(text for text in listed if rng.random() < 0.3)
        for version in listed:
            assert lazy.time(version) == whole.time(version), (seed, version)
            earlier, lower = whole.earlier(version), whole.lower(version)
            assert list(lazy.earlier(version)) == earlier, (seed, version)
            assert list(lazy.lower(version)) == lower, (seed, version)
            denied_candidates += sum(
                1 for record in whole_gated.versions.values()
                if record.denial is not None and record.version != version)
            chosen, judged = await walk(lazy, version, dict(kept), bad, NOW)
            expected, expected_judged = await walk(whole, version, dict(kept), bad, NOW)
            assert (chosen, judged) == (expected, expected_judged), (seed, version)
            by_version += isinstance(chosen, Baseline) and bool(chosen.doubts)
            compared += 1
    # the cases the generator is there to reach were reached
    assert compared > 600
    assert denied_candidates > 0
    assert contradicted > 3
    assert by_version > 10


def test_a_denied_opening_of_a_line_changes_the_contradictions_as_in_the_whole() -> None:
    """1.1.0 published, then 1.2.0, then 1.1.1 as a backport: no contradiction while 1.1.0
    stands; denied (the deny list), the 1.1 line opens with 1.1.1 after 1.2.0 opened, which
    the whole gating names, and so does the lazy walk (it reads the line's opening)."""
    day = timedelta(days=1)
    versions = [make_version(NAME, "1.1.0", published=NOW - 30 * day, size=0),
                make_version(NAME, "1.2.0", published=NOW - 20 * day, size=0),
                make_version(NAME, "1.1.1", published=NOW - 10 * day, size=0)]
    public: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(NAME, versions).packument(UPSTREAM)))
    for text, expected in (("", False), ('\n[deny]\npackages = ["lazy-host@1.1.0"]\n', True)):
        rules = parse_rules('[age]\nminimum = "0"\n\n[release]\n' + text, "rules.toml")
        whole, lazy = _gatings(None, public, rules, {}, {})
        assert lazy.doubts() == Whole(whole).doubts()
        assert bool(lazy.doubts()) is expected


def _counting(lazy: LazyHistory) -> list[str]:
    """The versions `lazy` gates from now on, in order (one entry a gating)."""
    gated: list[str] = []
    judge = lazy.gating.gate

    def counted(only: str | None = None) -> Gated:
        gated.append(str(only))
        return judge(only)

    lazy.gating.gate = counted  # type: ignore[method-assign]
    return gated


def test_only_the_versions_reached_are_gated() -> None:
    """The point of it: a pull of the newest of 400 versions gates a handful, not 400."""
    versions = [make_version(NAME, f"1.{n // 10}.{n % 10}",
                             published=NOW - timedelta(days=400 - n), size=0)
                for n in range(400)]
    public: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(NAME, versions).packument(UPSTREAM)))
    rules = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
    _whole, lazy = _gatings(None, public, rules, {}, {})
    gated = _counting(lazy)
    newest = next(iter(lazy.earlier("1.39.9")))
    assert newest.version == "1.39.8"
    assert lazy.doubts() == ()
    # the version itself and its predecessor: the 40 lines' times never run backwards, so no
    # opening is read for the contradictions
    assert len(set(gated)) <= 2


def test_a_major_whose_times_follow_version_order_is_not_read_for_contradictions() -> None:
    """Major 1 published in version order (1.0.0 ... 1.2.1), its 1.1 line's opening denied:
    whichever of its versions survive, no two contradict, so none is gated for the
    contradictions. Major 2 has a backport (2.0.1 after 2.1.0): its lines' openings are read,
    and with 2.0.0 denied the 2.0 line opens after 2.1.0 did, which both walks name. The
    control: the same packument with nothing denied, no contradiction in either."""
    day = timedelta(days=1)
    order = ["1.0.0", "1.0.1", "1.1.0", "1.1.1", "1.2.0", "1.2.1", "2.0.0", "2.1.0", "2.0.1"]
    versions = [make_version(NAME, text, published=NOW - (40 - 4 * at) * day, size=0)
                for at, text in enumerate(order)]
    public: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package(NAME, versions).packument(UPSTREAM)))
    for deny, expected in (('"lazy-host@1.1.0"', False),
                           ('"lazy-host@1.1.0", "lazy-host@2.0.0"', True)):
        rules = parse_rules('[age]\nminimum = "0"\n\n[release]\n\n[deny]\npackages = '
                            f"[{deny}]\n", "rules.toml")
        whole, lazy = _gatings(None, public, rules, {}, {})
        gated = _counting(lazy)
        assert lazy.doubts() == Whole(whole).doubts()
        assert bool(lazy.doubts()) is expected
        assert not [text for text in gated if text.startswith("1.")]
        assert set(gated) >= {"2.0.0", "2.1.0"}
