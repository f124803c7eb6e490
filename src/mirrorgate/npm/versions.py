"""Versions, the one module: what a version string may be, npm's grammar, and the loose order.

Two readings, each for one purpose. **npm's grammar** (`parse_version`, `parse_range`: what
`npm install` accepts) decides ranges in the rules and lockfiles, and equality ("is this the
version public already has?": `1.1.0+shadow` is `1.1.0`). **The loose order** (`order_key`,
`highest`, `newest_first`, `nearest`, `newer`: node-semver's `loose` reading, which also takes
`=v1.2.3`, `01.2.3` and `1.2.3beta`) sorts whatever a registry lists, for `latest`, the nearest
admitted version and every list shown newest first. Both reduce a version to one `Key`, compared
as a tuple, because the serve path orders every version of a packument on each fill.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import nodesemver

__all__ = ["INVALID_RANGE", "Key", "SemverRange", "Version", "highest", "is_prerelease",
           "is_version_string", "nearest", "newer", "newest_first", "order_key", "parse_range",
           "parse_version", "same_version", "unstorable", "version_before"]

INVALID_RANGE = "is not a valid semver range"
MAX_LENGTH = 256
MAX_SAFE_INTEGER = 2**53 - 1

# --- what a version string may be -----------------------------------------------------------

# semver's alphabet, led by a letter or digit, at most 256 long. Looser than semver itself:
# registries hold versions only loose parsing reads ("v1.2", "1.2.3.4") and those are still
# served and mirrored; what it keeps out is whatever could be a path or a query ("..", "/").
_VERSION_STRING = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,255}")


def is_version_string(text: str) -> bool:
    """Every module that receives a version (a packument key, a URL, a job, a file name) asks
    this, so the gate never admits what the worker or the file store would refuse."""
    return _VERSION_STRING.fullmatch(text) is not None and ".." not in text


def unstorable(version: str) -> str | None:
    """Why a registry cannot be given `version` to store, or None when it can.

    Build metadata (`1.0.0+b`) is the one such thing: npm's registry strips it at publish,
    semver ranks `1.0.0+b` equal to `1.0.0` (so it could only ever shadow or be shadowed),
    and Verdaccio 6.8 exits on a tarball named for it. Such a version is served as public
    has it, and never mirrored or published through mirrorgate."""
    base, plus, build = version.partition("+")
    if not plus:
        return None
    return (f"{version} carries build metadata (+{build[:40]}), which npm's registry strips "
            f"at publish and a private registry cannot store (it is the same version as "
            f"{base[:60]})")


# --- one key for both readings ----------------------------------------------------------------

Identifier = tuple[int, int] | tuple[int, str]
"""A prerelease identifier as it sorts: (0, number) before (1, text), as semver orders them."""
Key = tuple[int, int, int, int, tuple[Identifier, ...]]
"""major, minor, patch, then 0 for a prerelease (which sorts first) or 1 for a release, then the
prerelease identifiers: comparing two keys as tuples compares the versions as npm does. Build
metadata is not in it: semver ranks `1.0.0+b` equal to `1.0.0`."""

# ASCII digits only: Python's `\d` would accept other scripts' digits.
_NUMERIC = r"(?:0|[1-9][0-9]*)"
_PRERELEASE_ID = r"(?:[0-9]*[A-Za-z-][A-Za-z0-9-]*|0|[1-9][0-9]*)"
_BUILD_ID = r"[A-Za-z0-9-]+"
_BUILD = rf"(?:\+{_BUILD_ID}(?:\.{_BUILD_ID})*)?"
_STRICT = re.compile(
    rf"v?({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})"
    rf"(?:-({_PRERELEASE_ID}(?:\.{_PRERELEASE_ID})*))?{_BUILD}"
)
# node-semver's LOOSE: `=` and `v` prefixes, leading zeros, no hyphen needed before a prerelease
_LOOSE_ID = r"(?:[0-9]*[A-Za-z-][A-Za-z0-9-]*|[0-9]+)"
_LOOSE = re.compile(
    rf"[v=\s]*([0-9]+)\.([0-9]+)\.([0-9]+)(?:-?({_LOOSE_ID}(?:\.{_LOOSE_ID})*))?{_BUILD}"
)


def _identifier(part: int | str) -> Identifier:
    if isinstance(part, int):
        return (0, part)
    return (0, int(part)) if part.isdigit() else (1, part)


def _key(major: int, minor: int, patch: int, prerelease: tuple[Identifier, ...]) -> Key:
    return (major, minor, patch, 0 if prerelease else 1, prerelease)


def _matched(pattern: re.Pattern[str], text: str) -> Key | None:
    if len(text) > MAX_LENGTH:
        return None
    match = pattern.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch = int(match.group(1)), int(match.group(2)), int(match.group(3))
    if major > MAX_SAFE_INTEGER or minor > MAX_SAFE_INTEGER or patch > MAX_SAFE_INTEGER:
        return None
    pre = match.group(4)
    prerelease = tuple(_identifier(part) for part in pre.split(".")) if pre else ()
    return _key(major, minor, patch, prerelease)


# --- npm's grammar: ranges and equality -------------------------------------------------------

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
    key = _matched(_STRICT, text)
    return Version(text.strip(), key) if key is not None else None


def version_before(versions: Iterable[str], version: str) -> str | None:
    """The version the release before `version` is, among `versions`: the highest lower one,
    a prerelease only when `version` is one (what the release signals compare with)."""
    this = parse_version(version)
    if this is None:
        return None
    best: tuple[Key, str] | None = None
    for text in versions:
        other = parse_version(text)
        if other is None or other.key >= this.key or (other.is_prerelease
                                                      and not this.is_prerelease):
            continue
        if best is None or other.key > best[0]:
            best = (other.key, text)
    return best[1] if best is not None else None


def same_version(a: str, b: str) -> bool:
    """Whether semver ranks `a` and `b` equal (build metadata ignored): the test for "public
    already has this version", never string equality. Unparseable text equals only itself."""
    if a == b:
        return True
    left, right = parse_version(a), parse_version(b)
    return left is not None and right is not None and left.key == right.key


