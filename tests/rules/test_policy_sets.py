"""Policy sets: `[policy.NAME]` tables laid over the default rules, key by key, for the clients
whose tokens-file line says `policy:NAME`.

What they must never do: weaken the default rules (a policy's table changes its own rules
only), reach what is one per version or per name (the release signals' verdicts, first-party
names, publishing), slip past the file's checks (every problem named with its policy's key),
or fall out of step with the default on a reload (the generation, the waivers, the feed).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.access.tokens import parse_tokens_file, policy_problem, token_line
from mirrorgate.rules import LiveRules, RuleException, RulesError, parse_pattern, parse_rules
from mirrorgate.rules.inforce import in_force
from mirrorgate.rules.patterns import PatternList
from mirrorgate.rules.policy import UnknownPolicyError
from tests.rules.builders import verdict

TEAMS = """\
mode = "enforce"

[age]
minimum = "1d"
exempt = ["@acme/*"]

[deny]
packages = ["event-stream@3.3.6"]

[policy.payments.age]
minimum_days = 7

[policy.payments.install_scripts]
block = true

[policy.prototype]
mode = "report"

[policy.prototype.deny]
packages = ["left-pad"]
"""


def test_a_policy_set_overrides_the_keys_it_writes_and_inherits_the_rest() -> None:
    rules = parse_rules(TEAMS, "rules.toml")
    payments, prototype = rules.policy("payments"), rules.policy("prototype")

    assert rules.policy(None) is rules
    assert (rules.minimum_age, payments.minimum_age) == (timedelta(days=1), timedelta(days=7))
    assert payments.age_exempt.texts() == ["@acme/*"]  # inherited beside the new minimum
    assert payments.deny.texts() == ["event-stream@3.3.6"]
    assert (rules.block_install_scripts, payments.block_install_scripts) == (False, True)
    assert prototype.deny.texts() == ["left-pad"]  # the policy's list replaces the default's
    assert (rules.mode_of("deny"), prototype.mode_of("deny")) == ("enforce", "report")
    assert payments.policy_name == "payments"
    assert rules.policy_name is None
    assert rules.policies.keys() == {"payments", "prototype"}
    # the default rules are untouched by what the policies say (the control)
    assert replace(rules, policies={}) == parse_rules(TEAMS.split("[policy.")[0], "rules.toml")
    assert "minimum-age: a version is held back until it is 7 days old" in in_force(payments)


def test_the_release_signals_stay_the_default_rules_under_every_policy_set() -> None:
    rules = parse_rules('[release]\nmode = "enforce"\n[policy.trial]\nmode = "report"\n', "r")
    trial = rules.policy("trial")

    # one verdict per version for every client: the policy's report mode is not theirs
    assert trial.mode_of("release") == "enforce"
    assert trial.release == rules.release
    assert trial.mode_of("age") == "report"


LEGAL = """\
[license]
deny = ["AGPL-*"]

