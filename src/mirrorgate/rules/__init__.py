"""The admission rules: which public versions the proxy admits, and why it denies the others.

One idea per module: `patterns` (the list syntax), `policy` (the compiled rules and a verdict),
`table` (the rules in order, their checks and `evaluate`), `summary` (the policy as data),
`advisory` (the advisory rules), `file` (the TOML reader), `signatures` (registry signatures),
`takeover` (provenance, publisher change), `context` (what packument-wide rules read).
"""

from mirrorgate.rules.advisory import (
    ADVISORY_MALWARE,
    ADVISORY_SEVERITY,
    ADVISORY_UNAVAILABLE,
    AdvisoryRules,
    state_token,
)
from mirrorgate.rules.context import Context
from mirrorgate.rules.file import RulesError, load_rules, parse_rules
from mirrorgate.rules.live import LiveRules, live
from mirrorgate.rules.patterns import PackagePattern, PatternList, parse_pattern
from mirrorgate.rules.policy import (
    ALGORITHMS,
    DEFAULT_RULES,
    ENFORCE,
    REPORT,
    RuleException,
    Rules,
    Verdict,
)
from mirrorgate.rules.signatures import REGISTRY_SIGNATURE, KeySet, SignatureRule, parse_keys
from mirrorgate.rules.summary import rules_summary
from mirrorgate.rules.table import (
    ALLOW_LIST,
    DENY_LIST,
    DIGEST_FLOOR,
    INSTALL_SCRIPTS,
    INTEGRITY_PRESENCE,
    MINIMUM_AGE,
    RULE_NAMES,
    RULES,
    deny_listed,
    evaluate,
    needs_history,
    rules_table,
    scan_finding,
    scripts_blocked,
    scripts_reported,
)
from mirrorgate.rules.takeover import PROVENANCE_CONTINUITY, PUBLISHER_CHANGE, SignalRule

__all__ = [
    "ADVISORY_MALWARE",
    "ADVISORY_SEVERITY",
    "ADVISORY_UNAVAILABLE",
    "ALGORITHMS",
    "ALLOW_LIST",
    "DEFAULT_RULES",
    "DENY_LIST",
    "DIGEST_FLOOR",
    "ENFORCE",
    "INSTALL_SCRIPTS",
    "INTEGRITY_PRESENCE",
    "MINIMUM_AGE",
    "PROVENANCE_CONTINUITY",
    "PUBLISHER_CHANGE",
    "REGISTRY_SIGNATURE",
    "REPORT",
    "RULES",
    "RULE_NAMES",
    "AdvisoryRules",
    "Context",
    "KeySet",
    "LiveRules",
    "PackagePattern",
    "PatternList",
    "RuleException",
    "Rules",
    "RulesError",
    "SignalRule",
    "SignatureRule",
    "Verdict",
    "deny_listed",
    "evaluate",
    "live",
    "load_rules",
    "needs_history",
    "parse_keys",
    "parse_pattern",
    "parse_rules",
    "rules_summary",
    "rules_table",
    "scan_finding",
    "scripts_blocked",
    "scripts_reported",
    "state_token",
]
