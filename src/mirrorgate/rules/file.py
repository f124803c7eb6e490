"""The rules file: TOML in, a compiled `Rules` out, or every problem named by its key.

Anything the file says that cannot be honoured exactly (an unknown table or key, a wrong type,
a bad duration, pattern or range) is refused, so a typo can never silently weaken the policy,
and every problem is listed, so one start-up attempt shows everything to fix.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from mirrorgate.advisories import AdvisoryFeed
from mirrorgate.errors import MirrorgateError
from mirrorgate.moments import moment
from mirrorgate.rules.advisory import AdvisoryRules, known_malware
from mirrorgate.rules.license import UNKNOWN_CHOICES, LicenseEntry, LicenseRule, parse_entry
from mirrorgate.rules.patterns import (
    PATTERN_EXAMPLES,
    PackagePattern,
    PatternList,
    parse_pattern,
    quoted,
)
from mirrorgate.rules.policy import (
    ALGORITHMS,
    DEFAULT_POLICY_NAME,
    DEFAULT_RULES,
    ENFORCE,
    MAX_MINIMUM_AGE,
    POLICY_NAME,
    RULE_MODES,
    RuleException,
    Rules,
    plural,
)
from mirrorgate.rules.releasetable import ACTIONS, DEFAULT_ACTIONS, RELEASE_SIGNALS, ReleaseRules
from mirrorgate.rules.signatures import SignatureRule
from mirrorgate.rules.table import POLICY_RULES
from mirrorgate.rules.takeover import MODES, SignalRule

__all__ = ["POLICY_TABLES_OVERRIDDEN", "RulesError", "load_rules", "parse_rules", "rules_text",
           "with_known_malware"]

_ZERO = timedelta(0)


class RulesError(MirrorgateError):
    """A rules file that cannot be honoured; one line per problem, each naming its TOML key."""

    def __init__(self, problems: list[str], source: str = "<rules>") -> None:
        super().__init__("\n".join(f"{source}: {problem}" for problem in problems))
        self.problems = problems
        self.source = source



_SCHEMA: dict[str, tuple[str, ...]] = {
    "integrity": ("minimum", "mode"),
    "age": ("minimum", "minimum_days", "missing_time", "exempt", "mode"),
    "deny": ("packages", "mode"),
    "allow": ("packages", "mode"),
    "install_scripts": ("block", "allow", "mode"),
    "advisories": ("source", "refresh", "malware", "severity", "unavailable", "max_age",
                   "ignore", "fast_lane", "mode"),
    "signatures": ("verify", "missing", "mode"),
    "provenance": ("continuity", "window", "quarantine", "allow", "mode"),
    "publisher": ("change", "window", "quarantine", "allow", "mode"),
    "release": ("new_capability", "young_package_capability", "new_install_script",
                "new_dependency_young", "obfuscated_code", "typosquat",
                "new_dependency_outside", "unreadable_release", "young_package_install_script",
                "young", "young_package", "quarantine", "allow", "unavailable", "mode"),
    "license": ("deny", "allow", "unknown", "mode"),
    "private": ("names", "merge_public"),
    "publish": ("names",),
}
_TOP_LEVEL = ("mode", "exception", "policy")
"""Keys outside the tables: the file's `mode`, its `[[exception]]` entries and its policy sets
(`[policy.NAME]`)."""
POLICY_TABLES_OVERRIDDEN = ("integrity", "age", "deny", "allow", "install_scripts", "advisories",
                            "signatures", "provenance", "publisher", "license")
"""The tables a policy set (`[policy.NAME.TABLE]`) may write over the default rules'."""
_NOT_PER_POLICY = {
    "release": "the release signals' verdicts are records of a version's bytes, one per version "
               "for every client; set [release] once, for all",
    "private": "which names are first-party is a fact about a name, the same for every client",
    "publish": "who may publish is the tokens file's publish: grant, per client",
    "exception": "the file's [[exception]] entries and the waivers apply to every policy set",
}
_EXCEPTION_KEYS = ("package", "until", "reason", "by", "rules")
_ADVISORY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
_SEVERITY_CHOICES = ("low", "medium", "high", "critical", "none")
_DURATION = re.compile(r"([0-9]{1,9})\s*([mhdw])")
_UNITS: dict[str, tuple[int, str]] = {
    "m": (60, "minute"),
    "h": (3600, "hour"),
    "d": (86400, "day"),
    "w": (7 * 86400, "week"),
}


