"""The license rule: `[license]`'s deny and allow lists of SPDX identifiers, judged over a
version's declared license as SPDX defines its expressions (OR, AND, WITH).

Expressions are parsed by `license-expression` (aboutcode, the parser ScanCode and
cyclonedx-python-lib use) with its SPDX license list: never a parser of our own. Loading the
list costs 0.36 s and 3.5 MB once per process, a parse 15 to 200 us, so each distinct text is
judged once per rules (`LicenseRule.judge`'s memo): a packument's versions mostly share one.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from license_expression import (
    AND,
    OR,
    ExpressionError,
    LicenseSymbol,
    LicenseWithExceptionSymbol,
    Licensing,
    get_spdx_licensing,
)

from mirrorgate.npm.licenses import declared_license, license_file, unlicensed
from mirrorgate.rules.patterns import quoted
from mirrorgate.rules.wayout import listed

__all__ = ["LICENSE", "LICENSE_UNKNOWN", "MAX_EXPRESSION", "UNKNOWN_CHOICES", "Judgement",
           "LicenseEntry", "LicenseRead", "LicenseRule", "parse_entry", "spdx_expression",
           "tarball_license_finding"]

LICENSE = "license"
LICENSE_UNKNOWN = "license-unknown"
UNKNOWN_CHOICES = ("deny", "report", "allow")
MAX_EXPRESSION = 200
"""Characters of a declaration parsed at most (about 0.3 ms): a longer one is no SPDX
expression a package declares, and is judged unknown unread."""
_MEMO = 4096
"""Distinct declarations each rules' memo keeps; past it the memo starts again."""
Outcome = Literal["allowed", "denied", "unknown"]


@functools.cache
def spdx() -> Licensing:
    """The SPDX license list, loaded once per process (at the first `[license]` table)."""
    return get_spdx_licensing()


@dataclass(frozen=True, slots=True)
class LicenseEntry:
    """One entry of `deny` or `allow`: a license identifier (a `*` matches any run of
    characters), and for `A WITH B` the exception; matched without regard to case, as SPDX
    matches identifiers."""

    text: str
    license: str
    exception: str | None = None

    def matches(self, license_: str, exception: str | None) -> bool:
        """An entry naming an exception covers only a term with a matching one; a plain entry
        covers a term by its license, with or without an exception."""
        if self.exception is not None and (exception is None or not fnmatch.fnmatchcase(
                exception.lower(), self.exception)):
            return False
        return fnmatch.fnmatchcase(license_.lower(), self.license)


def _known(symbol: object, *, exception: bool) -> bool:
    return (isinstance(symbol, LicenseSymbol) and symbol.key in spdx().known_symbols
            and bool(symbol.is_exception) == exception)


def parse_entry(text: str) -> LicenseEntry:
    """A list entry: an SPDX identifier (`MIT`, a deprecated `GPL-2.0` read as SPDX now reads
    it, `GPL-2.0-only`), a `LicenseRef-` of the organisation's own, a pattern (`GPL-*`), or
    `LICENSE WITH EXCEPTION`; raises ValueError saying what is wrong (a typo must not silently
    weaken the policy: an identifier SPDX does not know is refused)."""
    written = text.strip()
    if not written or len(written) > MAX_EXPRESSION:
        raise ValueError(f"{quoted(text[:80])} is not a license; write an SPDX identifier "
                         "such as \"MIT\", a pattern such as \"GPL-*\", or \"GPL-2.0-only WITH "
                         "Classpath-exception-2.0\"")
    license_, _, exception = written.partition(" WITH ")
    if any(f" {word} " in f" {written.upper()} " for word in ("AND", "OR")):
        raise ValueError(f"{quoted(text)} is an expression: list each license on its own "
                         "(the rule reads a version's AND and OR itself: \"MIT OR GPL-3.0-only\" "
                         "is admitted when MIT is)")
    parts = [(license_.strip(), False)] + ([(exception.strip(), True)] if exception else [])
    globs: list[str] = []
    for part, is_exception in parts:
        what = "exception" if is_exception else "license"
        if "*" in part:
            glob = part.lower()
            covered = [s for s in spdx().known_symbols.values()
                       if bool(s.is_exception) == is_exception
                       and fnmatch.fnmatchcase(s.key.lower(), glob)]
            if not covered and not part.lower().startswith(("licenseref-", "documentref-")):
                raise ValueError(f"{quoted(part)} matches no SPDX {what} identifier")
            globs.append(glob)
            continue
        if part.lower().startswith(("licenseref-", "documentref-")) and not is_exception:
            globs.append(part.lower())  # the organisation's own identifier: SPDX has no list
            continue
        try:
            symbol = spdx().parse(part)
        except ExpressionError:
            symbol = None
        if not _known(symbol, exception=is_exception):
            hint = ""
            if not is_exception and (unlicensed(part) or license_file(part) is not None):
                hint = ("; UNLICENSED and SEE LICENSE IN are no SPDX licenses: "
                        "`unknown` decides them")
            raise ValueError(f"{quoted(part)} is not an SPDX {what} identifier{hint}; e.g. "
                             + ("\"Classpath-exception-2.0\"" if is_exception
                                else "\"MIT\", \"Apache-2.0\" or \"GPL-3.0-only\""))
        assert isinstance(symbol, LicenseSymbol)
        globs.append(str(symbol.key).lower())  # "GPL-2.0" covers what SPDX reads it as
    return LicenseEntry(written, globs[0], globs[1] if len(globs) > 1 else None)


