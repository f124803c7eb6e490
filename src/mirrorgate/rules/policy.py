"""The compiled policy: the settings every rule reads, a verdict, and the policy as data.

`Rules` is what the rules file compiles to (`rules.file`); the checks that read it, in order,
are `rules.table`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirrorgate.rules.advisory import AdvisoryRules
from mirrorgate.rules.patterns import PatternList
from mirrorgate.rules.signatures import SignatureRule
from mirrorgate.rules.takeover import SignalRule

ALGORITHMS: tuple[str, ...] = ("sha1", "sha256", "sha384", "sha512")  # weakest first
MAX_MINIMUM_AGE = timedelta(days=3650)
_ZERO = timedelta(0)


@dataclass(frozen=True)
class Rules:
    """The compiled policy. Build it with `parse_rules` or `load_rules`; `DEFAULT_RULES` is the
    policy without a file: integrity presence, sha1-only admitted but flagged weak."""

    integrity_minimum: str = "sha1"
    minimum_age: timedelta = _ZERO
    minimum_age_text: str = "off"
    missing_time_allowed: bool = False
    age_exempt: PatternList = field(default_factory=PatternList)
    deny: PatternList = field(default_factory=PatternList)
    allow: PatternList = field(default_factory=PatternList)
    block_install_scripts: bool = False
    install_scripts_allow: PatternList = field(default_factory=PatternList)
    advisories: AdvisoryRules | None = None
    signatures: SignatureRule = field(default_factory=SignatureRule)
    provenance: SignalRule = field(default_factory=lambda: SignalRule(window=5))
    publisher: SignalRule = field(default_factory=lambda: SignalRule(window=20))
    owned: PatternList = field(default_factory=PatternList)
    merge_public: PatternList = field(default_factory=PatternList)
    publishable: PatternList = field(default_factory=PatternList)
    """`[publish].names`: what clients may publish through the proxy (none by default)."""
    source: str = field(default="<defaults>", compare=False)

    def private_alone(self, name: str) -> bool:
        """`[private].names` covers `name` and `merge_public` does not: never asked of public."""
        return self.owned.covers_name(name) and not self.merge_public.covers_name(name)


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one version: admitted, or denied by `rule` for `reason`."""

    admitted: bool
    rule: str | None
    reason: str | None
    weak: bool = False
    until: datetime | None = None
    """For a timed denial (a quarantine): when it ends, so the packument is re-gated then."""


def plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"