def _toml_type(value: object) -> str:
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    )
    for kind, label in kinds:
        if isinstance(value, kind):
            return label
    return "a date or time"


def _suggest(word: str, choices: tuple[str, ...], shape: str = "{}") -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {shape.format(close[0])}?)" if close else ""


def _one_of(choices: tuple[str, ...]) -> str:
    shown = [quoted(choice) for choice in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


class _Reader:
    """Reads one parsed TOML document, collecting every problem instead of stopping at one."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.problems: list[str] = []

    def problem(self, key: str, text: str) -> None:
        self.problems.append(f"{key}: {text}")

    def tables(self) -> dict[str, dict[str, Any]]:
        tables: dict[str, dict[str, Any]] = {}
        known = tuple(_SCHEMA)
        listing = ", ".join(f"[{name}]" for name in known)
        for key, value in self.document.items():
            if key in _TOP_LEVEL:
                continue
            if key not in _SCHEMA:
                if isinstance(value, dict):
                    self.problem(f"[{key}]", f"unknown table{_suggest(key, known, '[{}]')}; "
                                 f"the tables are {listing}")
                else:
                    self.problem(key, f"unknown top-level key; rules live in the tables "
                                 f"{listing}")
                continue
            if not isinstance(value, dict):
                self.problem(key, f"should be a table ([{key}]), got {_toml_type(value)}")
                continue
            allowed = _SCHEMA[key]
            for inner in value:
                if inner not in allowed:
                    self.problem(f"{key}.{inner}", f"unknown key{_suggest(inner, allowed)}; "
                                 f"[{key}] takes {', '.join(allowed)}")
            tables[key] = value
        return tables

    def string(self, key: str, value: object, allowed: tuple[str, ...]) -> str | None:
        shown = _one_of(allowed)
        if not isinstance(value, str):
            self.problem(key, f"should be a string, got {_toml_type(value)}; write {shown}")
            return None
        if value.strip().lower() not in allowed:
            self.problem(key, f"{quoted(value)} is not one of {shown}")
            return None
        return value.strip().lower()

    def boolean(self, key: str, value: object) -> bool | None:
        if not isinstance(value, bool):
            self.problem(key, f"should be true or false, got {_toml_type(value)}")
            return None
        return value

    def patterns(self, key: str, value: object) -> PatternList:
        if not isinstance(value, list):
            self.problem(key, f"should be an array of patterns such as [{PATTERN_EXAMPLES}], "
                         f"got {_toml_type(value)}")
            return PatternList()
        compiled: list[PackagePattern] = []
        for index, item in enumerate(value):
            where = f"{key}[{index}]"
            if not isinstance(item, str):
                self.problem(where, f"should be a string pattern such as {PATTERN_EXAMPLES}, "
                             f"got {_toml_type(item)}")
                continue
            try:
                compiled.append(parse_pattern(item))
            except ValueError as error:
                self.problem(where, str(error))
        return PatternList.of(tuple(compiled))

    def names(self, key: str, value: object) -> PatternList:
        """Patterns naming packages, never versions: ownership is a property of a name."""
        listed = self.patterns(key, value)
        for pattern in listed.patterns:
            if pattern.range is not None:
                self.problem(key, f"{quoted(pattern.text)} has a version range; "
                             f"[{key.split('.')[0]}] lists name whole packages, like "
                             "\"@acme/*\", \"acme-*\" or \"acme-utils\"")
        return listed

    def duration(self, key: str, value: object) -> tuple[timedelta, str] | None:
        example = 'write a whole number and a unit, like "90m", "36h", "3d" or "2w"'
        if not isinstance(value, str):
            self.problem(key, f"should be a string, got {_toml_type(value)}; {example}")
            return None
        if value.strip() == "0":  # off, said explicitly
            return _ZERO, "off"
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            self.problem(key, f"{quoted(value)} is not a duration; {example}")
            return None
        count = int(match.group(1))
        seconds, unit = _UNITS[match.group(2)]
        if count * seconds > MAX_MINIMUM_AGE.total_seconds():
            self.too_long(key)
            return None
        return timedelta(seconds=count * seconds), plural(count, unit)

    def days(self, key: str, value: object) -> tuple[timedelta, str] | None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            shown = repr(value) if numeric else _toml_type(value)
            self.problem(key, f"should be a whole number of days (0 or more), got {shown}; "
                         "e.g. minimum_days = 3")
            return None
        if value > MAX_MINIMUM_AGE.days:
            self.too_long(key)
            return None
        return timedelta(days=value), plural(value, "day")

    def signal(self, table: str, mode_key: str, values: dict[str, Any],
               default: SignalRule) -> SignalRule:
        """A takeover signal's table: its mode under `mode_key` (required: a signal is asked
        for by name, never switched on by an empty table), window, quarantine, allow."""
        settings: dict[str, Any] = {}
        if mode_key not in values:
            self.problem(f"{table}.{mode_key}", f"is required in [{table}]; write {mode_key} = "
                         f"{_one_of(MODES)}")
        else:
            settings["mode"] = self.string(f"{table}.{mode_key}", values[mode_key], MODES)
        if "window" in values:
            window = values["window"]
            if not isinstance(window, int) or isinstance(window, bool) or not 1 <= window <= 1000:
                self.problem(f"{table}.window", "should be a whole number of versions from 1 to "
                             f"1000, got {window!r}; e.g. window = {default.window}")
            else:
                settings["window"] = window
        if "quarantine" in values:
            parsed = self.duration(f"{table}.quarantine", values["quarantine"])
            if parsed is not None:
                settings["quarantine"], settings["quarantine_text"] = parsed
        if "allow" in values:
            settings["allow"] = self.patterns(f"{table}.allow", values["allow"])
        if settings.get("mode") is None:
            settings.pop("mode", None)
        return replace(default, **settings)

    def too_long(self, key: str) -> None:
        if not key.startswith("age."):
            self.problem(key, f"is longer than {MAX_MINIMUM_AGE.days} days; set a shorter "
                         "quarantine, or deny instead")
            return
        self.problem(key, f"is longer than {MAX_MINIMUM_AGE.days} days, which would deny "
                     "every version; set a shorter minimum or leave [age] out")


def _document(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RulesError(
            [f"is not valid TOML ({error}); see docs/serving.md#admission-rules for "
             "the format"],
            source,
        ) from None


def _values(read: _Reader, source: str) -> dict[str, Any]:
    """The `Rules` fields a document sets, each problem noted in `read`."""
    tables = read.tables()
    values: dict[str, Any] = {}

    integrity = tables.get("integrity", {})
    if "minimum" in integrity:
        minimum = read.string("integrity.minimum", integrity["minimum"], ALGORITHMS)
        if minimum is not None:
            values["integrity_minimum"] = minimum

    if "age" in tables:
        age = tables["age"]
        parsed: tuple[timedelta, str] | None = None
        if "minimum" in age and "minimum_days" in age:
            read.problem("age.minimum_days", "set either age.minimum or age.minimum_days, "
                         "not both")
        elif "minimum" in age:
            parsed = read.duration("age.minimum", age["minimum"])
        elif "minimum_days" in age:
            parsed = read.days("age.minimum_days", age["minimum_days"])
        if parsed is not None:
            values["minimum_age"], text_form = parsed
            values["minimum_age_text"] = text_form if parsed[0] > _ZERO else "off"
            values["age_is_default"] = False
            values["missing_time_allowed"] = False  # an age asked for: an unknown one is denied
        if "missing_time" in age:
            choice = read.string("age.missing_time", age["missing_time"], ("deny", "allow"))
            values["missing_time_allowed"] = choice == "allow"
        if "exempt" in age:
            values["age_exempt"] = read.patterns("age.exempt", age["exempt"])

    if "packages" in tables.get("deny", {}):
        values["deny"] = read.patterns("deny.packages", tables["deny"]["packages"])
    if "packages" in tables.get("allow", {}):
        values["allow"] = read.patterns("allow.packages", tables["allow"]["packages"])

    if "install_scripts" in tables:
        scripts = tables["install_scripts"]
        # Writing the table is asking for the block; `block = false` keeps it and turns it off.
        block = read.boolean("install_scripts.block", scripts.get("block", True))
        values["block_install_scripts"] = bool(block)
        if "allow" in scripts:
            values["install_scripts_allow"] = read.patterns(
                "install_scripts.allow", scripts["allow"]
            )

    if "advisories" in tables:
        values["advisories"] = _advisories(read, tables["advisories"], source)
    if "signatures" in tables:
        signing = tables["signatures"]
        # Writing the table is asking for verification; `verify = false` keeps it and turns it off.
        verify = read.boolean("signatures.verify", signing.get("verify", True))
        missing = read.string("signatures.missing", signing.get("missing", "admit"),
                              ("admit", "deny"))
        values["signatures"] = SignatureRule(bool(verify), "deny" if missing == "deny"
                                             else "admit")
    for table, mode_key in (("provenance", "continuity"), ("publisher", "change")):
        if table in tables:
            values[table] = read.signal(table, mode_key, tables[table],
                                        getattr(DEFAULT_RULES, table))
    if "release" in tables:
        values["release"] = _release(read, tables["release"])
    if "license" in tables:
        values["license"] = _license(read, tables["license"])
    private = tables.get("private", {})
    for key, attribute in (("names", "owned"), ("merge_public", "merge_public")):
        if key in private:
            values[attribute] = read.names(f"private.{key}", private[key])

    if "names" in tables.get("publish", {}):
        values["publishable"] = read.names("publish.names", tables["publish"]["names"])

    if "mode" in read.document:
        values["mode"] = read.string("mode", read.document["mode"], RULE_MODES) or ENFORCE
    values["table_modes"] = {table: mode for table, settings in tables.items()
                             if "mode" in settings and (mode := read.string(
                                 f"{table}.mode", settings["mode"], RULE_MODES)) is not None}
    values["exceptions"] = _exceptions(read, read.document.get("exception", []))
    return values


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """The policy a TOML rules document describes, with its policy sets (`[policy.NAME]`);
    raises RulesError naming every bad key."""
    document = _document(text, source)
    read = _Reader(document)
    values = _values(read, source)
    overlays = _policy_overlays(read, document)
    compiled: dict[str, dict[str, Any]] = {}
    for name, overlay in overlays.items():
        inner = _Reader(_overlaid(document, overlay))
        compiled[name] = _values(inner, source)
        # a problem of the default rules shows once, not again under every policy set
        read.problems += [f"policy.{name}.{problem}" for problem in inner.problems
                          if problem not in read.problems]
    if read.problems:
        raise RulesError(read.problems, source)
    rules = Rules(source=source, **values)
    return replace(rules, policies={name: _policy_rules(rules, name, found)
                                    for name, found in compiled.items()})


def _overlaid(document: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """The default rules' document with a policy set's tables laid over it, key by key: what
    the policy's table writes wins, what it does not is inherited."""
    merged = {key: value for key, value in document.items() if key != "policy"}
    for key, value in overlay.items():
        if not isinstance(value, dict):
            merged[key] = value  # the policy's own `mode`
            continue
        inherited = dict(merged[key]) if isinstance(merged.get(key), dict) else {}
        if key == "age" and value.keys() & {"minimum", "minimum_days"}:
            # the two spellings of one minimum: the policy's replaces the default's either way
            inherited.pop("minimum", None)
            inherited.pop("minimum_days", None)
        merged[key] = {**inherited, **value}
    return merged


