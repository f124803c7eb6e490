"""A release verdict speaks for the bytes it read (docs/verdicts.md#what-binds-a-verdict).

The attack: a release judged clean (or refused), then the registry lists the same version with
other bytes, a new `dist.integrity`. A verdict kept by name and version alone vouched for them
unread, or refused the good bytes for the bad ones'. Each path that consults a verdict is here:
the packument (public and a mirrored copy), the judge's `remembered`, `clean` and `at_pull`, and
`verdict_for` (the worker, `prewarm`, `check`). Through npm and `mirrorgate serve`:
tests/e2e/test_release_verdicts.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from mirrorgate.gate import Denial, Gated, gate
from mirrorgate.gate.verdicts.findings import Findings
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import parse_rules
from mirrorgate.rules.release import Fired
from tests.gate.judges import release_judge
from tests.servers.packages import FixtureVersion, make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
NAME = parse_name("rebyte-kit")
BEFORE = make_version("rebyte-kit", "1.0.0", size=0, published=NOW - timedelta(days=60))
GOOD = make_version("rebyte-kit", "1.0.1", size=0, published=NOW - timedelta(days=2))
BAD = make_version("rebyte-kit", "1.0.1", published=NOW - timedelta(days=2),
                   files={"index.js": b"module.exports = 1;\n", "setup.js": b"exec('id')\n"},
                   scripts={"postinstall": "node setup.js"})
HOOK = Fired("new-install-script", "it runs code at install (postinstall (node setup.js))",
             ("postinstall (node setup.js)",))


def doc(*versions: FixtureVersion) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(
        make_package("rebyte-kit", list(versions)).packument(UPSTREAM)))
    return loaded


def judge_with(packument: Gated | None = None) -> ReleaseJudge:
    return release_judge(RULES, NOW, packument=packument)


def gated(judge: ReleaseJudge, public: dict[str, Any] | None,
          private: dict[str, Any] | None = None) -> Gated:
    return gate(NAME, private, public, rules=RULES, now=NOW, origin=Origin.of(UPSTREAM),
                refused=judge.refused_versions(NAME.full))


def test_a_clean_verdict_never_vouches_for_other_bytes_listed_under_the_same_version() -> None:
    judge = judge_with()
    judge.remember(NAME.full, "1.0.1", GOOD.integrity, Findings((), None, "1.0.0"))
    listed_bad = gated(judge, doc(BEFORE, BAD)).versions["1.0.1"]
    listed_good = gated(judge, doc(BEFORE, GOOD)).versions["1.0.1"]

    assert listed_bad.integrity() == BAD.integrity != GOOD.integrity
    assert judge.remembered(NAME.full, "1.0.1", BAD.integrity) is None  # never judged
    assert judge.clean(NAME.full, listed_bad) is None  # nor a baseline's vouch
    ruling = judge.at_pull(NAME, gated(judge, doc(BEFORE, BAD)), listed_bad, reading=True)
    assert ruling.refused is None
    assert ruling.check is not None  # these bytes are read as they stream
    # the control: the bytes judged clean are served on their verdict, nothing read
    assert judge.clean(NAME.full, listed_good) is True
    kept = judge.at_pull(NAME, gated(judge, doc(BEFORE, GOOD)), listed_good, reading=True)
    assert (kept.refused, kept.check) == (None, None)


def test_a_refusal_of_bytes_leaves_other_bytes_of_the_version_to_their_own_pull() -> None:
    judge = judge_with()
    judge.remember(NAME.full, "1.0.1", BAD.integrity, Findings((HOOK,), None, "1.0.0"))

    bad = gated(judge, doc(BEFORE, BAD))
    good = gated(judge, doc(BEFORE, GOOD))

    denial = bad.versions["1.0.1"].denial
    assert denial is not None
    assert denial.rule == "new-install-script"
    assert bad.survivors == ["1.0.0"]
    assert good.versions["1.0.1"].denial is None  # other bytes: listed, judged at their pull
    assert judge.refused_versions(NAME.full) == {"1.0.1": {BAD.integrity: Denial(
        "new-install-script", denial.reason)}}


def test_a_mirrored_copy_is_refused_by_its_own_bytes_verdict_not_by_a_republish_s() -> None:
    # the mirror holds GOOD's bytes; public since lists BAD's under 1.0.1, refused at a pull
    judge = judge_with()
    judge.remember(NAME.full, "1.0.1", BAD.integrity, Findings((HOOK,), None, "1.0.0"))
    mirrored = doc(BEFORE.marked(), GOOD.marked())

    served = gated(judge, doc(BEFORE, BAD), private=mirrored).versions["1.0.1"]

    assert served.private
    assert served.denial is None  # the copy's bytes were never refused
    assert served.integrity() == GOOD.integrity
    # the control: a verdict refusing the copy's own bytes refuses it from the mirror
    judge.remember(NAME.full, "1.0.1", GOOD.integrity, Findings((HOOK,), None, "1.0.0"))
    refused = gated(judge, doc(BEFORE, BAD), private=mirrored).versions["1.0.1"]
    assert refused.denial is not None
    assert refused.denial.rule == "new-install-script"
    ruling = judge.at_pull(NAME, gated(judge, doc(BEFORE, BAD), private=mirrored), refused,
                           reading=True)
    assert ruling.refused is not None  # the 403 carries that verdict's evidence
    assert ruling.refused.fired == (HOOK,)


async def test_verdict_for_other_bytes_than_public_lists_is_a_refusal_not_a_read() -> None:
    # the worker's job, a prewarm's lockfile entry: bytes public no longer lists cannot be
    # fetched to be read; the bytes it lists now are judged at their own pull
    packument = gate(NAME, None, doc(BEFORE, BAD), rules=RULES, now=NOW,
                     origin=Origin.of(UPSTREAM))
    judge = judge_with(packument)
    judge.remember(NAME.full, "1.0.1", BAD.integrity, Findings((HOOK,), None, "1.0.0"))

    asked = await judge.verdict_for(NAME, "1.0.1", GOOD.integrity)
    kept = await judge.verdict_for(NAME, "1.0.1", BAD.integrity)

    assert isinstance(asked, str)
    assert "now lists other bytes for 1.0.1" in asked
    assert BAD.integrity in asked
    assert kept is not None
    assert not isinstance(kept, str)
    assert kept.rule == "new-install-script"  # the control: these bytes' verdict, no read
