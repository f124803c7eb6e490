"""The compiled policy: the settings every rule reads, its modes and exceptions, a verdict.

`Rules` is what the rules file compiles to (`rules.file`); the checks that read it, in order,
are `rules.table`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirrorgate.errors import MirrorgateError
from mirrorgate.moments import stamp
from mirrorgate.rules.advisory import AdvisoryRules
from mirrorgate.rules.license import LicenseRule
from mirrorgate.rules.patterns import PatternList, Subject
from mirrorgate.rules.releasetable import ReleaseRules
from mirrorgate.rules.signatures import SignatureRule
from mirrorgate.rules.takeover import SignalRule

ALGORITHMS: tuple[str, ...] = ("sha1", "sha256", "sha384", "sha512")  # weakest first
MAX_MINIMUM_AGE = timedelta(days=3650)
DEFAULT_MINIMUM_AGE = timedelta(days=1)
"""The cooldown where the rules say nothing about age. It held in every large npm compromise
of 2025-26 (malicious versions were found and pulled within hours); pnpm 11 ships the same."""
ENFORCE = "enforce"
REPORT = "report"
RULE_MODES = (ENFORCE, REPORT)
POLICY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
"""A policy set's name (`[policy.NAME]`, `policy:NAME` on a tokens-file line)."""
DEFAULT_POLICY_NAME = "default"
"""What metrics, check-config and the status page call the rules without a policy set."""
_ZERO = timedelta(0)


class UnknownPolicyError(MirrorgateError):
    """A client names a policy set the rules in force do not define (`Rules.policy`). The
    tokens file and the rules file are checked against each other at start and at each
    reload, so this is a refusal, never a fallback to other rules."""

    def __init__(self, name: str, source: str) -> None:
        super().__init__(f"the policy set {name!r} is not defined by the rules in force "
                         f"({source}); define [policy.{name}] there")
        self.name = name


@dataclass(frozen=True, slots=True)
class RuleException:
    """An `[[exception]]` entry: versions `package` covers are admitted past the named rules
    (`rules`, None: every policy rule) until `until`, because `by` said `reason`."""

    package: PatternList
    """One pattern: a name, a scope or a prefix, optionally with a range."""
    until: datetime
    reason: str
    by: str
    rules: frozenset[str] | None = None
    waiver: bool = False
    """Granted with `mirrorgate allow` (kept in the state store), not written in the file."""
    version: str | None = None
    """The one version it lifts, as written (build metadata included: a range ignores it, so
    `1.0.0` alone would cover `1.0.0+evil`, which npm installs for `^1.0.0`); None: what
    `package` covers (a file's entry)."""
    integrity: str | None = None
    """The bytes it lifts (`integrity.strongest_sri`): other bytes later listed under the same
    version are not lifted, nor is anything by "" (a waiver kept before waivers named their
    bytes); None: any bytes (a file's entry)."""

    @property
    def text(self) -> str:
        return self.package.texts()[0]

    def lifts(self, rule: str, subject: Subject, now: datetime) -> bool:
        if self.version is not None and subject.version != self.version:
            return False
        if self.integrity is not None and (not self.integrity
                                           or subject.integrity != self.integrity):
            return False
        return (now < self.until and (self.rules is None or rule in self.rules)
                and self.package.first_match(subject, unparseable_matches=False) is not None)

    def describe(self) -> str:
        what = "waiver" if self.waiver else "exception"
        return f"the {what} for {self.text} until {stamp(self.until)} (by {self.by}: " \
               f"{self.reason})"


