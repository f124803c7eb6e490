"""The rules in force as sentences: one line per rule that can deny, and the default policy.

`DEFAULT_POLICY` is `in_force(DEFAULT_RULES)` joined (with the known-malware feed
MIRRORGATE_MALWARE_FEED adds by default), so `--help`, `check-config`, the README
and docs/configuration.md state the policy without a rules file from the code that applies it
(tests/test_docs.py holds the README and the reference to it).
"""

from __future__ import annotations

from dataclasses import replace

from mirrorgate.config import OSV_NPM_EXPORT
from mirrorgate.rules.advisory import ADVISORY_MALWARE, known_malware
from mirrorgate.rules.policy import DEFAULT_RULES, REPORT, Rules
from mirrorgate.rules.releasetable import (
    NEW_CAPABILITY,
    RELEASE_SIGNALS,
    UNREADABLE_RELEASE,
    YOUNG_PACKAGE_CAPABILITY,
    YOUNG_PACKAGE_INSTALL_SCRIPT,
)
from mirrorgate.rules.table import (
    DENY_LIST,
    DIGEST_FLOOR,
    INSTALL_SCRIPTS,
    INTEGRITY_PRESENCE,
    MINIMUM_AGE,
)

__all__ = ["DEFAULT_POLICY", "in_force"]


def _listed(texts: list[str], shown: int = 3) -> str:
    more = f" and {len(texts) - shown} more" if len(texts) > shown else ""
    return ", ".join(texts[:shown]) + more


def _mode(rules: Rules, table: str) -> str:
    return " (report mode: logged, not enforced)" if rules.mode_of(table) == REPORT else ""


def in_force(rules: Rules) -> list[str]:
    """One line per rule that can deny a version under `rules`, in the order they run."""
    weak = ("; sha1-only versions admitted, flagged weak" if rules.integrity_minimum == "sha1"
            else "")
    lines = [f"{INTEGRITY_PRESENCE}: a version without a verifiable digest is denied "
             f"(always on{weak})"]
    if rules.integrity_minimum != "sha1":
        lines.append(f"{DIGEST_FLOOR}: digests weaker than {rules.integrity_minimum} are "
                     f"denied{_mode(rules, 'integrity')}")
    if rules.signatures.verify:
        lines.append("registry-signature: dist.signatures must verify against the registry's "
                     f"keys (missing: {rules.signatures.missing}){_mode(rules, 'signatures')}")
    if rules.deny:
        lines.append(f"{DENY_LIST}: {_listed(rules.deny.texts())}{_mode(rules, 'deny')}")
    if rules.allow:
        lines.append(f"allow-list: only {_listed(rules.allow.texts())}"
                     f"{_mode(rules, 'allow')}")
    if rules.advisories is not None and rules.advisories.by_default:
        lines.append(f"{ADVISORY_MALWARE}: a version that a known-malware record (MAL-) of "
                     "OSV's npm export names is denied (MIRRORGATE_MALWARE_FEED, refreshed "
                     "hourly; while it cannot be fetched, versions are admitted as before)"
                     f"{_mode(rules, 'advisories')}")
    elif rules.advisories is not None:
        malware = "denied" if rules.advisories.malware_deny else "admitted"
        lines.append(f"advisories: malware {malware}, severity {rules.advisories.severity} "
                     "and above denied"
                     f"{_mode(rules, 'advisories')}")
    if rules.block_install_scripts:
        allowed = rules.install_scripts_allow.texts()
        lines.append(f"{INSTALL_SCRIPTS}: versions that run code at install are denied"
                     + (f", except {_listed(allowed)}" if allowed else "")
                     + _mode(rules, "install_scripts"))
    if rules.license.on:
        license_ = rules.license
        said = [f"deny {_listed([e.text for e in license_.deny])}"] if license_.deny else []
        said += [f"only {_listed([e.text for e in license_.allow])}"] if license_.allow else []
        lines.append(f"license: {'; '.join(said) or 'no list'}; a license not read as SPDX: "
                     f"{license_.unknown}{_mode(rules, 'license')}")
    if rules.minimum_age.total_seconds() > 0:
        why = (" (the default cooldown; [age] minimum = \"0\" turns it off)"
               if rules.age_is_default else "")
        lines.append(f"{MINIMUM_AGE}: a version is held back until it is "
                     f"{rules.minimum_age_text} old{why}{_mode(rules, 'age')}")
    for signal in (rules.provenance, rules.publisher):
        if signal.on:
            name = "provenance-continuity" if signal is rules.provenance else "publisher-change"
            lines.append(f"{name}: {signal.mode}, over the previous {signal.window} versions")
    release = rules.release
    acting = [s for s in RELEASE_SIGNALS if release.action(s) != "off"]
    reading = set(release.reading)
    capabilities = {NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY}
    # the default's signals, and the young-package one alone, are said in sentences; any
    # other set is listed by name
    described = release.only_young_package or (bool(reading) and reading <= capabilities)

    def held(signal: str) -> str:
        return {"deny": "denied", "report": "reported",
                "quarantine": f"quarantined until {release.quarantine_text} after its "
                              "publication"}[release.action(signal)] + _mode(rules, "release")

    if release.only_young_package:
        lines.append(f"{YOUNG_PACKAGE_INSTALL_SCRIPT}: a release that runs code at install, of "
                     f"a package first published less than {release.young_package_text} ago, "
                     f"is {held(YOUNG_PACKAGE_INSTALL_SCRIPT)}")
    elif described:
        if NEW_CAPABILITY in reading:
            lines.append(f"{NEW_CAPABILITY}: what a release's code can do at install and at "
                         "load (the network, processes, the environment, files outside the "
                         "package, dynamic and native code, interception of globals, a loop "
                         "that never lets it load, its code removed) is read at its first pull "
                         "and compared with the release before it, and a capability gained, or "
                         "a network call to a host its code never named, is "
                         f"{held(NEW_CAPABILITY)}")
        if YOUNG_PACKAGE_CAPABILITY in reading:
            lines.append(f"{YOUNG_PACKAGE_CAPABILITY}: a release nothing vouches for (no "
                         "earlier release, or a package first published less than "
                         f"{release.young_package_text} ago or whose first publish its "
                         "registry's times cannot establish) whose code can reach the network, "
                         "run processes, read the environment or credentials files or cannot "
                         "be read at install (a dependency npm fetches from a git repository, "
                         "a URL or a path included), or at load run decoded code, intercept "
                         "globals, write into the home directory, loop with no way out or send "
                         "what it reads, is "
                         f"{held(YOUNG_PACKAGE_CAPABILITY)}")
    elif release.on:
        lines.append(f"release signals: {', '.join(acting)}{_mode(rules, 'release')}")
    if described and UNREADABLE_RELEASE in acting:  # riding on the signals that read
        lines.append(f"{UNREADABLE_RELEASE}: a release whose tarball mirrorgate cannot read "
                     f"as npm does is {held(UNREADABLE_RELEASE)}")
    return lines


def _default_policy(malware_feed: str) -> str:
    lines = in_force(replace(DEFAULT_RULES, advisories=known_malware(malware_feed)))
    return (f"Without a rules file (MIRRORGATE_RULES_FILE), {len(lines)} rules run: "
            + "; ".join(lines) + ".")


DEFAULT_POLICY = _default_policy(OSV_NPM_EXPORT)
