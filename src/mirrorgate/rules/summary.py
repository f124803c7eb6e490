"""The policy as plain data, for `mirrorgate check-config` and the status page."""

from __future__ import annotations

from typing import Any

from mirrorgate.rules.advisory import AdvisoryRules
from mirrorgate.rules.policy import Rules
from mirrorgate.rules.table import RULE_NAMES

__all__ = ["rules_summary"]


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
        "private": {
            "names": rules.owned.texts(),
            "merge_public": rules.merge_public.texts(),
            "first_party": "a name the private upstream holds an unmarked version of, or one "
                           "[private].names covers: served from the private upstream alone, "
                           "public versions never merged, unless merge_public names it",
        },
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
    }


