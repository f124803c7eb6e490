"""The compiled policy and its evaluation: is this public version admitted, and if not, why.

Evaluation is pure (no I/O, no clock of its own: `now` is passed in), deterministic and cheap,
because the serve path runs it for every public version of a packument when it fills its cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mirrorgate.integrity import digests_from_dist, strongest
from mirrorgate.moments import moment, stamp
from mirrorgate.npm.scripts import install_scripts
from mirrorgate.rules.advisory import (
    ADVISORY_MALWARE,
    ADVISORY_SEVERITY,
    ADVISORY_UNAVAILABLE,
    AdvisoryRules,
    check,
    fast_lane,
)
from mirrorgate.rules.context import Context
from mirrorgate.rules.patterns import PatternList, Subject, quoted
from mirrorgate.rules.signatures import REGISTRY_SIGNATURE, SignatureRule, check_signature
from mirrorgate.rules.takeover import (
    PROVENANCE_CONTINUITY,
    PUBLISHER_CHANGE,
    SignalRule,
    check_provenance,
    check_publisher,
)

# What the package exports is listed once, in rules/__init__.py.
INTEGRITY_PRESENCE = "integrity-presence"
DIGEST_FLOOR = "digest-floor"
DENY_LIST = "deny-list"
ALLOW_LIST = "allow-list"
INSTALL_SCRIPTS = "install-scripts"
MINIMUM_AGE = "minimum-age"
# Stable names (metric labels, 403 bodies), in the order `evaluate` applies them, the first
# denial winning. The advisory rules are `rules.advisory`'s, the last two `rules.takeover`'s.
RULE_NAMES: tuple[str, ...] = (
    INTEGRITY_PRESENCE,
    DIGEST_FLOOR,
    REGISTRY_SIGNATURE,
    DENY_LIST,
    ALLOW_LIST,
    ADVISORY_UNAVAILABLE,
    ADVISORY_MALWARE,
    ADVISORY_SEVERITY,
    INSTALL_SCRIPTS,
    MINIMUM_AGE,
    PROVENANCE_CONTINUITY,
    PUBLISHER_CHANGE,
)

ALGORITHMS: tuple[str, ...] = ("sha1", "sha256", "sha384", "sha512")  # weakest first
_RANK = {algorithm: rank for rank, algorithm in enumerate(ALGORITHMS)}
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


_ADMITTED = Verdict(True, None, None)
_ADMITTED_WEAK = Verdict(True, None, None, weak=True)


def _deny(rule: str, reason: str) -> Verdict:
    return Verdict(False, rule, reason)


def _install_scripts(manifest: Mapping[str, Any]) -> list[str]:
    found = install_scripts(manifest)
    if not found and manifest.get("hasInstallScript") not in (None, False):
        found = ["hasInstallScript"]
    return found


_PRINTABLE = re.compile(r"[ -~]{1,200}")


def _label(name: str, version: str) -> str:
    """`name@version` for a reason a terminal will print: the version comes from an upstream
    packument, so anything odd in it (control characters, escapes, great length) is escaped."""
    label = f"{name}@{version}"
    if _PRINTABLE.fullmatch(label):
        return label
    shown = json.dumps(label[:200])[1:-1]
    return shown + ("..." if len(label) > 200 else "")


def plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return plural(seconds, "second")
    if seconds < 2 * 3600:
        return plural(seconds // 60, "minute")
    if seconds < 2 * 86400:
        return plural(seconds // 3600, "hour")
    return plural(seconds // 86400, "day")


def _age_reason(when: datetime, age: timedelta, rules: Rules) -> str:
    relative = f"{_span(age)} ago" if age >= _ZERO else f"{_span(-age)} in the future"
    return (f"published {stamp(when)}, {relative}; the minimum release age is "
            f"{rules.minimum_age_text}")


def _deny_listed(rules: Rules, subject: Subject) -> Verdict | None:
    if not rules.deny:
        return None
    # A version that is not valid semver cannot be placed relative to a range: a ranged deny
    # entry denies it (fail closed); a ranged allow or exemption entry does not cover it.
    hit = rules.deny.first_match(subject, unparseable_matches=True)
    if hit is None:
        return None
    label, entry = _label(subject.name, subject.version), quoted(hit.text)
    if hit.range is not None and subject.parsed() is None:
        return _deny(DENY_LIST, f"{label} is not a valid semver version, so it cannot be shown "
                     f"to be outside the deny list entry {entry}")
    return _deny(DENY_LIST, f"{label} matches the deny list entry {entry}")


def scripts_blocked(rules: Rules, name: str, version: str) -> bool:
    """Whether the install-scripts rule holds `name@version` to running nothing at install: the
    tarball's own files are then checked too (`npm.tarscripts`), not only the manifest."""
    return rules.block_install_scripts and rules.install_scripts_allow.first_match(
        Subject(name, version), unparseable_matches=False) is None


