"""A release verdict speaks for the signals it was read under (docs/verdicts.md#what-binds-a-
verdict): judged again from its evidence under the rules in force while it answers for every
signal on, its bytes read again where it cannot. Through npm and `mirrorgate serve`:
tests/e2e/test_release_verdicts.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.verdicts.findings import Findings, read_under
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.rules import DEFAULT_RULES, LiveRules, Rules, parse_rules
from mirrorgate.rules.release import Fired
from mirrorgate.store import Verdict
from tests.gate.judges import BOUND, release_judge

NOW = datetime(2026, 12, 1, tzinfo=UTC)
EVERY = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
EARLIER_DEFAULT = replace(DEFAULT_RULES, release=replace(DEFAULT_RULES.release, actions={
    "young-package-install-script": "quarantine", "unreadable-release": "deny"}))
"""The default before issue 55: a young package's install scripts, and what they cannot read."""
BYTES = "sha512-" + "A" * 86 + "=="
YOUNG = Fired("young-package-install-script", "it runs code at install (postinstall (node "
              "x.js)) and the package was first published 2026-11-25T00:00:00Z",
              ("postinstall (node x.js)",))
BLOB = Fired("obfuscated-code", "its code carries marks of obfuscation 1.0.0 did not",
             ("index.js: a density of hex escapes",))


def judge_under(rules: Rules | LiveRules, facts: KeptFacts | None = None) -> ReleaseJudge:
    return release_judge(rules, NOW, facts=facts or KeptFacts())


def test_the_signals_in_force_are_what_they_read_for_not_what_is_done_with_a_finding() -> None:
    default = DEFAULT_RULES.release.signals_in_force(BOUND)
    every = EVERY.release.signals_in_force(BOUND)
    decided = parse_rules('[age]\nminimum = "0"\n\n[release]\nmode = "report"\nquarantine = '
                          '"2d"\nnew_install_script = "deny"\nallow = ["left-pad"]\n',
                          "rules.toml").release.signals_in_force(BOUND)
    younger = parse_rules('[release]\nyoung_package = "60d"\n', "rules.toml").release

    # the default reads what every release's code can do, and refuses what it cannot read
    assert default == frozenset({"new-capability", "young-package-capability:young=2592000s",
                                 f"unreadable-release:previous-max-bytes={BOUND}"})
    assert default < every
    assert len(every) == 9
    assert decided == every  # actions, report mode, the allow list, a quarantine's length
    assert "young-package-install-script:young=5184000s" in younger.signals_in_force(BOUND)
    assert "young-package-capability:young=5184000s" in younger.signals_in_force(BOUND)
    assert "unreadable-release:previous-max-bytes=1024" in EVERY.release.signals_in_force(1024)


def test_a_clean_verdict_kept_under_the_default_is_read_again_once_every_signal_is_on() -> None:
    facts = KeptFacts()
    judge_under(DEFAULT_RULES, facts).remember("young-blob", "1.0.1", BYTES,
                                               Findings((), None, None))
    kept = facts.verdict("young-blob", "1.0.1", BYTES)
    assert kept is not None
    assert read_under(kept) == DEFAULT_RULES.release.signals_in_force(BOUND)

    later = judge_under(EVERY, facts)

    assert later.remembered("young-blob", "1.0.1", BYTES) is None  # read again
    # the controls: the rules it was read under, or fewer, answer from its evidence
    assert judge_under(DEFAULT_RULES, facts).remembered("young-blob", "1.0.1", BYTES) is not None
    judge_under(EVERY, facts).remember("young-blob", "1.0.1", BYTES, Findings((), None, "1.0.0"))
    assert judge_under(DEFAULT_RULES, facts).remembered("young-blob", "1.0.1", BYTES) is not None
    assert later.remembered("young-blob", "1.0.1", BYTES) is not None


def test_a_refusal_by_the_signals_it_was_read_under_stands_while_the_others_are_unread() -> None:
    facts = KeptFacts()
    judge_under(EARLIER_DEFAULT, facts).remember("young-hook", "1.0.1", BYTES, Findings(
        (YOUNG,), NOW - timedelta(days=1), None))

    refused = judge_under(EVERY, facts).remembered("young-hook", "1.0.1", BYTES)

    assert refused is not None
    assert refused.in_force(NOW)
    assert refused.rule == "young-package-install-script"
    # once its quarantine ends it answers for nothing in force: read again
    ended = judge_under(EVERY, facts)
    ended.now = lambda: NOW + timedelta(days=8)
    assert ended.remembered("young-hook", "1.0.1", BYTES) is None


