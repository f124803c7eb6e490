"""The admission rules: which public versions the proxy admits, and why it denies the others.

The serve path evaluates every public version of a packument when it (re)builds a cache entry,
so evaluation is pure (no I/O, no clock of its own: `now` is passed in), deterministic and
cheap: every pattern and range is compiled once, when the rules file is loaded, and lookups
go by package name or scope. Versions mirrored from public are evaluated again with the
current rules; first-party versions only against the deny list. Decisions:

- Nine rules with stable names (metric labels, 403 bodies), evaluated in this order, the first
  denial winning: `integrity-presence` (always on: a version with no digest mirrorgate can
  verify is denied whatever the file says), `digest-floor` (sha1-only versions are admitted but
  flagged weak unless a stronger floor is set), `deny-list`, `allow-list` (a non-empty allow
  list admits only what it names), `advisory-unavailable`, `advisory-malware`,
  `advisory-severity` (the `[advisories]` table, from an OSV index), `install-scripts`,
  `minimum-age` (a version that fixes an advisory skips it when `fast_lane` is on).
- One pattern syntax everywhere: `left-pad`, `@acme/*`, `lodash@<4.17.21`, `@acme/*@^2`. A name
  alone covers every version, prereleases included; a range follows npm's semantics
  (`mirrorgate.semver`), so `lodash@<4.17.21` does not cover `4.17.20-beta.1`.
- A version that is not valid semver cannot be placed relative to a range: a ranged deny entry
  denies it (fail closed) and a ranged allow or exemption entry does not cover it.
- A publish time that is missing or unparseable is "no time entry"; the age rule denies such a
  version unless `age.missing_time = "allow"`. A time without a zone is read as UTC.
- The rules file is TOML. Anything it says that cannot be honoured exactly (an unknown table or
  key, a wrong type, a bad duration, pattern or range) is refused with a `RulesError` listing
  every problem, each naming its key: a typo must never silently weaken the policy.

One idea per module: `patterns` (the list syntax), `policy` (the compiled rules and
`evaluate`), `advisory` (the advisory rules), `file` (the TOML reader), `signatures` (registry
signatures), `takeover` (provenance continuity, publisher change), `context` (what
packument-wide rules read); this module re-exports their public names.
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
from mirrorgate.rules.patterns import PackagePattern, PatternList, parse_pattern
from mirrorgate.rules.policy import (
    ALGORITHMS,
    ALLOW_LIST,
    DEFAULT_RULES,
    DENY_LIST,
    DIGEST_FLOOR,
    INSTALL_SCRIPT_KEYS,
    INSTALL_SCRIPTS,
    INTEGRITY_PRESENCE,
    MINIMUM_AGE,
    RULE_NAMES,
    Rules,
    Verdict,
    deny_listed,
    evaluate,
    needs_history,
    rules_summary,
)
from mirrorgate.rules.signatures import REGISTRY_SIGNATURE, KeySet, SignatureRule, parse_keys
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
    "INSTALL_SCRIPTS",
    "INSTALL_SCRIPT_KEYS",
    "INTEGRITY_PRESENCE",
    "MINIMUM_AGE",
    "PROVENANCE_CONTINUITY",
    "PUBLISHER_CHANGE",
    "REGISTRY_SIGNATURE",
    "RULE_NAMES",
    "AdvisoryRules",
    "Context",
    "KeySet",
    "PackagePattern",
    "PatternList",
    "Rules",
    "RulesError",
    "SignalRule",
    "SignatureRule",
    "Verdict",
    "deny_listed",
    "evaluate",
    "load_rules",
    "needs_history",
    "parse_keys",
    "parse_pattern",
    "parse_rules",
    "rules_summary",
    "state_token",
]
