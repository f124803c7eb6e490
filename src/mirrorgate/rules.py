"""The admission rules: which public versions the proxy admits, and why it denies the others.

The serve path evaluates every public version of a packument when it (re)builds a cache entry,
so evaluation is pure (no I/O, no clock of its own: `now` is passed in), deterministic and
cheap: every pattern and range is compiled once, when the rules file is loaded, and lookups
go by package name or scope. Private versions are trusted and never evaluated. Decisions:

- Six rules with stable names (metric labels, 403 bodies), evaluated in this order, the first
  denial winning: `integrity-presence` (always on: a version with no digest mirrorgate can
  verify is denied whatever the file says), `digest-floor` (sha1-only versions are admitted but
  flagged weak unless a stronger floor is set), `deny-list`, `allow-list` (a non-empty allow
  list admits only what it names), `install-scripts`, `minimum-age`.
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
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mirrorgate.mirror import digests_from_dist, strongest
from mirrorgate.semver import INVALID_RANGE, SemverRange, Version, parse_range, parse_version

__all__ = [
    "ALGORITHMS",
    "ALLOW_LIST",
    "DEFAULT_RULES",
    "DENY_LIST",
    "DIGEST_FLOOR",
    "INSTALL_SCRIPTS",
    "INTEGRITY_PRESENCE",
    "MINIMUM_AGE",
    "RULE_NAMES",
    "PackagePattern",
    "PatternList",
    "Rules",
    "RulesError",
    "Verdict",
    "describe",
    "evaluate",
    "load_rules",
    "parse_pattern",
    "parse_rules",
]

INTEGRITY_PRESENCE = "integrity-presence"
DIGEST_FLOOR = "digest-floor"
DENY_LIST = "deny-list"
ALLOW_LIST = "allow-list"
INSTALL_SCRIPTS = "install-scripts"
MINIMUM_AGE = "minimum-age"
RULE_NAMES: tuple[str, ...] = (
    INTEGRITY_PRESENCE,
    DIGEST_FLOOR,
    DENY_LIST,
    ALLOW_LIST,
    INSTALL_SCRIPTS,
    MINIMUM_AGE,
)

ALGORITHMS: tuple[str, ...] = ("sha1", "sha256", "sha384", "sha512")  # weakest first
_RANK = {algorithm: rank for rank, algorithm in enumerate(ALGORITHMS)}
INSTALL_SCRIPT_KEYS: tuple[str, ...] = ("preinstall", "install", "postinstall")
MAX_NAME_LENGTH = 214  # npm's limit on a package name, scope included
MAX_MINIMUM_AGE = timedelta(days=3650)
_ZERO = timedelta(0)


class RulesError(Exception):
    """A rules file that cannot be honoured; one line per problem, each naming its TOML key."""

    def __init__(self, problems: list[str], source: str = "<rules>") -> None:
        super().__init__("\n".join(f"{source}: {problem}" for problem in problems))
        self.problems = problems
        self.source = source


# --- patterns ---------------------------------------------------------------------------------

_PART = r"[A-Za-z0-9~-][A-Za-z0-9._~-]*"
_NAME = re.compile(rf"(?:@{_PART}/)?{_PART}")
_SCOPE_WILDCARD = re.compile(rf"(@{_PART})/\*")
_PATTERN_EXAMPLES = '"left-pad", "@acme/*" or "lodash@<4.17.21"'


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PackagePattern:
    """One entry of a package list: an exact name or a whole scope, optionally a range."""

    text: str
    name: str | None  # the exact package name; None for a scope wildcard
    scope: str | None  # "@acme" for "@acme/*"; None for an exact name
    range: SemverRange | None


def parse_pattern(text: str) -> PackagePattern:
    """`text` as a pattern; raises ValueError with a sentence saying what to write instead."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"is empty; write a pattern such as {_PATTERN_EXAMPLES}")
    at = stripped.find("@", 1)
    target, range_text = (stripped, None) if at == -1 else (stripped[:at], stripped[at + 1 :])
    scope_match = _SCOPE_WILDCARD.fullmatch(target)
    name: str | None = None
    scope: str | None = None
    if scope_match is not None:
        scope = scope_match.group(1)
    elif _NAME.fullmatch(target) is not None and len(target) <= MAX_NAME_LENGTH:
        name = target
    elif "*" in target:
        raise ValueError(
            f"{_quoted(text)} is not a pattern: only a whole scope can be a wildcard, "
            'like "@acme/*"'
        )
    else:
        raise ValueError(
            f"{_quoted(text)} is not a package name, a scope wildcard or a name and range; "
            f"write it like {_PATTERN_EXAMPLES}"
        )
    compiled: SemverRange | None = None
    if range_text is not None:
        example = _quoted(f"{target}@<4.17.21")
        if not range_text.strip():
            raise ValueError(
                f"{_quoted(text)} has an @ but no range after it; write it like {example}, "
                f"or {_quoted(target)} for every version"
            )
        try:
            compiled = parse_range(range_text.strip())
        except ValueError as error:
            problem = str(error)
            if problem == INVALID_RANGE:
                raise ValueError(f"{_quoted(text)} {problem}; write it like {example}") from None
            raise ValueError(
                f"{_quoted(text)} is not a usable semver range: "
                f"{_quoted(range_text.strip())} {problem}; write it like {example}"
            ) from None
    return PackagePattern(stripped, name, scope, compiled)


