"""Package patterns for the rules' lists: `left-pad`, `@acme/*`, `acme-*`, `lodash@<4.17.21`.

One syntax everywhere a rule names packages, compiled once when the rules file loads, so that
matching a version costs a dict lookup and, only for a ranged entry, one semver comparison.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from mirrorgate.npm.versions import INVALID_RANGE, SemverRange, Version, parse_range, parse_version

__all__ = ["MAX_NAME_LENGTH", "PATTERN_EXAMPLES", "PackagePattern", "PatternList", "Subject",
           "parse_pattern", "quoted"]

MAX_NAME_LENGTH = 214  # npm's limit on a package name, scope included

_PART = r"[A-Za-z0-9~-][A-Za-z0-9._~-]*"
_NAME = re.compile(rf"(?:@{_PART}/)?{_PART}")
_SCOPE_WILDCARD = re.compile(rf"(@{_PART})/\*")
_PREFIX_WILDCARD = re.compile(rf"((?:@{_PART}/)?{_PART})\*")
PATTERN_EXAMPLES = '"left-pad", "@acme/*", "acme-*" or "lodash@<4.17.21"'


def quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PackagePattern:
    """One entry of a package list: an exact name, a whole scope or a name prefix (a trailing
    `*` after a non-empty prefix: `acme-*`, `@acme/ui-*`), optionally a range.

    A name alone covers every version, prereleases included; a range follows npm's semantics
    (`npm.versions`), so `lodash@<4.17.21` does not cover `4.17.20-beta.1`.
    """

    text: str
    name: str | None  # the exact package name; None for a scope wildcard
    scope: str | None  # "@acme" for "@acme/*"; None for an exact name
    range: SemverRange | None
    prefix: str | None = None  # "acme-" for "acme-*"


def parse_pattern(text: str) -> PackagePattern:
    """`text` as a pattern; raises ValueError with a sentence saying what to write instead."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"is empty; write a pattern such as {PATTERN_EXAMPLES}")
    at = stripped.find("@", 1)
    target, range_text = (stripped, None) if at == -1 else (stripped[:at], stripped[at + 1 :])
    scope_match = _SCOPE_WILDCARD.fullmatch(target)
    prefix_match = _PREFIX_WILDCARD.fullmatch(target)
    name: str | None = None
    scope: str | None = None
    prefix: str | None = None
    if scope_match is not None:
        scope = scope_match.group(1)
    elif _NAME.fullmatch(target) is not None and len(target) <= MAX_NAME_LENGTH:
        name = target
    elif prefix_match is not None and len(target) <= MAX_NAME_LENGTH:
        prefix = prefix_match.group(1)
    elif "*" in target:
        raise ValueError(
            f"{quoted(text)} is not a pattern: a wildcard is a whole scope (\"@acme/*\") or "
            'a trailing * after a name prefix ("acme-*")'
        )
    else:
        raise ValueError(
            f"{quoted(text)} is not a package name, a scope wildcard or a name and range; "
            f"write it like {PATTERN_EXAMPLES}"
        )
    compiled: SemverRange | None = None
    if range_text is not None:
        example = quoted(f"{target}@<4.17.21")
        if not range_text.strip():
            raise ValueError(
                f"{quoted(text)} has an @ but no range after it; write it like {example}, "
                f"or {quoted(target)} for every version"
            )
        try:
            compiled = parse_range(range_text.strip())
        except ValueError as error:
            problem = str(error)
            if problem == INVALID_RANGE:
                raise ValueError(f"{quoted(text)} {problem}; write it like {example}") from None
            raise ValueError(
                f"{quoted(text)} is not a usable semver range: "
                f"{quoted(range_text.strip())} {problem}; write it like {example}"
            ) from None
    return PackagePattern(stripped, name, scope, compiled, prefix)


class Subject:
    """The version under evaluation, its semver form parsed at most once and only if needed;
    `integrity`, the bytes it stands for (their strongest digest's SRI, "" when none is
    known; None where nothing reads them), which a waiver must name."""

    __slots__ = ("_parsed", "_tried", "integrity", "name", "version")

    def __init__(self, name: str, version: str, integrity: str | None = None) -> None:
        self.name = name
        self.version = version
        self.integrity = integrity
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
    _prefixed: tuple[PackagePattern, ...] = field(default=(), compare=False, repr=False,
                                                  hash=False)

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
            tuple(pattern for pattern in patterns if pattern.prefix is not None),
        )

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def texts(self) -> list[str]:
        return [pattern.text for pattern in self.patterns]

    def first_match(self, subject: Subject, *, unparseable_matches: bool) -> PackagePattern | None:
        """The first entry covering the subject; a ranged entry covers a non-semver version
        only when `unparseable_matches` says so."""
        candidates = self._by_name.get(subject.name, ())
        scope = _scope_of(subject.name)
        if scope is not None:
            candidates += self._by_scope.get(scope, ())
        if self._prefixed:  # the few prefix entries are checked one by one
            candidates += tuple(pattern for pattern in self._prefixed
                                if subject.name.startswith(pattern.prefix or ""))
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

    def covers_name(self, name: str) -> bool:
        """Whether an entry names this package (for name-only lists such as [private])."""
        return self.first_match(Subject(name, "0.0.0"), unparseable_matches=True) is not None
