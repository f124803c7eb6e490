"""The admission rules as one table: each rule's name, what it denies, and its check, in order.

`evaluate` walks the table and the first check that denies decides. The order, `RULE_NAMES`
(metric labels, `check-config`), and the rules table in docs/serving.md all come from `RULES`,
so they cannot drift apart. Every check is pure (no I/O, no clock of its own) and cheap: the
serve path runs the table for every public version of a packument when it fills its cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mirrorgate.integrity import Digest, digests_from_dist, strongest
from mirrorgate.moments import moment, stamp
from mirrorgate.npm.scripts import install_scripts
from mirrorgate.rules.advisory import (
    ADVISORY_MALWARE,
    ADVISORY_SEVERITY,
    ADVISORY_UNAVAILABLE,
    check,
    fast_lane,
)
from mirrorgate.rules.context import Context
from mirrorgate.rules.license import LICENSE, LICENSE_UNKNOWN
from mirrorgate.rules.patterns import Subject, quoted
from mirrorgate.rules.policy import ALGORITHMS, REPORT, Rules, Verdict, plural
from mirrorgate.rules.releasetable import (
    NEW_CAPABILITY,
    NEW_DEPENDENCY_OUTSIDE,
    NEW_DEPENDENCY_YOUNG,
    NEW_INSTALL_SCRIPT,
    OBFUSCATED_CODE,
    TYPOSQUAT,
    UNREADABLE_RELEASE,
    YOUNG_PACKAGE_CAPABILITY,
    YOUNG_PACKAGE_INSTALL_SCRIPT,
)
from mirrorgate.rules.signatures import REGISTRY_SIGNATURE, check_signature
from mirrorgate.rules.takeover import (
    PROVENANCE_CONTINUITY,
    PUBLISHER_CHANGE,
    Finding,
    History,
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

_RANK = {algorithm: rank for rank, algorithm in enumerate(ALGORITHMS)}
_ZERO = timedelta(0)
_ADMITTED = Verdict(True, None, None)
_ADMITTED_WEAK = Verdict(True, None, None, weak=True)
_PRINTABLE = re.compile(r"[ -~]{1,200}")


@dataclass(frozen=True, slots=True)
class Judged:
    """One version as every check reads it."""

    name: str
    version: str
    manifest: Mapping[str, Any]
    published: str | None
    now: datetime
    """Aware, UTC."""
    context: Context | None
    best: Digest | None
    """The strongest digest this process can compute, or None."""
    integrity: str | None = None
    """The bytes a waiver must name, when not `best`'s (a mirrored copy's: the digest the
    worker verified it against)."""

    @property
    def subject(self) -> Subject:
        integrity = self.integrity if self.integrity is not None else (
            self.best.sri() if self.best is not None else "")
        return Subject(self.name, self.version, integrity)

    @property
    def label(self) -> str:
        """`name@version` for a reason a terminal will print: the version comes from an
        upstream packument, so anything odd in it (control characters, escapes, great length)
        is escaped."""
        label = f"{self.name}@{self.version}"
        if _PRINTABLE.fullmatch(label):
            return label
        shown = json.dumps(label[:200])[1:-1]
        return shown + ("..." if len(label) > 200 else "")


Check = Callable[[Rules, Judged], Verdict | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """A row of the table: the rule names its check may deny with (metric labels and 403
    bodies), what it denies (the docs' sentence), the check (None: it admits), and the rules
    file's table it is set in: a policy rule, which `mode = "report"` and an exception can
    reach. None for what is not policy (a version without a digest is never served)."""

    names: tuple[str, ...]
    denies: str
    check: Check
    table: str | None = None
    mode: Callable[[Rules, str], str] | None = None
    """The mode of a denial by the rule it names, when not its table's (`license-unknown`
    under `unknown = "report"`)."""


def _deny(rule: str, reason: str) -> Verdict:
    return Verdict(False, rule, reason)


# --- the checks, in the order they run ------------------------------------------------------

def _integrity_presence(_rules: Rules, judged: Judged) -> Verdict | None:
    if judged.best is not None:  # always on, whatever the rules file says
        return None
    return _deny(INTEGRITY_PRESENCE, f"{judged.label} carries no digest to verify its tarball "
                 "against (no sha1 to sha512 dist.integrity and no hex dist.shasum), and every "
                 "version must carry one")


def _digest_floor(rules: Rules, judged: Judged) -> Verdict | None:
    best = judged.best
    if best is None or _RANK[best.algorithm] >= _RANK[rules.integrity_minimum]:
        return None
    wanted = rules.integrity_minimum
    floor = wanted if wanted == ALGORITHMS[-1] else f"{wanted} or stronger"
    return _deny(DIGEST_FLOOR, f"{judged.label}'s strongest digest is {best.algorithm}; the "
                 f"rules require {floor}")


def _signature(rules: Rules, judged: Judged) -> Verdict | None:
    # tampered metadata outranks every policy reason, so it is checked before them
    keys = judged.context.keys if judged.context is not None else None
    found = check_signature(rules.signatures, keys, judged.name, judged.version,
                            judged.manifest, judged.published)
    return _deny(found.rule, found.reason) if found is not None else None


def _deny_list(rules: Rules, judged: Judged) -> Verdict | None:
    if not rules.deny:
        return None
    # A version that is not valid semver cannot be placed relative to a range: a ranged deny
    # entry denies it (fail closed); a ranged allow or exemption entry does not cover it.
    subject = judged.subject
    hit = rules.deny.first_match(subject, unparseable_matches=True)
    if hit is None:
        return None
    entry = quoted(hit.text)
    if hit.range is not None and subject.parsed() is None:
        return _deny(DENY_LIST, f"{judged.label} is not a valid semver version, so it cannot "
                     f"be shown to be outside the deny list entry {entry}")
    return _deny(DENY_LIST, f"{judged.label} matches the deny list entry {entry}")


def _allow_list(rules: Rules, judged: Judged) -> Verdict | None:
    # a non-empty allow list admits only what it names
    if not rules.allow or rules.allow.first_match(judged.subject,
                                                  unparseable_matches=False) is not None:
        return None
    return _deny(ALLOW_LIST, f"{judged.label} matches no allow list entry, and only versions "
                 "on the allow list are admitted")


def _advisories(rules: Rules, judged: Judged) -> Verdict | None:
    if rules.advisories is None:
        return None
    found = check(rules.advisories, judged.name, judged.version, judged.label, judged.now)
    return _deny(*found) if found is not None else None


def _scripts_of(manifest: Mapping[str, Any]) -> list[str]:
    found = install_scripts(manifest)
    if not found and manifest.get("hasInstallScript") not in (None, False):
        found = ["hasInstallScript"]
    return found


def _install_scripts(rules: Rules, judged: Judged) -> Verdict | None:
    if not scripts_blocked(rules, judged.name, judged.version):
        return None
    scripts = _scripts_of(judged.manifest)
    if not scripts:
        return None
    return _deny(INSTALL_SCRIPTS, f"{judged.label} has install scripts ({', '.join(scripts)}), "
                 "which the rules block for packages not listed in install_scripts.allow")


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return plural(seconds, "second")
    if seconds < 2 * 3600:
        return plural(seconds // 60, "minute")
    if seconds < 2 * 86400:
        return plural(seconds // 3600, "hour")
    return plural(seconds // 86400, "day")


def _minimum_age(rules: Rules, judged: Judged) -> Verdict | None:
    if rules.minimum_age <= _ZERO or rules.age_exempt.first_match(
            judged.subject, unparseable_matches=False) is not None:
        return None
    # a version that fixes an advisory skips the age rule when the fast lane is on
    if rules.advisories is not None and fast_lane(rules.advisories, judged.name,
                                                  judged.version):
        return None
    when = moment(judged.published)
    if when is None:  # missing or unparseable: "no time entry", denied unless allowed
        if rules.missing_time_allowed:
            return None
        return _deny(MINIMUM_AGE, f"{judged.label} has no publish time in the packument, so "
                     f"its age is unknown; the minimum release age is {rules.minimum_age_text}")
    age = judged.now - when
    if age >= rules.minimum_age:
        return None
    relative = f"{_span(age)} ago" if age >= _ZERO else f"{_span(-age)} in the future"
    default = " (mirrorgate's default cooldown)" if rules.age_is_default else ""
    return Verdict(False, MINIMUM_AGE, f"published {stamp(when)}, {relative}; the minimum "
                   f"release age is {rules.minimum_age_text}{default}",
                   until=when + rules.minimum_age)  # it comes of age then


def _license(rules: Rules, judged: Judged) -> Verdict | None:
    # the registry manifest decides the packument; the relay compares the tarball's own
    # package.json with it (`rules.license.tarball_license_finding`)
    if not rules.license.on:
        return None
    found = rules.license.judge_manifest(judged.manifest)
    if found.outcome == "denied":
        return _deny(LICENSE, f"{judged.label} {found.why}")
    if found.outcome == "allowed" or rules.license.unknown == "allow":
        return None
    return _deny(LICENSE_UNKNOWN, f"{judged.label} {found.why}; the rules judge only "
                 f"licenses they can read as SPDX ({rules.license.unknown_said})")


def _license_mode(rules: Rules, rule: str) -> str:
    if rule == LICENSE_UNKNOWN and rules.license.unknown == "report":
        return REPORT
    return rules.mode_of("license")


Signal = Callable[[SignalRule, str, str, History, datetime], Finding | None]


def _takeover(signal: Signal, setting: Callable[[Rules], SignalRule]) -> Check:
    def checked(rules: Rules, judged: Judged) -> Verdict | None:
        history = judged.context.history if judged.context is not None else None
        if history is None:
            return None
        fired = signal(setting(rules), judged.name, judged.version, history, judged.now)
        if fired is None:
            return None
        return Verdict(False, fired.rule, fired.reason, until=fired.until)

    return checked


def _at_first_pull(_rules: Rules, _judged: Judged) -> Verdict | None:
    # a release signal reads the tarball's bytes: `gate.verdicts.judge` judges it when the version
    # is first pulled, and its verdict is remembered; the packument's gating admits
    return None


RULES: tuple[Rule, ...] = (
    Rule((INTEGRITY_PRESENCE,), "its `dist` has no digest mirrorgate can verify: no sha1, "
         "sha256, sha384 or sha512 entry in `dist.integrity` and no hex `dist.shasum`. Always "
         "on; no setting turns it off.", _integrity_presence),
    Rule((DIGEST_FLOOR,), "its strongest digest is weaker than `integrity.minimum`. With the "
         "default `sha1`, a version that carries only sha1 is admitted but flagged **weak**.",
         _digest_floor, "integrity"),
    Rule((REGISTRY_SIGNATURE,), "`[signatures]` is on and its `dist.signatures` does not "
         "verify against the public registry's keys (tampered metadata), or, with `missing = "
         "\"deny\"`, it has no signature or the keys are unavailable. See "
         "[Account-takeover signals](#account-takeover-signals-and-registry-signatures).",
         _signature, "signatures"),
    Rule((DENY_LIST,), "it matches an entry of `deny.packages`.", _deny_list, "deny"),
    Rule((ALLOW_LIST,), "`allow.packages` is not empty and it matches none of its entries.",
         _allow_list, "allow"),
    Rule((ADVISORY_UNAVAILABLE, ADVISORY_MALWARE, ADVISORY_SEVERITY), "the `[advisories]` "
         "table: see [Advisories](#advisories).", _advisories, "advisories"),
    Rule((INSTALL_SCRIPTS,), "`[install_scripts]` is present, the version has a `preinstall`, "
         "`install` or `postinstall` script or `hasInstallScript: true`, and it matches no "
         "entry of `install_scripts.allow`. The manifest is what the publisher chose to show, "
         "and yarn 1 runs the `package.json` inside the tarball, and npm runs the scripts of "
         "dependencies bundled in the tarball, so where the rule applies the tarball's own "
         "`package.json` and `binding.gyp` (node-gyp's implicit install), at its root and in "
         "each bundled `node_modules/<name>/`, are read too as the bytes stream: a download "
         "whose contents run code at install is refused (`tarball_scripts_refused`, "
         "`security: true`, counted under this rule): a tarball of at most 16 MiB is withheld "
         "until the verdict, so the client gets a 403 naming the rule and the scripts, a "
         "larger one is cut before its last chunk and the next request is that 403 "
         "([a refusal from the bytes](#a-refusal-from-the-bytes)); the worker retires such a "
         "job (`install-scripts`) instead of publishing it. In report mode the bytes are "
         "served and the finding is a would-deny, like the manifest's. The tarball is read on "
         "a thread beside the event loop, and a version whose bytes were read once and run "
         "nothing is not read again; contents that cannot be read are refused, among them a "
         "compression bomb (past 64 MiB unpacked, more than 100 bytes per compressed byte; "
         "past 512 MiB or 200,000 entries in any case: at most about a second of CPU).",
         _install_scripts, "install_scripts"),
    Rule((LICENSE, LICENSE_UNKNOWN), "`[license]` is present and its declared license (the "
         "manifest's `license`, or a legacy `licenses` array read as npm reads it), as SPDX "
         "reads the expression, matches `license.deny` or, where `license.allow` is not empty, "
         "is not on it (`license`): an `OR` is admitted when one side is, an `AND` when every "
         "side is; or it declares none, `UNLICENSED`, `SEE LICENSE IN <file>` or what is not "
         "an SPDX expression, and `license.unknown` is `deny` (the default) or `report` "
         "(`license-unknown`). At the first pull the tarball's own `package.json`, which npm "
         "installs, is read as the bytes stream: a license other than the manifest's is "
         "refused with both named. See [licenses.md](licenses.md).", _license, "license",
         _license_mode),
    Rule((MINIMUM_AGE,), "it was published less than `age.minimum` ago (from the packument's "
         "`time[version]`; **one day** where the rules say nothing about age, `minimum = "
         "\"0\"` turns it off), or it has no usable publish time and `age.missing_time` is "
         "`deny` (the default once `[age]` sets a minimum). Entries of `age.exempt` skip this "
         "rule, and so does a version that fixes an advisory (`advisories.fast_lane`).",
         _minimum_age, "age"),
    Rule((PROVENANCE_CONTINUITY,), "it has no provenance attestation while one of the "
         "previous `provenance.window` versions had one.",
         _takeover(check_provenance, lambda rules: rules.provenance), "provenance"),
    Rule((PUBLISHER_CHANGE,), "it was published by an account that published none of the "
         "previous `publisher.window` versions.",
         _takeover(check_publisher, lambda rules: rules.publisher), "publisher"),
    Rule((NEW_CAPABILITY,), "on by default: its code gains a capability the release before "
         "it did not have: at install, any (the network, processes, the environment, files "
         "outside the package, dynamic or native code...); at load, the network together with "
         "the environment or files outside the package, writes outside it (into the home "
         "directory apart), code decoded at run time, interception of globals, obfuscation, "
         "a loop at module scope with no way out; or its code that runs at load is gone "
         "(the entry missing or empty). Read from the bytes at the first "
         "pull; see [What a release's code can do](#what-a-releases-code-can-do).",
         _at_first_pull, "release"),
    Rule((YOUNG_PACKAGE_CAPABILITY,), "on by default: nothing vouches for it (no earlier "
         "release to compare with, or a package first published less than "
         "`release.young_package` ago, or one whose times establish no age) and its code can "
         "reach the network, run processes, read the environment or credentials files or "
         "cannot be read at install (a git, URL or path dependency's included), or at load "
         "run decoded code, intercept globals, write into the home directory, loop at "
         "module scope with no way out or send the environment or files over the network.",
         _at_first_pull, "release"),
    Rule((NEW_INSTALL_SCRIPT,), "`[release]`: its tarball or manifest runs code at install "
         "(a `preinstall`, `install` or `postinstall`, a `binding.gyp`, a bundled "
         "dependency's) that the previous version did not, or a hook both have now runs "
         "another command or a file whose bytes changed. Read from the bytes at the first "
         "pull; see [Release signals](#release-signals).", _at_first_pull, "release"),
    Rule((NEW_DEPENDENCY_YOUNG,), "`[release]`: it adds a package npm installs (a "
         "dependency, an optional one, a peer, an `npm:` alias's target), since the previous "
         "version, first published less than `release.young` ago (30 days) or missing from "
         "the public registry.", _at_first_pull, "release"),
    Rule((OBFUSCATED_CODE,), "`[release]`: a JavaScript file carries marks of obfuscation "
         "(a very long line, dense hex or unicode escapes, `_0x` identifiers, eval or "
         "Function over a decoded string, a large base64 literal) that the same file of the "
         "previous version did not.", _at_first_pull, "release"),
    Rule((TYPOSQUAT,), "`[release]`: its name is one edit from a widely used package or one "
         "the organisation installs often, was never installed here, and was first "
         "published less than `release.young` ago.", _at_first_pull, "release"),
    Rule((NEW_DEPENDENCY_OUTSIDE,), "`[release]`: a dependency new or changed since the "
         "previous version is fetched from a git repository, a URL or a path: outside any "
         "registry, and so outside the gate.", _at_first_pull, "release"),
    Rule((UNREADABLE_RELEASE,), "on by default: the release cannot be read whole because of "
         "its own shape (its tarball, or the previous version's, refused by the reader or "
         "over the bound; more new dependencies than are looked up): see [which causes are "
         "which](#release-signals-causes).", _at_first_pull, "release"),
    Rule((YOUNG_PACKAGE_INSTALL_SCRIPT,), "`[release]`: a release that runs code at "
         "install, whatever it can do, of a package first published less than "
         "`release.young_package` ago (30 days). See [A young package's install scripts]"
         "(#a-young-packages-install-scripts).", _at_first_pull, "release"),
)

_DENY_ROW = next(rule for rule in RULES if DENY_LIST in rule.names)
RULE_NAMES: tuple[str, ...] = tuple(name for rule in RULES for name in rule.names)
"""Stable names (metric labels, 403 bodies), in the order `evaluate` applies them."""
POLICY_RULES: frozenset[str] = frozenset(
    name for rule in RULES if rule.table is not None for name in rule.names)
"""The rules a report mode and an exception can reach."""
TABLE_OF: dict[str, str] = {name: rule.table for rule in RULES if rule.table is not None
                            for name in rule.names}


def evaluate(
    rules: Rules,
    name: str,
    version: str,
    manifest: Mapping[str, Any],
    published: str | None,
    now: datetime,
    *,
    context: Context | None = None,
    digests: tuple[Digest, ...] | None = None,
    integrity: str | None = None,
) -> Verdict:
    """Whether the public version `name@version` is admitted, and if not by which rule and why.

    `manifest` is the packument's `versions[version]`, `published` its `time[version]` (or None)
    and `now` the moment to measure release age against. `context` carries what the
    packument-wide rules read (history, registry keys); without it they see no history and no
    keys. `digests` are `digests_from_dist` of its `dist` when the caller has them already (the
    gate keeps them too), so they are not read twice; `integrity`, the bytes a waiver must
    name when not the strongest of them. Pure: no I/O, no clock, no logging.
    """
    dist = manifest.get("dist") if isinstance(manifest, Mapping) else None
    if not isinstance(dist, Mapping):
        best = None
    else:
        best = strongest(digests if digests is not None else digests_from_dist(dist))
    judged = Judged(name, version, manifest if isinstance(manifest, Mapping) else {},
                    published, now if now.tzinfo is not None else now.replace(tzinfo=UTC),
                    context, best, integrity)
    # sha1-only versions are admitted but flagged weak, unless a stronger floor is set
    return _settle(rules, judged, RULES, weak=best is not None and best.algorithm == "sha1")


def _settle(rules: Rules, judged: Judged, table: tuple[Rule, ...], *, weak: bool) -> Verdict:
    """The first denial of `table`'s rules that is in force: a policy rule's denial an
    exception lifts, or whose table is in report mode, is kept as such and the next rule
    runs; a version nothing denies is admitted with them."""
    reported: list[tuple[str, str]] = []
    excepted: list[str] = []
    changes: datetime | None = None
    for rule in table:
        verdict = rule.check(rules, judged)
        if verdict is None:
            continue
        if rule.table is None or verdict.rule is None:
            return verdict  # not policy: neither report mode nor an exception reaches it
        exception = rules.exception_for(verdict.rule, judged.subject, judged.now)
        mode = (rule.mode(rules, verdict.rule) if rule.mode is not None
                else rules.mode_of(rule.table))
        if exception is not None:
            excepted.append(f"{verdict.rule} lifted by {exception.describe()}")
            changes = _earlier(changes, exception.until)  # denied again when it ends
        elif mode == REPORT:
            reported.append((verdict.rule, verdict.reason or "denied"))
            changes = _earlier(changes, verdict.until)
        else:
            return verdict
    if not reported and not excepted and changes is None:
        return _ADMITTED_WEAK if weak else _ADMITTED
    return Verdict(True, None, None, weak=weak, until=changes, reported=tuple(reported),
                   excepted=tuple(excepted))


def _earlier(moment_: datetime | None, other: datetime | None) -> datetime | None:
    if other is None:
        return moment_
    return other if moment_ is None or other < moment_ else moment_


def scripts_blocked(rules: Rules, name: str, version: str) -> bool:
    """Whether the install-scripts rule holds `name@version` to running nothing at install: the
    tarball's own files are then checked too (`npm.tarscripts`, read as npm unpacks them), not
    only the manifest."""
    return rules.block_install_scripts and rules.install_scripts_allow.first_match(
        Subject(name, version), unparseable_matches=False) is None


def scripts_reported(rules: Rules) -> bool:
    """Whether the install-scripts rule is in report mode (its table's `mode`, else the
    file's): what the tarball scan finds is then a would-deny, the bytes served."""
    return rules.mode_of("install_scripts") == REPORT


def scan_finding(found: str, manifest: Mapping[str, Any]) -> str:
    """The reason the install-scripts rule gives for what the tarball scan found (`found`,
    `tarscripts.ScriptScan.finish`'s sentence). A version whose registry manifest declares
    install scripts is no manifest confusion, whatever the scan's sentence says ("which the
    registry's manifest does not show"): it runs code at install because npm reads that
    manifest. Reached in report mode, or past an exception, where those scripts were
    admitted; in enforce mode the manifest's scripts deny the version before any byte."""
    declared = _scripts_of(manifest)
    if not declared:
        return found
    return (f"it runs code at install ({', '.join(declared)}), as its registry manifest "
            "declares")


def deny_listed(rules: Rules, name: str, version: str, now: datetime,
                integrity: str = "") -> Verdict | None:
    """The deny list alone, for first-party versions: the organisation's own builds are not
    held to the public admission rules, but an operator's deny entry withdraws any version
    (in its mode, and past an exception, as for a public version: `integrity`, the bytes a
    waiver must name). None when nothing denies it or would."""
    judged = Judged(name, version, {}, None, now if now.tzinfo is not None
                    else now.replace(tzinfo=UTC), None, None, integrity)
    verdict = _settle(rules, judged, (_DENY_ROW,), weak=False)
    return verdict if verdict is not _ADMITTED else None


def needs_history(rules: Rules) -> bool:
    """Whether `evaluate` under these rules reads the packument's history."""
    return rules.provenance.on or rules.publisher.on


def rules_table() -> str:
    """The rules table of docs/serving.md, as markdown."""
    rows = [f"| {', '.join(f'`{n}`' for n in rule.names)} | {rule.denies} |" for rule in RULES]
    return "\n".join(["| rule | denies a version when |", "| --- | --- |", *rows])