[policy.legal.license]
deny = ["GPL-*", "AGPL-*"]
"""


@pytest.mark.parametrize(("declared", "default", "legal"), [
    ("GPL-3.0-only", None, "license"),  # the attack: what the default admits, legal refuses
    ("MIT OR GPL-3.0-only", None, None),  # the control: MIT is admitted under both
    ("AGPL-3.0-only", "license", "license"),  # both lists refuse it
    (None, "license-unknown", "license-unknown"),  # `unknown` inherited from the default
])
def test_a_policy_set_has_a_license_rule_of_its_own_over_the_default(
        declared: str | None, default: str | None, legal: str | None) -> None:
    rules = parse_rules(LEGAL, "rules.toml")

    assert verdict(rules, license=declared).rule == default
    assert verdict(rules.policy("legal"), license=declared).rule == legal
    assert rules.policy("legal").license.unknown == rules.license.unknown == "deny"


def test_a_policy_set_may_turn_the_license_rule_on_or_to_report_mode_for_itself() -> None:
    rules = parse_rules('[policy.legal.license]\ndeny = ["GPL-*"]\n'
                        '[policy.trial.license]\nmode = "report"\ndeny = ["GPL-*"]\n', "r")

    assert (rules.license.on, rules.policy("legal").license.on) == (False, True)
    assert verdict(rules, license="GPL-3.0-only").rule is None  # the default reads none
    assert verdict(rules.policy("legal"), license="GPL-3.0-only").rule == "license"
    reported = verdict(rules.policy("trial"), license="GPL-3.0-only")
    assert reported.rule is None
    assert [rule for rule, _ in reported.reported] == ["license"]


@pytest.mark.parametrize(("text", "problem"), [
    ('[policy.Payments.age]\nminimum = "7d"\n', "policy.Payments: \"Payments\" is not a usable"),
    ('[policy.default.age]\nminimum = "7d"\n', "policy.default: \"default\" is not a usable"),
    ('[policy.x.release]\nmode = "report"\n', "policy.x.release: cannot be set per policy set"),
    ('[policy.x.private]\nnames = ["@acme/*"]\n', "policy.x.private: cannot be set per policy"),
    ('[policy.x.publish]\nnames = ["@acme/*"]\n', "policy.x.publish: cannot be set per policy"),
    ('[[policy.x.exception]]\npackage = "a"\n', "policy.x.exception: cannot be set per policy"),
    ('[policy.x.agee]\nminimum = "7d"\n', "policy.x.agee: unknown (did you mean age?)"),
    ('[policy.x.age]\nminimun = "7d"\n', "policy.x.age.minimun: unknown key (did you mean "
                                         "minimum?)"),
    ('[policy.x.age]\nminimum = "7 days"\n', 'policy.x.age.minimum: "7 days" is not a duration'),
    ('[policy.x]\nmode = "loud"\n', 'policy.x.mode: "loud" is not one of'),
    ('[policy.x]\nage = 7\n', "policy.x.age: should be a table"),
    ("policy = 7\n", "policy: should hold [policy.NAME] tables"),
    ('[policy.x.advisories]\nseverity = "low"\n', "policy.x.advisories: adjusts the advisory "
                                                  "rules, which the file does not turn on"),
    ('[advisories]\nsource = "/osv.zip"\n[policy.x.advisories]\nsource = "/other.zip"\n',
     "policy.x.advisories.source: one advisory feed serves every policy set"),
])
def test_a_policy_set_that_cannot_be_honoured_is_refused_naming_its_key(
        text: str, problem: str) -> None:
    with pytest.raises(RulesError) as refused:
        parse_rules(text, "rules.toml")
    assert any(line.startswith(problem) for line in refused.value.problems), \
        refused.value.problems


def test_a_problem_of_the_default_rules_is_named_once_not_under_every_policy() -> None:
    with pytest.raises(RulesError) as refused:
        parse_rules('[age]\nminimum = "soon"\n[policy.a.deny]\npackages = []\n'
                    '[policy.b.deny]\npackages = []\n', "rules.toml")
    assert refused.value.problems == ['age.minimum: "soon" is not a duration; write a whole '
                                      'number and a unit, like "90m", "36h", "3d" or "2w"']


def test_a_name_the_rules_do_not_define_is_refused_not_judged_by_other_rules() -> None:
    rules = parse_rules(TEAMS, "rules.toml")
    with pytest.raises(UnknownPolicyError, match=r"'payment'.*\[policy.payment\]"):
        rules.policy("payment")


def test_every_policy_set_shares_the_default_rules_advisory_feed(tmp_path: Path) -> None:
    rules = parse_rules('[advisories]\nsource = "/var/osv.zip"\n'
                        '[policy.strict.advisories]\nseverity = "medium"\n', "rules.toml")
    strict = rules.policy("strict")

    assert rules.advisories is not None
    assert strict.advisories is not None
    assert strict.advisories.severity == "medium"
    assert rules.advisories.severity == "high"
    assert strict.advisories.feed is rules.advisories.feed  # one download, one index


def test_a_reload_moves_every_policy_set_to_the_next_generation_with_the_waivers(
        tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(TEAMS, encoding="utf-8")
    rules = LiveRules.load(path)
    waiver = RuleException(PatternList.of((parse_pattern("left-pad"),)),
                           datetime.now(UTC) + timedelta(days=1), "a fix", "alice",
                           waiver=True)

    rules.use_waivers((waiver,))
    path.write_text(TEAMS.replace("minimum_days = 7", "minimum_days = 14"), encoding="utf-8")
    assert rules.reload()

    current = rules.current
    assert current.generation == 2
    assert {p.generation for p in current.policies.values()} == {2}
    assert current.policy("payments").minimum_age == timedelta(days=14)
    for each in (current, *current.policies.values()):
        assert waiver in each.exceptions


def test_a_reload_the_check_refuses_keeps_the_policy_sets_in_force(tmp_path: Path) -> None:
    """The process's check: a rules rewrite that drops a policy set a tokens-file line names
    is refused, naming both files (the tokens file is checked the same way, in reverse)."""
    path = tmp_path / "rules.toml"
    path.write_text(TEAMS, encoding="utf-8")
    tokens = parse_tokens_file(f"{token_line('payments-ci', 'x' * 20)} policy:payments\n",
                               "/etc/mirrorgate/tokens")
    rules = LiveRules.load(path)
    rules.check = lambda fresh: policy_problem(tokens, fresh, "/etc/mirrorgate/tokens")

    path.write_text('[age]\nminimum = "1d"\n', encoding="utf-8")
    assert not rules.reload()

    assert rules.problem is not None
    assert "/etc/mirrorgate/tokens names policy:payments (on the line of payments-ci)" in \
        rules.problem
    assert f"the rules file {path} does not define" in rules.problem
    assert rules.current.policy("payments").minimum_age == timedelta(days=7)
    # the control: a rewrite that keeps the policy set is taken
    path.write_text(TEAMS.replace("minimum_days = 7", "minimum_days = 3"), encoding="utf-8")
    assert rules.reload()
    assert rules.current.policy("payments").minimum_age == timedelta(days=3)


def test_the_worked_example_in_the_configuration_reference_compiles() -> None:
    """docs/configuration.md#policy-sets: its rules file and its tokens file, read by the code
    that reads them, and checked against each other."""
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text("utf-8")
    section = text.split("## Policy sets", 1)[1]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    tokens = section.split("```text\n", 1)[1].split("```", 1)[0]

    rules = parse_rules(toml, "rules.toml")
    found = parse_tokens_file(tokens.replace("...", "0" * 56), "tokens")

    assert policy_problem(found, rules, "tokens") is None
    assert found.policies() == {"payments": ["payments-bot", "payments-ci"],
                                "prototype": ["proto-ci"]}
    payments = rules.policy("payments")
    assert payments.minimum_age == timedelta(days=7)
    assert payments.age_exempt.texts() == ["@acme/*"]
    assert payments.block_install_scripts
    assert not rules.block_install_scripts
    assert rules.policy("prototype").mode_of("deny") == "report"