def _policy_overlays(read: _Reader, document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The `[policy.NAME]` tables, each checked for what a policy set may override."""
    found = document.get("policy", {})
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        read.problem("policy", "should hold [policy.NAME] tables, e.g. [policy.payments.age] "
                     'minimum = "7d"')
        return {}
    overlays: dict[str, dict[str, Any]] = {}
    for name, overlay in found.items():
        where = f"policy.{name}"
        if POLICY_NAME.fullmatch(name) is None or name == DEFAULT_POLICY_NAME:
            read.problem(where, f"{quoted(name[:60])} is not a usable policy set name: 1 to 40 "
                         "lowercase letters, digits, `-` or `_`, starting with a letter or "
                         f"digit, and not {quoted(DEFAULT_POLICY_NAME)} (the rules without a "
                         "policy set)")
            continue
        usable = True
        for key, value in overlay.items():
            if key in _NOT_PER_POLICY:
                read.problem(f"{where}.{key}", f"cannot be set per policy set: "
                             f"{_NOT_PER_POLICY[key]}")
                usable = False
            elif key == "mode":
                continue
            elif key not in POLICY_TABLES_OVERRIDDEN:
                read.problem(f"{where}.{key}", f"unknown{_suggest(key, POLICY_TABLES_OVERRIDDEN)}"
                             f"; a policy set overrides {', '.join(POLICY_TABLES_OVERRIDDEN)} "
                             "and mode")
                usable = False
            elif not isinstance(value, dict):
                read.problem(f"{where}.{key}", f"should be a table ([{where}.{key}]), got "
                             f"{_toml_type(value)}")
                usable = False
        advisories = overlay.get("advisories")
        if isinstance(advisories, dict):
            if not isinstance(document.get("advisories"), dict):
                read.problem(f"{where}.advisories", "adjusts the advisory rules, which the file "
                             "does not turn on: write [advisories] with its source first")
                usable = False
            for key in ("source", "refresh"):
                if key in advisories:
                    read.problem(f"{where}.advisories.{key}", "one advisory feed serves every "
                                 f"policy set: set {key} in [advisories]")
                    usable = False
        if usable:
            overlays[name] = overlay
    return overlays


def _policy_rules(rules: Rules, name: str, values: dict[str, Any]) -> Rules:
    """A policy set's compiled rules: its release signals are the default's (their verdicts
    are records of a version's bytes, one per version), and so is its advisory feed."""
    modes = {**values.pop("table_modes"), "release": rules.mode_of("release")}
    found = Rules(source=rules.source, policy_name=name, table_modes=modes, **values)
    if found.advisories is not None and rules.advisories is not None:
        found = replace(found, advisories=replace(found.advisories,
                                                  feed=rules.advisories.feed))
    return found


def _release(read: _Reader, table: dict[str, Any]) -> ReleaseRules:
    """The `[release]` table. Writing it asks for the signals: each one it does not name is
    `quarantine`; `"off"` turns one off."""
    settings: dict[str, Any] = {}
    actions: dict[str, str] = {}
    for signal in RELEASE_SIGNALS:
        key = signal.replace("-", "_")
        default = DEFAULT_ACTIONS.get(signal, "quarantine")
        action = read.string(f"release.{key}", table.get(key, default), ACTIONS)
        actions[signal] = action or default
    settings["actions"] = actions
    for key in ("young", "young_package", "quarantine"):
        if key in table:
            parsed = read.duration(f"release.{key}", table[key])
            if parsed is not None:
                settings[key], settings[f"{key}_text"] = parsed
    if "allow" in table:
        settings["allow"] = read.patterns("release.allow", table["allow"])
    if "unavailable" in table:
        settings["unavailable"] = read.string("release.unavailable", table["unavailable"],
                                              ("admit", "deny")) or "admit"
    return ReleaseRules(**settings)


def _license(read: _Reader, table: dict[str, Any]) -> LicenseRule:
    """The `[license]` table. Writing it asks for the rule: with no list it refuses only what
    `unknown` says (a version whose license cannot be read as SPDX)."""
    lists: dict[str, tuple[LicenseEntry, ...]] = {}
    for key in ("deny", "allow"):
        value = table.get(key, [])
        if not isinstance(value, list):
            read.problem(f"license.{key}", 'should be an array of SPDX identifiers such as '
                         f'["GPL-*", "AGPL-3.0-only"], got {_toml_type(value)}')
            continue
        entries: list[LicenseEntry] = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                read.problem(f"license.{key}[{index}]", "should be a string such as \"MIT\", "
                             f"got {_toml_type(item)}")
                continue
            try:
                entries.append(parse_entry(item))
            except ValueError as error:
                read.problem(f"license.{key}[{index}]", str(error))
        lists[key] = tuple(entries)
    unknown = read.string("license.unknown", table.get("unknown", "deny"), UNKNOWN_CHOICES)
    return LicenseRule(True, lists.get("deny", ()), lists.get("allow", ()), unknown or "deny")


def _exceptions(read: _Reader, entries: object) -> tuple[RuleException, ...]:
    """The `[[exception]]` entries: each names a package, an end, a reason and who asked;
    the rules it lifts default to every policy rule."""
    example = ('[[exception]]\npackage = "left-pad@1.3.1"\nuntil = 2027-01-31\n'
               'reason = "the fix for CVE-2026-1234"\nby = "alice"')
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        read.problem("exception", f"should be [[exception]] tables, like\n{example}")
        return ()
    found: list[RuleException] = []
    for index, entry in enumerate(entries):
        where = f"exception[{index}]"
        for key in entry:
            if key not in _EXCEPTION_KEYS:
                read.problem(f"{where}.{key}", f"unknown key{_suggest(key, _EXCEPTION_KEYS)}; "
                             f"[[exception]] takes {', '.join(_EXCEPTION_KEYS)}")
        missing = [key for key in ("package", "until", "reason", "by") if key not in entry]
        for key in missing:
            read.problem(f"{where}.{key}", "is required: an exception says which package, "
                         "until when, why and who asked for it")
        if missing:
            continue
        package = read.patterns(f"{where}.package", [entry["package"]])
        until = _moment(read, f"{where}.until", entry["until"])
        reason, by = entry["reason"], entry["by"]
        for key, text in (("reason", reason), ("by", by)):
            if not isinstance(text, str) or not text.strip():
                read.problem(f"{where}.{key}", f"should be a non-empty string, got "
                             f"{_toml_type(text)}")
        lifted: frozenset[str] | None = None
        if "rules" in entry:
            named = entry["rules"]
            if not isinstance(named, list) or not named or any(
                    not isinstance(rule, str) or rule not in POLICY_RULES for rule in named):
                read.problem(f"{where}.rules", "should be a list of the rules it lifts, from "
                             f"{', '.join(sorted(POLICY_RULES))}")
            else:
                lifted = frozenset(named)
        if (until is not None and package.patterns and isinstance(reason, str) and reason
                and isinstance(by, str) and by):
            found.append(RuleException(package, until, reason.strip(), by.strip(), lifted))
    return tuple(found)


def _moment(read: _Reader, key: str, value: object) -> datetime | None:
    """An RFC 3339 time or a date (midnight UTC) as TOML writes them, or a string of one."""
    if isinstance(value, str):
        when = moment(value)
        if when is None:
            read.problem(key, f"{quoted(value)} is not a time; write a date (2027-01-31) or "
                         "an RFC 3339 time (2027-01-31T12:00:00Z)")
        return when
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    read.problem(key, f"should be a date or a time, got {_toml_type(value)}; e.g. "
                 "until = 2027-01-31")
    return None


def _advisories(read: _Reader, table: dict[str, Any], rules_source: str) -> AdvisoryRules | None:
    """The `[advisories]` table; a relative source path is read beside the rules file."""
    where = table.get("source")
    location: str | None = None
    if not isinstance(where, str) or not where.strip():
        read.problem("advisories.source", 'is required in [advisories]: a path to the npm OSV '
                     'export (a zip or a directory), or an https URL of the zip, e.g. '
                     'source = "/var/lib/mirrorgate/osv-npm.zip"')
    elif "://" in where:
        if not where.startswith("https://"):
            read.problem("advisories.source", f"{quoted(where)} is a URL but not https; "
                         "advisories are fetched over https only")
        else:
            location = where.strip()
    else:
        path = Path(where.strip()).expanduser()
        if not path.is_absolute() and not rules_source.startswith("<"):
            path = Path(rules_source).parent / path
        location = str(path)
    refresh = read.duration("advisories.refresh", table.get("refresh", "1h"))
    max_age = read.duration("advisories.max_age", table.get("max_age", "3d"))
    malware = read.string("advisories.malware", table.get("malware", "deny"), ("deny", "admit"))
    severity = read.string("advisories.severity", table.get("severity", "high"),
                           _SEVERITY_CHOICES)
    unavailable = read.string("advisories.unavailable", table.get("unavailable", "admit"),
                              ("admit", "deny"))
    fast = read.boolean("advisories.fast_lane", table.get("fast_lane", True))
    ignore: set[str] = set()
    raw_ignore = table.get("ignore", [])
    if not isinstance(raw_ignore, list):
        read.problem("advisories.ignore", "should be an array of advisory ids such as "
                     f'["GHSA-xxxx-xxxx-xxxx"], got {_toml_type(raw_ignore)}')
    else:
        for position, item in enumerate(raw_ignore):
            if not isinstance(item, str) or _ADVISORY_ID.fullmatch(item.strip()) is None:
                read.problem(f"advisories.ignore[{position}]", "should be an advisory id such "
                             'as "GHSA-xxxx-xxxx-xxxx", "CVE-2021-23337" or "MAL-2024-1"')
            else:
                ignore.add(item.strip())
    for key, parsed in (("refresh", refresh), ("max_age", max_age)):
        if parsed is not None and parsed[0] <= _ZERO:
            read.problem(f"advisories.{key}", "should be longer than zero, e.g. \"1h\"")
    if (location is None or refresh is None or max_age is None or malware is None
            or severity is None or unavailable is None or fast is None):
        return None
    return AdvisoryRules(
        source=location, refresh=refresh[0], refresh_text=refresh[1],
        malware_deny=malware == "deny", severity=severity,
        unavailable_deny=unavailable == "deny", max_age=max_age[0], max_age_text=max_age[1],
        ignore=frozenset(ignore), fast_lane=fast,
        feed=AdvisoryFeed(location, refresh[0]))


def load_rules(path: Path | None, malware_feed: str | None = None) -> Rules:
    """The policy in the rules file at `path`; None means `DEFAULT_RULES`; either with the
    known-malware feed `malware_feed` (MIRRORGATE_MALWARE_FEED) where it names no source.

    A file that cannot be read or honoured raises RulesError; the caller refuses to start.
    """
    rules = DEFAULT_RULES if path is None else parse_rules(rules_text(path), str(path))
    return with_known_malware(rules, malware_feed)


def with_known_malware(rules: Rules, malware_feed: str | None) -> Rules:
    """`rules` with the default known-malware feed, unless an `[advisories]` table chose a
    source of its own (whose `malware` setting then decides) or the feed is off (None); its
    policy sets (`[policy.NAME]`) share the one feed, as they share a table's."""
    if rules.advisories is not None or malware_feed is None:
        return rules
    default = known_malware(malware_feed)
    return replace(rules, advisories=default, policies={
        name: policy if policy.advisories is not None else replace(policy, advisories=default)
        for name, policy in rules.policies.items()})


def rules_text(path: Path) -> str:
    """The rules file's text; raises RulesError saying why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RulesError(["is not UTF-8 text; a rules file is TOML"], str(path)) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RulesError(
            [f"cannot read the rules file ({reason}); point MIRRORGATE_RULES_FILE at a "
             "readable TOML file"],
            str(path),
        ) from None