class _Subject:
    """The version under evaluation, its semver form parsed at most once and only if needed."""

    __slots__ = ("_parsed", "_tried", "name", "version")

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self._parsed: Version | None = None
        self._tried = False

    def parsed(self) -> Version | None:
        if not self._tried:
            self._parsed = parse_version(self.version)
            self._tried = True
        return self._parsed


def _scope_of(name: str) -> str | None:
    if name.startswith("@"):
        slash = name.find("/")
        if slash > 1:
            return name[:slash]
    return None


@dataclass(frozen=True)
class PatternList:
    """A compiled package list, indexed by exact name and by scope."""

    patterns: tuple[PackagePattern, ...] = ()
    _by_name: Mapping[str, tuple[PackagePattern, ...]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    _by_scope: Mapping[str, tuple[PackagePattern, ...]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    @classmethod
    def of(cls, patterns: tuple[PackagePattern, ...]) -> PatternList:
        by_name: dict[str, list[PackagePattern]] = {}
        by_scope: dict[str, list[PackagePattern]] = {}
        for pattern in patterns:
            if pattern.name is not None:
                by_name.setdefault(pattern.name, []).append(pattern)
            elif pattern.scope is not None:
                by_scope.setdefault(pattern.scope, []).append(pattern)
        return cls(
            patterns,
            {key: tuple(value) for key, value in by_name.items()},
            {key: tuple(value) for key, value in by_scope.items()},
        )

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def texts(self) -> list[str]:
        return [pattern.text for pattern in self.patterns]

    def first_match(self, subject: _Subject, *, unparseable_matches: bool) -> PackagePattern | None:
        """The first entry covering the subject; a ranged entry covers a non-semver version
        only when `unparseable_matches` says so."""
        candidates = self._by_name.get(subject.name, ())
        scope = _scope_of(subject.name)
        if scope is not None:
            candidates += self._by_scope.get(scope, ())
        for pattern in candidates:
            if pattern.range is None:
                return pattern
            version = subject.parsed()
            if version is None:
                if unparseable_matches:
                    return pattern
            elif pattern.range.includes(version):
                return pattern
        return None


# --- the compiled policy ----------------------------------------------------------------------


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
    source: str = field(default="<defaults>", compare=False)


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one version: admitted, or denied by `rule` for `reason`."""

    admitted: bool
    rule: str | None
    reason: str | None
    weak: bool = False


_ADMITTED = Verdict(True, None, None)
_ADMITTED_WEAK = Verdict(True, None, None, weak=True)


def _deny(rule: str, reason: str) -> Verdict:
    return Verdict(False, rule, reason)


def _install_scripts(manifest: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    scripts = manifest.get("scripts")
    if isinstance(scripts, Mapping):
        found = [key for key in INSTALL_SCRIPT_KEYS if scripts.get(key) not in (None, "")]
    if not found and manifest.get("hasInstallScript") not in (None, False):
        found = ["hasInstallScript"]
    return found


def _published_at(published: object) -> datetime | None:
    if not isinstance(published, str) or len(published) > 64:
        return None
    try:
        when = datetime.fromisoformat(published.strip())
        if when.tzinfo is None:
            return when.replace(tzinfo=UTC)
        return when.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


_PRINTABLE = re.compile(r"[ -~]{1,200}")


def _label(name: str, version: str) -> str:
    """`name@version` for a reason a terminal will print: the version comes from an upstream
    packument, so anything odd in it (control characters, escapes, great length) is escaped."""
    label = f"{name}@{version}"
    if _PRINTABLE.fullmatch(label):
        return label
    shown = json.dumps(label[:200])[1:-1]
    return shown + ("..." if len(label) > 200 else "")


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return _plural(seconds, "second")
    if seconds < 2 * 3600:
        return _plural(seconds // 60, "minute")
    if seconds < 2 * 86400:
        return _plural(seconds // 3600, "hour")
    return _plural(seconds // 86400, "day")


def _age_reason(when: datetime, age: timedelta, rules: Rules) -> str:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    relative = f"{_span(age)} ago" if age >= _ZERO else f"{_span(-age)} in the future"
    return f"published {stamp}, {relative}; the minimum release age is {rules.minimum_age_text}"


def evaluate(
    rules: Rules,
    name: str,
    version: str,
    manifest: Mapping[str, Any],
    published: str | None,
    now: datetime,
) -> Verdict:
    """Whether the public version `name@version` is admitted, and if not by which rule and why.

    `manifest` is the packument's `versions[version]`, `published` its `time[version]` (or None)
    and `now` the moment to measure release age against. Pure: no I/O, no clock, no logging.
    """
    is_mapping = isinstance(manifest, Mapping)
    dist = manifest.get("dist") if is_mapping else None
    best = strongest(digests_from_dist(dist)) if isinstance(dist, Mapping) else None
    if best is None:
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
    admitted = _ADMITTED_WEAK if best.algorithm == "sha1" else _ADMITTED

    subject = _Subject(name, version)
    if rules.deny:
        hit = rules.deny.first_match(subject, unparseable_matches=True)
        if hit is not None:
            entry = _quoted(hit.text)
            if hit.range is not None and subject.parsed() is None:
                reason = (
                    f"{_label(name, version)} is not a valid semver version, so it cannot be "
                    f"shown to be outside the deny list entry {entry}"
                )
            else:
                reason = f"{_label(name, version)} matches the deny list entry {entry}"
            return _deny(DENY_LIST, reason)
    if rules.allow and rules.allow.first_match(subject, unparseable_matches=False) is None:
        return _deny(
            ALLOW_LIST,
            f"{_label(name, version)} matches no allow list entry, and only versions on the "
            "allow list are admitted",
        )
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
    ):
        when = _published_at(published)
        if when is None:
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
    return admitted


def describe(rules: Rules) -> dict[str, Any]:
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
    }


# --- the file ---------------------------------------------------------------------------------

_SCHEMA: dict[str, tuple[str, ...]] = {
    "integrity": ("minimum",),
    "age": ("minimum", "minimum_days", "missing_time", "exempt"),
    "deny": ("packages",),
    "allow": ("packages",),
    "install_scripts": ("block", "allow"),
}
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
    quoted = [_quoted(choice) for choice in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


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
            self.problem(key, f"{_quoted(value)} is not one of {shown}")
            return None
        return value.strip().lower()

    def boolean(self, key: str, value: object) -> bool | None:
        if not isinstance(value, bool):
            self.problem(key, f"should be true or false, got {_toml_type(value)}")
            return None
        return value

    def patterns(self, key: str, value: object) -> PatternList:
        if not isinstance(value, list):
            self.problem(key, f"should be an array of patterns such as [{_PATTERN_EXAMPLES}], "
                         f"got {_toml_type(value)}")
            return PatternList()
        compiled: list[PackagePattern] = []
        for index, item in enumerate(value):
            where = f"{key}[{index}]"
            if not isinstance(item, str):
                self.problem(where, f"should be a string pattern such as {_PATTERN_EXAMPLES}, "
                             f"got {_toml_type(item)}")
                continue
            try:
                compiled.append(parse_pattern(item))
            except ValueError as error:
                self.problem(where, str(error))
        return PatternList.of(tuple(compiled))

    def duration(self, key: str, value: object) -> tuple[timedelta, str] | None:
        example = 'write a whole number and a unit, like "90m", "36h", "3d" or "2w"'
        if not isinstance(value, str):
            self.problem(key, f"should be a string, got {_toml_type(value)}; {example}")
            return None
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            self.problem(key, f"{_quoted(value)} is not a duration; {example}")
            return None
        count = int(match.group(1))
        seconds, unit = _UNITS[match.group(2)]
        if count * seconds > MAX_MINIMUM_AGE.total_seconds():
            self.too_long(key)
            return None
        return timedelta(seconds=count * seconds), _plural(count, unit)

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
        return timedelta(days=value), _plural(value, "day")

    def too_long(self, key: str) -> None:
        self.problem(key, f"is longer than {MAX_MINIMUM_AGE.days} days, which would deny "
                     "every version; set a shorter minimum or leave [age] out")


def _document(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RulesError(
            [f"is not valid TOML ({error}); see the README's Rules section for the format"],
            source,
        ) from None


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """The policy a TOML rules document describes; raises RulesError naming every bad key."""
    read = _Reader(_document(text, source))
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
        else:
            read.problem("age.minimum", 'is required in [age]; write minimum = "3d" '
                         "(or leave [age] out to impose no minimum release age)")
        if parsed is not None:
            values["minimum_age"], text_form = parsed
            values["minimum_age_text"] = text_form if parsed[0] > _ZERO else "off"
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

    if read.problems:
        raise RulesError(read.problems, source)
    return Rules(source=source, **values)


def load_rules(path: Path | None) -> Rules:
    """The policy in the rules file at `path`; None means `DEFAULT_RULES`.

    A file that cannot be read or honoured raises RulesError; the caller refuses to start.
    """
    if path is None:
        return DEFAULT_RULES
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RulesError(["is not UTF-8 text; a rules file is TOML"], source) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RulesError(
            [f"cannot read the rules file ({reason}); point MIRRORGATE_RULES_FILE at a "
             "readable TOML file"],
            source,
        ) from None
    return parse_rules(text, source)