@dataclass(frozen=True)
class Rules:
    """The compiled policy. Build it with `parse_rules` or `load_rules`; `DEFAULT_RULES` is the
    policy without a file: integrity presence, sha1-only admitted but flagged weak."""

    integrity_minimum: str = "sha1"
    minimum_age: timedelta = DEFAULT_MINIMUM_AGE
    minimum_age_text: str = "1 day"
    age_is_default: bool = True
    """No `[age]` minimum was written: the default cooldown (`DEFAULT_MINIMUM_AGE`) applies."""
    missing_time_allowed: bool = True
    """A version without a publish time: admitted under the default cooldown (some registries
    record none), denied when `[age]` sets a minimum, unless `missing_time = "allow"`."""
    age_exempt: PatternList = field(default_factory=PatternList)
    deny: PatternList = field(default_factory=PatternList)
    allow: PatternList = field(default_factory=PatternList)
    block_install_scripts: bool = False
    install_scripts_allow: PatternList = field(default_factory=PatternList)
    advisories: AdvisoryRules | None = None
    signatures: SignatureRule = field(default_factory=SignatureRule)
    provenance: SignalRule = field(default_factory=lambda: SignalRule(window=5))
    publisher: SignalRule = field(default_factory=lambda: SignalRule(window=20))
    release: ReleaseRules = field(default_factory=ReleaseRules)
    """`[release]`: the release signals, read from the tarball at a version's first pull."""
    license: LicenseRule = field(default_factory=LicenseRule)
    """`[license]`: the declared license judged against SPDX deny and allow lists."""
    owned: PatternList = field(default_factory=PatternList)
    merge_public: PatternList = field(default_factory=PatternList)
    publishable: PatternList = field(default_factory=PatternList)
    """`[publish].names`: what clients may publish through the proxy (none by default)."""
    mode: str = ENFORCE
    """The file's `mode`: what a rule whose table says no `mode` of its own does."""
    table_modes: Mapping[str, str] = field(default_factory=dict)
    exceptions: tuple[RuleException, ...] = ()
    source: str = field(default="<defaults>", compare=False)
    generation: int = field(default=0, compare=False)
    """Which rules in force these are, counted from the process's first (`rules.live`): a
    packument gated with an older generation is gated again before it is served."""
    policies: Mapping[str, Rules] = field(default_factory=dict)
    """`[policy.NAME]`: the rules a client whose tokens-file line says `policy:NAME` is judged
    by (these rules with the policy's tables laid over them, `rules.file`), each of the same
    generation; a client without one is judged by these."""
    policy_name: str | None = None
    """Which `[policy.NAME]` these rules are (None: the default rules)."""

    def policy(self, name: str | None) -> Rules:
        """The rules a client under the policy set `name` is judged by (None: these); raises
        UnknownPolicyError for a name these rules do not define."""
        if name is None:
            return self
        found = self.policies.get(name)
        if found is None:
            raise UnknownPolicyError(name, self.source)
        return found

    def private_alone(self, name: str) -> bool:
        """`[private].names` covers `name` and `merge_public` does not: never asked of public."""
        return self.owned.covers_name(name) and not self.merge_public.covers_name(name)

    def mode_of(self, table: str) -> str:
        """`enforce` or `report` for the rules of `table` (its own `mode`, else the file's)."""
        return self.table_modes.get(table, self.mode)

    def exception_for(self, rule: str, subject: Subject, now: datetime) -> RuleException | None:
        """The first unexpired exception that lifts `rule` for `subject`, or None."""
        for exception in self.exceptions:
            if exception.lifts(rule, subject, now):
                return exception
        return None

    def warnings(self, now: datetime) -> list[str]:
        """What an operator should know about these rules (each a sentence): start-up logs
        them, `check-config` prints them. None stops the process."""
        return [f"{self.source}: {exception.describe()} ended at {stamp(exception.until)} and "
                "lifts nothing; remove it or give it a later `until`"
                for exception in self.exceptions if exception.until <= now
                and not exception.waiver]  # a waiver is not the file's to remove


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one version: admitted, or denied by `rule` for `reason`; `reported`,
    the (rule, reason) of each report-mode rule that would have denied it; `excepted`, the
    exceptions that admitted it past a rule."""

    admitted: bool
    rule: str | None
    reason: str | None
    weak: bool = False
    until: datetime | None = None
    """When this verdict changes by itself (a version comes of age, a quarantine or an
    exception ends): the packument is gated again then."""
    reported: tuple[tuple[str, str], ...] = ()
    excepted: tuple[str, ...] = ()


def plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"