@dataclass(frozen=True, slots=True)
class Judgement:
    """A declaration judged: `outcome`, the declaration as SPDX reads it (or as written, or
    None for none), and `why`: the sentence after "declares ...", without the version."""

    outcome: Outcome
    declared: str | None
    why: str
    findings: tuple[str, ...] = ()
    """What denied it, or could not be read: one sentence a term."""


@dataclass(frozen=True)
class LicenseRule:
    """The `[license]` table; `on` when it is written. `deny` runs first; a non-empty `allow`
    admits only what it names; `unknown` says what a version gets whose license cannot be
    read as SPDX (none, UNLICENSED, SEE LICENSE IN, not an expression)."""

    on: bool = False
    deny: tuple[LicenseEntry, ...] = ()
    allow: tuple[LicenseEntry, ...] = ()
    unknown: str = "deny"
    _memo: dict[str | None, Judgement] = field(default_factory=dict, compare=False,
                                               repr=False)

    def judge_manifest(self, manifest: Mapping[str, Any] | None) -> Judgement:
        return self.judge(declared_license(manifest))

    def judge(self, text: str | None) -> Judgement:
        """`text` (a declared license, npm's reading) judged, once per distinct text."""
        found = self._memo.get(text)
        if found is None:
            if len(self._memo) >= _MEMO:
                self._memo.clear()
            found = self._memo[text] = self._judged(text)
        return found

    def _judged(self, text: str | None) -> Judgement:
        if text is None:
            return Judgement("unknown", None, "declares no license")
        if unlicensed(text.strip()):
            return Judgement("unknown", text, f"declares {text.strip()}, npm's word for a "
                             "package nobody may use without its publisher's permission")
        file = license_file(text.strip())
        if file is not None:
            return Judgement("unknown", text, f"declares {quoted(text[:120])}: a license of "
                             "its own, not an SPDX expression")
        if len(text) > MAX_EXPRESSION:
            return Judgement("unknown", text, f"declares a license of {len(text)} characters, "
                             f"longer than any SPDX expression mirrorgate reads ({MAX_EXPRESSION})")
        try:
            parsed = spdx().parse(text)
        except (ExpressionError, RecursionError) as error:
            return Judgement("unknown", text, f"declares the license {quoted(text)}, which is "
                             f"not an SPDX expression ({str(error)[:120]})")
        if parsed is None:
            return Judgement("unknown", None, "declares no license")
        outcome, whys = self._walk(parsed)
        shown = str(parsed)
        # said as written too where SPDX reads it otherwise ("GPL-2.0+" is GPL-2.0-or-later)
        said = shown if _bare(shown) == _bare(text) else f"{shown} (written {quoted(text)})"
        if outcome == "allowed":
            return Judgement(outcome, shown, f"declares {said}")
        return Judgement(outcome, shown, f"declares the license {said}: {'; '.join(whys)}",
                         tuple(whys))

    @property
    def unknown_said(self) -> str:
        return f'[license] unknown = "{self.unknown}"'

    def _walk(self, node: object) -> tuple[Outcome, list[str]]:
        """SPDX's reading: an OR is admitted when any side is, an AND when every side is; a
        side that cannot be read is unknown (an AND with a denied side stays denied)."""
        if isinstance(node, AND | OR):
            sides = [self._walk(arg) for arg in node.args]
            wanted: Outcome = "allowed" if isinstance(node, OR) else "denied"
            for outcome in (wanted, "unknown", "allowed" if wanted == "denied" else "denied"):
                picked = [whys for found, whys in sides if found == outcome]
                if picked:
                    return outcome, [] if outcome == "allowed" else [
                        why for whys in picked for why in whys]
        if isinstance(node, LicenseWithExceptionSymbol):
            return self._term(node.license_symbol, node.exception_symbol, str(node))
        return self._term(node, None, str(node))

    def _term(self, license_: object, exception: object | None,
              shown: str) -> tuple[Outcome, list[str]]:
        key = str(getattr(license_, "key", license_))
        exception_key = str(getattr(exception, "key", exception)) if exception else None
        entry = self._entry(key, exception_key)
        if entry is not None:
            listed_in, found = entry
            if listed_in == "deny":
                return "denied", [f"{shown} matches the license deny list entry "
                                  f"{quoted(found.text)}"]
            return "allowed", []
        known = _known(license_, exception=False) and (
            exception is None or _known(exception, exception=True))
        if not known:
            return "unknown", [f"{exception_key} is not an SPDX exception identifier"
                               if _known(license_, exception=False)
                               else f"{key} is not an SPDX license identifier"]
        if self.allow:
            return "denied", [f"{shown} is not on the license allow list "
                              f"({listed([e.text for e in self.allow])})"]
        return "allowed", []

    def _entry(self, key: str, exception: str | None) -> tuple[str, LicenseEntry] | None:
        """The entry that decides a term: one naming its exception before one naming only
        its license; at the same rank, deny before allow."""
        for specific in (True, False):
            for listed_in, entries in (("deny", self.deny), ("allow", self.allow)):
                for entry in entries:
                    if (entry.exception is not None) == specific and entry.matches(
                            key, exception):
                        return listed_in, entry
        return None


