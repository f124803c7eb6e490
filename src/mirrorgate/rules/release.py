"""Release signals: what changed inside a version's tarball against the version before it.

The compromises of 2025-26 changed the bytes, in ways a reader of two consecutive versions sees
at once: a new install hook running a new bundle (Shai-Hulud), an obfuscated blob in the entry
file (chalk/debug), a new dependency published the day before (axios, `plain-crypto-js`). Each
check here is pure: it reads two `Release`s (what `gate.release` gathered from the bytes and the
packuments) and returns the evidence of what fired. docs/serving.md#release-signals tells the
story; `judge` turns what fired into the verdict the rules' actions, allow list, exceptions
and report mode make of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirrorgate.moments import stamp
from mirrorgate.npm.contents import Contents
from mirrorgate.npm.jsmarks import LONG_LINE, STRONG, UNMEASURED, FileMarks
from mirrorgate.rules.patterns import Subject
from mirrorgate.rules.policy import REPORT, Rules
from mirrorgate.rules.releasetable import (
    NEW_DEPENDENCY_YOUNG,
    NEW_INSTALL_SCRIPT,
    OBFUSCATED_CODE,
    TYPOSQUAT,
)
from mirrorgate.rules.typosquat import NameIndex

__all__ = ["Dependency", "Fired", "FirstPublished", "Release", "ReleaseVerdict",
           "check_dependencies", "check_install", "check_obfuscation", "check_typosquat",
           "judge"]

_STRENGTH = {"deny": 3, "quarantine": 2, "report": 1, "off": 0}
_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Release:
    """One version as the signals compare it: its bytes' `contents`, what its registry
    manifest runs at install (`runs`), its runtime dependencies, when it was published."""

    version: str
    contents: Contents
    runs: tuple[str, ...] = ()
    dependencies: Mapping[str, str] = field(default_factory=dict)
    published: datetime | None = None
    publishers: frozenset[str] = frozenset()
    """The accounts that published it (`_npmUser`, else its `maintainers`)."""

    @property
    def hooks(self) -> frozenset[str]:
        manifest = frozenset(run.split(" (", 1)[0] for run in self.runs)
        return manifest | self.contents.hooks


@dataclass(frozen=True, slots=True)
class Fired:
    """A signal that fired: which, the sentence of evidence, and the evidence as data (files,
    lines, byte offsets, the version compared against) for the 403 body and the status page."""

    signal: str
    evidence: str
    details: tuple[str, ...] = ()


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:_SHOWN])
    return shown + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def check_install(new: Release, previous: Release) -> Fired | None:
    """Stops the Shai-Hulud shape: a release that runs code at install where the one before
    it ran none of that (manifest scripts, the tarball's package.json, binding.gyp, bundled
    dependencies')."""
    added = new.hooks - previous.hooks
    if not added:
        return None
    runs = [run for run in (*new.runs, *new.contents.runs) if run.split(" (", 1)[0] in added]
    before = (f"{previous.version} ran {', '.join(sorted(previous.hooks))}" if previous.hooks
              else f"{previous.version} ran nothing at install")
    details = tuple(dict.fromkeys(runs))
    return Fired(NEW_INSTALL_SCRIPT, f"it runs code at install ({_listed(list(details))}); "
                 f"{before}", details)


def _new_marks(path: str, marks: FileMarks, had: frozenset[str]) -> list[str]:
    found = []
    for mark in marks.marks:
        if mark.kind in had and mark.kind != UNMEASURED:  # an overrun refuses, every time
            continue
        # a long line alone is any minifier's or code generator's output (webpack's schema
        # checks, a new dist build): it is evidence beside a strong mark, never a firing
        if mark.kind in STRONG:
            found.append(f"{path}: {mark.text()}")
    if found:
        found += [f"{path}: {mark.text()}" for mark in marks.marks
                  if mark.kind == LONG_LINE and mark.kind not in had]
    return found


def check_obfuscation(new: Release, previous: Release) -> Fired | None:
    """Stops the chalk/debug shape: a JavaScript file that carries marks of obfuscation or
    packing the same file of the previous version did not, or a new file carrying a kind of
    mark no file of the previous version had (bundlers rename their chunks every release, so a
    new file is compared with the whole previous version)."""
    anywhere = frozenset().union(*(marks.kinds for marks in previous.contents.code.values()))
    details: list[str] = []
    for path, marks in sorted(new.contents.code.items()):
        before = previous.contents.code.get(path)
        had = before.kinds if before is not None else anywhere
        found = _new_marks(path, marks, had)
        if found:
            where = ("not in " if before is None else "not in the same file of ")
            details += [f"{item} ({where}{previous.version})" for item in found]
    if not details:
        return None
    return Fired(OBFUSCATED_CODE, f"its code carries marks of obfuscation that "
                 f"{previous.version} did not: {_listed(details)}", tuple(details))


@dataclass(frozen=True, slots=True)
class Dependency:
    """A dependency as the public registry knows it: its first publish, and the accounts that
    publish it (its maintainers, its versions' publishers)."""

    first: datetime | None
    publishers: frozenset[str] = frozenset()


FirstPublished = Mapping[str, Dependency | None]
"""What the public registry says of each dependency; None: it has no such package."""


def check_dependencies(new: Release, previous: Release, first: FirstPublished,
                       young: timedelta, young_text: str, now: datetime) -> Fired | None:
    """Stops the axios shape: a runtime dependency added since the previous version whose own
    first publish is younger than `young`, or that the public registry does not have. A young
    dependency published by an account that publishes this package too is the project's own
    new package (esbuild's, typescript's platform binaries), not an outsider's."""
    details: list[str] = []
    for dependency in sorted(set(new.dependencies) - set(previous.dependencies)):
        if dependency not in first:
            continue  # not asked (a first-party name): no public age to measure
        known = first[dependency]
        when = known.first if known is not None else None
        if known is None:
            details.append(f"`{dependency}` is not on the public registry")
        elif known.publishers & new.publishers:
            continue
        elif when is not None and now - when < young:
            details.append(f"`{dependency}` was first published {stamp(when)}, less than "
                           f"{young_text} ago")
    if not details:
        return None
    return Fired(NEW_DEPENDENCY_YOUNG, f"it adds a dependency {previous.version} did not "
                 f"have: {_listed(details)}", tuple(details))


def check_typosquat(name: str, first_published: datetime | None, installed_before: bool,
                    often: NameIndex, popular: NameIndex, young: timedelta,
                    young_text: str, now: datetime) -> Fired | None:
    """Stops a typo in a package.json: a name the organisation never installed, one edit
    away from one it installs often or from a widely used package, first published less than
    `young` ago."""
    if installed_before or first_published is None or now - first_published >= young:
        return None
    near = often.near(name)
    source = "a name this organisation installs often"
    if near is None:
        near, source = popular.near(name), "a widely used package"
    if near is None:
        return None
    detail = (f"`{name}` is one edit away from `{near}` ({source}), was first published "
              f"{stamp(first_published)} (less than {young_text} ago), and was never "
              "installed here before")
    return Fired(TYPOSQUAT, detail, (detail,))


@dataclass(frozen=True, slots=True)
class ReleaseVerdict:
    """What the release signals make of a version: `denied` (the signal in force, its reason,
    when a quarantine ends), what report mode or an exception let through, and every firing."""

    fired: tuple[Fired, ...] = ()
    rule: str | None = None
    reason: str | None = None
    until: datetime | None = None
    reported: tuple[tuple[str, str], ...] = ()
    excepted: tuple[str, ...] = ()
    compared_with: str | None = None

    @property
    def denied(self) -> bool:
        return self.rule is not None

    def in_force(self, now: datetime) -> bool:
        return self.denied and (self.until is None or now < self.until)


def judge(rules: Rules, name: str, version: str, published: datetime | None,
          fired: list[Fired], now: datetime, compared_with: str | None) -> ReleaseVerdict:
    """The strongest action among the signals that fired, past the table's allow list, an
    `[[exception]]` naming the rule, and report mode (the table's or the file's)."""
    settings = rules.release
    subject = Subject(name, version)
    reported: list[tuple[str, str]] = []
    excepted: list[str] = []
    if settings.allow.first_match(subject, unparseable_matches=False) is not None:
        return ReleaseVerdict(tuple(fired), compared_with=compared_with)
    best: tuple[int, Fired] | None = None
    hint = (f"if this is legitimate, add \"{name}@{version}\" (or \"{name}\") to release.allow")
    for found in fired:
        action = settings.action(found.signal)
        if action == "off":
            continue
        exception = rules.exception_for(found.signal, subject, now)
        if exception is not None:
            excepted.append(f"{found.signal} lifted by {exception.describe()}")
        elif action == "report" or rules.mode_of("release") == REPORT:
            reported.append((found.signal, found.evidence))
        elif best is None or _STRENGTH[action] > best[0]:
            best = (_STRENGTH[action], found)
    if best is None:
        return ReleaseVerdict(tuple(fired), reported=tuple(reported), excepted=tuple(excepted),
                              compared_with=compared_with)
    strength, found = best
    against = f" (compared with {compared_with})" if compared_with else ""
    if strength == _STRENGTH["deny"]:
        return ReleaseVerdict(tuple(fired), found.signal,
                              f"{found.evidence}{against}; {hint}", None, tuple(reported),
                              tuple(excepted), compared_with)
    start = published or now
    until = start + settings.quarantine
    return ReleaseVerdict(tuple(fired), found.signal,
                          f"quarantined until {stamp(until)} ({settings.quarantine_text} after "
                          f"publication) because {found.evidence}{against}; {hint} to release "
                          "it sooner", until, tuple(reported), tuple(excepted), compared_with)