def test_a_setting_that_changes_what_a_signal_finds_leaves_its_finding_unanswered() -> None:
    facts = KeptFacts()
    judge_under(EVERY, facts).remember("blob-kit", "1.0.1", BYTES, Findings(
        (BLOB, YOUNG), NOW - timedelta(days=1), "1.0.0"))
    shorter = parse_rules('[age]\nminimum = "0"\n\n[release]\nyoung_package = "1d"\n',
                          "rules.toml")

    verdict = judge_under(shorter, facts).remembered("blob-kit", "1.0.1", BYTES)

    assert verdict is not None
    assert verdict.rule == "obfuscated-code"  # what it did read still refuses
    assert [found.signal for found in verdict.fired] == ["obfuscated-code"]


def test_an_unrelated_reload_reads_nothing_again(tmp_path: Path) -> None:
    # a generation number would: every reload moves it (an `[age]` edit, a waiver)
    path = tmp_path / "rules.toml"
    path.write_text('[age]\nminimum = "0"\n\n[release]\n', encoding="utf-8")
    rules = LiveRules.load(path)
    judge = judge_under(rules, KeptFacts())
    judge.remember("plain-kit", "1.0.1", BYTES, Findings((), None, "1.0.0"))
    before = rules.generation

    path.write_text('[age]\nminimum = "3d"\n\n[deny]\npackages = ["left-pad"]\n\n'
                    '[release]\nnew_install_script = "deny"\n', encoding="utf-8")
    assert rules.reload()

    assert rules.generation != before
    assert judge.remembered("plain-kit", "1.0.1", BYTES) is not None


def test_a_verdict_an_earlier_release_kept_answers_for_no_signal_but_its_refusal_stands(
        ) -> None:
    # its `generation` column held the rules' generation number: which signals read it is
    # unknown, so a clean one is read again; a refusal it records stands until it ends
    facts = KeptFacts()
    facts.keep(Verdict("old-kit", "1.0.1", BYTES, "clean", Findings((), None, None).evidence(),
                       None, "3"))
    facts.keep(Verdict("old-hook", "1.0.1", BYTES, "flagged", Findings(
        (YOUNG,), NOW - timedelta(days=1), None).evidence(), None, "3"))
    judge = judge_under(EARLIER_DEFAULT, facts)

    assert judge.remembered("old-kit", "1.0.1", BYTES) is None
    kept = facts.verdict("old-hook", "1.0.1", BYTES)
    assert kept is not None
    assert read_under(kept) is None
    refused = judge.remembered("old-hook", "1.0.1", BYTES)
    assert refused is not None
    assert refused.in_force(NOW)
    judge.now = lambda: NOW + timedelta(days=8)  # its quarantine over: read again
    assert judge.remembered("old-hook", "1.0.1", BYTES) is None


def test_a_verdict_kept_under_the_earlier_default_is_read_again_under_the_capability_signals(
        ) -> None:
    # issue 55 replaced the default's young-package-install-script with the capability
    # signals: a verdict kept before answers for none of them (the release's code was never
    # read for what it can do), so its bytes are read again at the next pull
    facts = KeptFacts()
    earlier = judge_under(EARLIER_DEFAULT, facts)
    earlier.remember("old-kit", "2.0.0", BYTES, Findings((), None, None))
    earlier.remember("young-hook", "1.0.1", BYTES, Findings((YOUNG,), NOW - timedelta(days=1),
                                                             None))
    now = judge_under(DEFAULT_RULES, facts)

    assert now.remembered("old-kit", "2.0.0", BYTES) is None
    # a refusal by a signal no longer on refuses nothing: read again too
    assert now.remembered("young-hook", "1.0.1", BYTES) is None
    # the control: kept under the default in force, it answers from its evidence
    now.remember("old-kit", "2.0.0", BYTES, Findings((), None, "1.9.0"))
    assert judge_under(DEFAULT_RULES, facts).remembered("old-kit", "2.0.0", BYTES) is not None
    assert earlier.remembered("old-kit", "2.0.0", BYTES) is None  # the others' signals unread