_TESTS: dict[str, Callable[[Key, Key], bool]] = {
    "": operator.eq,
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# A version-like run in a range (not a prerelease or build part, hence the look-behind), to
# find an `x` that is followed by a number, which npm refuses in plain ranges.
_XRANGE_MAIN = re.compile(
    r"(?<![0-9A-Za-z.+-])v?([0-9]+|[xX*])(?:\.([0-9]+|[xX*]))?(?:\.([0-9]+|[xX*]))?"
)
_DIGITS = re.compile(r"[0-9]+")
_PRINTABLE_ASCII = re.compile(r"[ -~]*")
_EMPTY_ALTERNATIVE = re.compile(r"^\s*\|\||\|\|\s*\|\||\|\|\s*$")


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
    """One of node-semver's comparators as ours; None for its "any version" comparator."""
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

    node-semver (a port of npm's `semver`) desugars it into plain comparators once, when the
    rules file or lockfile is read; a version is then one tuple comparison per comparator.
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


# --- the loose order: whatever a registry lists -----------------------------------------------

def order_key(version: str) -> Key | None:
    """The loose reading's key, or None for text even node-semver's `loose` cannot read."""
    return _matched(_LOOSE, version)


def is_prerelease(version: str) -> bool:
    key = order_key(version)
    return key is not None and key[3] == 0


def newer(version: str, than: str) -> bool:
    """Whether `version` sorts above `than` (False when either cannot be read)."""
    mine, theirs = order_key(version), order_key(than)
    return mine is not None and theirs is not None and mine > theirs


def newest_first(versions: Iterable[str]) -> list[str]:
    """Highest first; text that cannot be read last, in the order given."""
    keyed = [(order_key(version), version) for version in versions]
    readable = sorted(((k, v) for k, v in keyed if k is not None), key=lambda kv: kv[0],
                      reverse=True)
    return [v for _, v in readable] + [v for k, v in keyed if k is None]


def highest(versions: Iterable[str]) -> str | None:
    """The version a tag goes to when it must be repointed, as npm registries choose it: the
    highest stable one or, when there is none, the highest prerelease. Never unreadable text."""
    best: tuple[Key, str] | None = None
    best_pre: tuple[Key, str] | None = None
    for version in versions:
        key = order_key(version)
        if key is None:
            continue
        if key[3] == 1:
            if best is None or key > best[0]:
                best = (key, version)
        elif best_pre is None or key > best_pre[0]:
            best_pre = (key, version)
    chosen = best or best_pre
    return chosen[1] if chosen is not None else None


def nearest(version: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest below `version` (the newest one older than it), else the closest
    above: what to use instead of a denied version. None when nothing parses."""
    wanted = order_key(version)
    pool = [(key, text) for text in candidates if (key := order_key(text)) is not None]
    if wanted is None or not pool:
        return None
    below = [entry for entry in pool if entry[0] < wanted]
    if below:
        return max(below, key=lambda entry: entry[0])[1]
    above = [entry for entry in pool if entry[0] > wanted]
    return min(above, key=lambda entry: entry[0])[1] if above else None