def deny_listed(rules: Rules, name: str, version: str) -> Verdict | None:
    """The deny list alone, for first-party versions: the organisation's own builds are not
    held to the public admission rules, but an operator's deny entry withdraws any version."""
    return _deny_listed(rules, Subject(name, version))


def evaluate(
    rules: Rules,
    name: str,
    version: str,
    manifest: Mapping[str, Any],
    published: str | None,
    now: datetime,
    *,
    context: Context | None = None,
) -> Verdict:
    """Whether the public version `name@version` is admitted, and if not by which rule and why.

    `manifest` is the packument's `versions[version]`, `published` its `time[version]` (or None)
    and `now` the moment to measure release age against. `context` carries what the
    packument-wide rules read (history, registry keys); without it they see no history and no
    keys. Pure: no I/O, no clock, no logging.
    """
    is_mapping = isinstance(manifest, Mapping)
    dist = manifest.get("dist") if is_mapping else None
    best = strongest(digests_from_dist(dist)) if isinstance(dist, Mapping) else None
    if best is None:  # integrity-presence is always on, whatever the rules file says
        return _deny(
            INTEGRITY_PRESENCE,
            f"{_label(name, version)} carries no digest to verify its tarball against (no sha1 "
            "to sha512 dist.integrity and no hex dist.shasum), and every version must carry one",
        )
    if _RANK[best.algorithm] < _RANK[rules.integrity_minimum]:
        wanted = rules.integrity_minimum
        floor = wanted if wanted == ALGORITHMS[-1] else f"{wanted} or stronger"
        return _deny(
            DIGEST_FLOOR,
            f"{_label(name, version)}'s strongest digest is {best.algorithm}; "
            f"the rules require {floor}",
        )
    # sha1-only versions are admitted but flagged weak, unless a stronger floor is set
    admitted = _ADMITTED_WEAK if best.algorithm == "sha1" else _ADMITTED
    # Tampered metadata outranks every policy reason, so it is checked first.
    keys = context.keys if context is not None else None
    unsigned = check_signature(rules.signatures, keys, name, version, manifest, published)
    if unsigned is not None:
        return _deny(unsigned.rule, unsigned.reason)

    subject = Subject(name, version)
    listed = _deny_listed(rules, subject)
    if listed is not None:
        return listed
    # a non-empty allow list admits only what it names
    if rules.allow and rules.allow.first_match(subject, unparseable_matches=False) is None:
        return _deny(
            ALLOW_LIST,
            f"{_label(name, version)} matches no allow list entry, and only versions on the "
            "allow list are admitted",
        )
    if rules.advisories is not None:
        found = check(rules.advisories, name, version, _label(name, version), now)
        if found is not None:
            return _deny(*found)
    if rules.block_install_scripts and is_mapping:
        scripts = _install_scripts(manifest)
        if scripts and (
            rules.install_scripts_allow.first_match(subject, unparseable_matches=False) is None
        ):
            return _deny(
                INSTALL_SCRIPTS,
                f"{_label(name, version)} has install scripts ({', '.join(scripts)}), which the "
                "rules block for packages not listed in install_scripts.allow",
            )
    if rules.minimum_age > _ZERO and (
        not rules.age_exempt
        or rules.age_exempt.first_match(subject, unparseable_matches=False) is None
    ) and (rules.advisories is None or not fast_lane(rules.advisories, name, version)):
        # (a version that fixes an advisory skips the age rule when the fast lane is on)
        when = moment(published)
        if when is None:  # missing or unparseable: "no time entry", denied unless allowed
            if not rules.missing_time_allowed:
                return _deny(
                    MINIMUM_AGE,
                    f"{_label(name, version)} has no publish time in the packument, so its age "
                    f"is unknown; the minimum release age is {rules.minimum_age_text}",
                )
        else:
            current = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
            age = current - when
            if age < rules.minimum_age:
                return _deny(MINIMUM_AGE, _age_reason(when, age, rules))
    history = context.history if context is not None else None
    if history is not None:
        current = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
        for signal, settings in ((check_provenance, rules.provenance),
                                 (check_publisher, rules.publisher)):
            fired = signal(settings, name, version, history, current)
            if fired is not None:
                return Verdict(False, fired.rule, fired.reason, until=fired.until)
    return admitted


def needs_history(rules: Rules) -> bool:
    """Whether `evaluate` under these rules reads the packument's history."""
    return rules.provenance.on or rules.publisher.on


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
            "who": "clients whose line in the tokens file has the `publish` permission",
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


