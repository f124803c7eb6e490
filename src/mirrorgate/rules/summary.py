"""The policy as plain data, for `mirrorgate check-config` and the status page."""

from __future__ import annotations

from typing import Any

from mirrorgate.moments import stamp
from mirrorgate.rules.advisory import AdvisoryRules
from mirrorgate.rules.policy import Rules
from mirrorgate.rules.releasetable import RELEASE_SIGNALS
from mirrorgate.rules.table import RULE_NAMES, RULES

__all__ = ["DEFAULT_AGE_WHY", "POLICY_TABLES", "rules_summary"]

DEFAULT_AGE_WHY = ("the default cooldown: no [age] minimum is set; a version younger than a day "
                   "is held back, as pnpm 11 does, because every large npm compromise of "
                   "2025-26 was found and pulled within hours; minimum = \"0\" turns it off")
POLICY_TABLES = tuple(dict.fromkeys(rule.table for rule in RULES if rule.table is not None))


def rules_summary(rules: Rules) -> dict[str, Any]:
    """The policy as plain data, for `mirrorgate check-config`."""
    sha1_only = "admitted, flagged weak" if rules.integrity_minimum == "sha1" else "denied"
    return {
        "source": rules.source,
        "order": list(RULE_NAMES),
        "integrity": {
            "presence": "always on",
            "minimum": rules.integrity_minimum,
            "sha1_only": sha1_only,
        },
        "age": {
            "minimum": rules.minimum_age_text,
            "minimum_seconds": int(rules.minimum_age.total_seconds()),
            "missing_time": "allow" if rules.missing_time_allowed else "deny",
            "exempt": rules.age_exempt.texts(),
            **({"default": DEFAULT_AGE_WHY} if rules.age_is_default else {}),
        },
        "deny": {"packages": rules.deny.texts()},
        "allow": {
            "packages": rules.allow.texts(),
            "mode": "only these" if rules.allow else "everything not denied",
        },
        "install_scripts": {
            "block": rules.block_install_scripts,
            "allow": rules.install_scripts_allow.texts(),
        },
        "advisories": _advisories_summary(rules.advisories),
        "signatures": {"verify": rules.signatures.verify, "missing": rules.signatures.missing},
        **{key: {"mode": signal.mode, "window": signal.window,
                 "quarantine": signal.quarantine_text, "allow": signal.allow.texts()}
           for key, signal in (("provenance", rules.provenance), ("publisher", rules.publisher))},
        "release": {
            **{signal: rules.release.action(signal) for signal in RELEASE_SIGNALS},
            "young": rules.release.young_text,
            "young_package": rules.release.young_package_text,
            "quarantine": rules.release.quarantine_text,
            "allow": rules.release.allow.texts(), "unavailable": rules.release.unavailable,
        },
        "license": ({"deny": [e.text for e in rules.license.deny],
                     "allow": [e.text for e in rules.license.allow],
                     "unknown": rules.license.unknown} if rules.license.on else None),
        "private": {
            "names": rules.owned.texts(),
            "merge_public": rules.merge_public.texts(),
            "first_party": "a name the private upstream holds an unmarked version of, or one "
                           "[private].names covers: served from the private upstream alone, "
                           "public versions never merged, unless merge_public names it",
        },
        "mode": rules.mode,
        "modes": {table: rules.mode_of(table) for table in POLICY_TABLES},
        "exceptions": [{"package": e.text, "until": stamp(e.until), "reason": e.reason,
                        "by": e.by, "rules": sorted(e.rules) if e.rules else "every policy rule"}
                       for e in rules.exceptions],
        "publish": {
            "names": rules.publishable.texts(),
            "who": "clients whose line in the tokens file grants publish:NAMES, for those "
                   "names only",
        },
    }


def _advisories_summary(advisories: AdvisoryRules | None) -> dict[str, Any] | None:
    if advisories is None:
        return None
    return {
        "source": advisories.feed.shown,
        "refresh": advisories.refresh_text,
        "malware": "deny" if advisories.malware_deny else "admit",
        "severity": advisories.severity,
        "unavailable": "deny" if advisories.unavailable_deny else "admit",
        "max_age": advisories.max_age_text,
        "ignore": sorted(advisories.ignore),
        "fast_lane": advisories.fast_lane,
        "by_default": advisories.by_default,
    }


