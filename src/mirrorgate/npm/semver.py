"""npm's version and range semantics for the admission rules: a thin, strict, fast adapter.

`nodesemver` (a port of node's `semver`) desugars a range into plain comparators once, when the
rules file loads; a version is then one regex into an ordering key and a comparator one tuple
comparison, because the serve path tests every version of a packument.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import nodesemver

__all__ = ["INVALID_RANGE", "SemverRange", "Version", "parse_range", "parse_version"]

INVALID_RANGE = "is not a valid semver range"
MAX_LENGTH = 256
MAX_SAFE_INTEGER = 2**53 - 1

Identifier = tuple[int, int] | tuple[int, str]
"""A prerelease identifier as it sorts: (0, number) before (1, text), as semver orders them."""
Key = tuple[int, int, int, int, tuple[Identifier, ...]]
"""major, minor, patch, then 0 for a prerelease (which sorts first) or 1 for a release, then the
prerelease identifiers: comparing two keys as tuples compares the versions as npm does."""

# ASCII digits only: Python's `\d` would accept other scripts' digits.
_NUMERIC = r"(?:0|[1-9][0-9]*)"
_PRERELEASE_ID = r"(?:[0-9]*[A-Za-z-][A-Za-z0-9-]*|0|[1-9][0-9]*)"
_BUILD_ID = r"[A-Za-z0-9-]+"
_VERSION = re.compile(
    rf"v?({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})"
    rf"(?:-({_PRERELEASE_ID}(?:\.{_PRERELEASE_ID})*))?"
    rf"(?:\+{_BUILD_ID}(?:\.{_BUILD_ID})*)?"
)
# A version-like run in a range (not a prerelease or build part, hence the look-behind), to
# find an `x` that is followed by a number, which npm refuses in plain ranges.
_XRANGE_MAIN = re.compile(
    r"(?<![0-9A-Za-z.+-])v?([0-9]+|[xX*])(?:\.([0-9]+|[xX*]))?(?:\.([0-9]+|[xX*]))?"
)
_DIGITS = re.compile(r"[0-9]+")
_PRINTABLE_ASCII = re.compile(r"[ -~]*")
_EMPTY_ALTERNATIVE = re.compile(r"^\s*\|\||\|\|\s*\|\||\|\|\s*$")


def _identifier(part: int | str) -> Identifier:
    if isinstance(part, int):
        return (0, part)
    return (0, int(part)) if part.isdigit() else (1, part)


def _key(major: int, minor: int, patch: int, prerelease: tuple[Identifier, ...]) -> Key:
    return (major, minor, patch, 0 if prerelease else 1, prerelease)


@dataclass(frozen=True, slots=True)
class Version:
    """A version npm accepts: its text and the key it sorts by."""

    text: str
    key: Key

    @property
    def is_prerelease(self) -> bool:
        return self.key[3] == 0


def parse_version(text: str) -> Version | None:
    """The version `text` names under npm's strict grammar (`v1.2.3` and surrounding blanks
    accepted, as npm does; ASCII, at most 256 characters, each number at most JavaScript's
    `Number.MAX_SAFE_INTEGER`), or None when npm would refuse it. None, not an exception:
    versions come from upstream packuments, which are untrusted input."""
    if len(text) > MAX_LENGTH:
        return None
    stripped = text.strip()
    match = _VERSION.fullmatch(stripped)
    if match is None:
        return None
    major, minor, patch = int(match.group(1)), int(match.group(2)), int(match.group(3))
    if major > MAX_SAFE_INTEGER or minor > MAX_SAFE_INTEGER or patch > MAX_SAFE_INTEGER:
        return None
    pre = match.group(4)
    prerelease = tuple(_identifier(part) for part in pre.split(".")) if pre else ()
    return Version(stripped, _key(major, minor, patch, prerelease))


_TESTS: dict[str, Callable[[Key, Key], bool]] = {
    "": operator.eq,
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class _Comparator(NamedTuple):
    test: Callable[[Key, Key], bool]
    key: Key
    prerelease_of: tuple[int, int, int] | None  # major.minor.patch when it names a prerelease


def _x(part: str | None) -> bool:
    return part is None or part in ("x", "X", "*")


@dataclass(frozen=True, slots=True)
class SemverRange:
    """A compiled npm range: `text` as written, `normalized` as desugared comparators."""

    text: str
    normalized: str
    alternatives: tuple[tuple[_Comparator, ...], ...] = field(compare=False, repr=False)

    def includes(self, version: Version) -> bool:
        """Whether npm would say `version` satisfies this range
        (`tests/rules/test_semver_agreement.py` checks it against npm's own `semver`)."""
        key = version.key
        for comparators in self.alternatives:
            if all(comparator.test(key, comparator.key) for comparator in comparators):
                if key[3] == 1:
                    return True
                # npm: a prerelease only matches a comparator naming a prerelease of the same
                # major.minor.patch, so ^1.2.3 does not pull in 1.3.0-alpha, nor <4.17.21
                # 4.17.20-beta.1 (`>=4.17.20-0 <4.17.21` does).
                if any(comparator.prerelease_of == key[:3] for comparator in comparators):
                    return True
        return False


def _compile(comparator: Any) -> _Comparator | None:
    """One of the port's comparators as ours; None for its "any version" comparator."""
    if comparator.semver is nodesemver.ANY:
        return None
    semver = comparator.semver
    if comparator.operator not in _TESTS or semver.micro_versions:
        raise ValueError(INVALID_RANGE)
    prerelease = tuple(_identifier(part) for part in semver.prerelease)
    main = (int(semver.major), int(semver.minor), int(semver.patch))
    return _Comparator(
        _TESTS[comparator.operator], _key(*main, prerelease), main if prerelease else None
    )


def parse_range(text: str) -> SemverRange:
    """The range `text` compiled; raises ValueError with a sentence saying what is wrong.

    Refused where npm refuses, and deliberately where npm would guess: an empty `||`
    alternative (npm reads "any version", which in an allow list admits everything), an `x`
    followed by a number (`1.x.3`), non-ASCII, numbers beyond 16 digits, over 256 characters.
    Ranges come from the operator's rules file: stricter costs one clear error at start-up."""
    if _PRINTABLE_ASCII.fullmatch(text) is None:
        raise ValueError("holds characters other than printable ASCII")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"is longer than {MAX_LENGTH} characters")
    if not text.strip():
        raise ValueError("is empty")
    if _EMPTY_ALTERNATIVE.search(text):
        raise ValueError("has an empty alternative around ||, which npm reads as any version")
    for digits in _DIGITS.findall(text):
        if len(digits) > 16 or int(digits) > MAX_SAFE_INTEGER:
            raise ValueError(f"holds the number {digits}, larger than npm accepts")
    for match in _XRANGE_MAIN.finditer(text):
        major, minor, patch = match.groups()
        if (_x(major) and minor is not None and not _x(minor)) or (
            _x(minor) and patch is not None and not _x(patch)
        ):
            raise ValueError(f"puts a number after a wildcard ({match.group(0)!r})")
    try:
        compiled = nodesemver.make_range(text, False)
        alternatives = tuple(
            tuple(made for made in map(_compile, comparators) if made is not None)
            for comparators in compiled.set
        )
        normalized = str(compiled.range) or "*"
    except Exception:  # the port raises ValueError, or worse on odd input: all mean "invalid"
        raise ValueError(INVALID_RANGE) from None
    return SemverRange(text, normalized, alternatives)