def spdx_expression(text: str | None) -> str | None:
    """`text` (a declared license) as an SPDX expression every identifier of which SPDX knows
    (`GPL-2.0+` as `GPL-2.0-or-later`), or None: what a bill of materials may state as one."""
    if text is None or len(text) > MAX_EXPRESSION:
        return None
    try:
        parsed = spdx().parse(text)
    except (ExpressionError, RecursionError):
        return None
    if parsed is None:
        return None
    for symbol in spdx().license_symbols(parsed, decompose=False):
        pair = ((symbol.license_symbol, symbol.exception_symbol)
                if isinstance(symbol, LicenseWithExceptionSymbol) else (symbol, None))
        if not _known(pair[0], exception=False) or (
                pair[1] is not None and not _known(pair[1], exception=True)):
            return None
        if str(pair[0].key).startswith("LicenseRef-"):  # ScanCode's own, not SPDX's list
            return None
    return str(parsed)


def _bare(text: str) -> str:
    return re.sub(r"[()\s]+", "", text)


@dataclass(frozen=True, slots=True)
class LicenseRead:
    """The license rule reads a version's tarball (`[license]` is on, the version public):
    the rule in force, and whether what it finds is only reported (the table's report mode)."""

    rule: LicenseRule
    report: bool


def tarball_license_finding(rule: LicenseRule, registry: str | None,
                            inner: Mapping[str, Any] | None, problem: str | None) -> str | None:
    """Why the license rule refuses a tarball whose `package.json` (`inner`, as npm parses
    it; None when it has none or npm cannot parse it) declares another license than the
    registry's manifest did (`registry`, `declared_license` of it), which the packument's
    verdict judged, or that cannot be read at all (`problem`, the tarball reader's); None when
    the two agree. npm installs the tarball's, so a difference is refused whatever either
    says: the manifest is the publisher's word beside the bytes, and the rule judged that."""
    if problem is not None:
        return f"its tarball cannot be read for its license: {problem}"
    shown = rule.judge(registry)
    inside = rule.judge_manifest(inner)
    if shown.declared == inside.declared or _equivalent(shown, inside):
        return None
    said = inside.declared if inside.declared is not None else "no license"
    reason = (f"the registry's manifest declares {shown.declared or 'no license'}, but the "
              f"package.json in its tarball, which npm installs, declares {said}")
    if inside.findings:
        reason += f", where {'; '.join(inside.findings)}"
    return reason


def _equivalent(one: Judgement, other: Judgement) -> bool:
    """Two SPDX expressions that say the same (`MIT OR ISC`, `ISC OR MIT`)."""
    if one.outcome == "unknown" or other.outcome == "unknown" or one.declared is None \
            or other.declared is None:
        return False
    try:
        return bool(spdx().is_equivalent(one.declared, other.declared))
    except (ExpressionError, RecursionError):
        return False
