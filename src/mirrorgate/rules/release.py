"""Release signals: what changed inside a version's tarball against the version before it.

The compromises of 2025-26 changed the bytes, in ways a reader of two consecutive versions sees
at once: a new install hook running a new bundle (Shai-Hulud), an obfuscated blob in the entry
file (chalk/debug), a new dependency published the day before (axios, `plain-crypto-js`). Each
check here is pure: it reads two `Release`s (what `gate.verdicts.judge` gathered from the bytes and
the packuments) and returns the evidence of what fired. docs/serving.md#release-signals tells the
story; `judge` turns what fired into the verdict the rules' actions, allow list, exceptions
and report mode make of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirrorgate.moments import stamp
from mirrorgate.npm.attestations import Workflow
from mirrorgate.npm.contents import Contents
from mirrorgate.npm.jsmarks import LONG_LINE, STRONG, UNMEASURED, FileMarks
from mirrorgate.npm.specs import Installed, installed_as
from mirrorgate.rules.patterns import Subject
from mirrorgate.rules.policy import REPORT, Rules
from mirrorgate.rules.releasetable import (
    NEW_DEPENDENCY_OUTSIDE,
    NEW_DEPENDENCY_YOUNG,
    NEW_INSTALL_SCRIPT,
    OBFUSCATED_CODE,
    TYPOSQUAT,
    UNREADABLE_RELEASE,
    YOUNG_PACKAGE_INSTALL_SCRIPT,
)
from mirrorgate.rules.typosquat import NameIndex

__all__ = ["Dependency", "Fired", "FirstPublished", "Release", "ReleaseVerdict",
           "added_packages", "check_dependencies", "check_install", "check_obfuscation",
           "check_outside", "check_typosquat", "check_unreadable", "check_young_package",
           "judge"]

_STRENGTH = {"deny": 3, "quarantine": 2, "report": 1, "off": 0}
_SHOWN = 5
_RUNS_OUTSIDE = ("git repository", "URL", "path")  # `workspace:` npm refuses to install


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
    commands: Mapping[str, str] = field(default_factory=dict)
    """The registry manifest's install hooks, each command whole (the tarball's own are
    `contents.scripts`)."""
    provenance: str | None = None
    """The repository its provenance attestation names (`rules.kinship`), if it has one."""
    built: Workflow | str | None = None
    """The workflow its provenance statement names (`npm.attestations`), or why it could not
    be read; None when it was not fetched (`rules.provenance` says the repository alone)."""

    @property
    def hooks(self) -> frozenset[str]:
        manifest = frozenset(run.split(" (", 1)[0] for run in self.runs)
        return manifest | self.contents.hooks

    def commands_of(self, hook: str) -> frozenset[str]:
        """What `hook` runs, from the registry manifest and the tarball's package.json (npm
        runs the unpacked one; both are compared, so neither can change unseen)."""
        found = {self.commands.get(hook), self.contents.scripts.get(hook)}
        return frozenset(command for command in found if command)

    def installed(self) -> dict[str, Installed]:
        """Its dependencies as npm installs them (`npm.specs`), by key."""
        return {key: installed_as(key, spec) for key, spec in self.dependencies.items()}

    def fetched_outside(self) -> list[str]:
        """The dependencies npm fetches from a git repository, a URL or a path, whose code it
        runs at install with no registry (and so no gate) between: a git dependency's
        `prepare` (pacote's git fetcher runs `npm install` in the clone, devDependencies and
        their hooks included, when it has any install or build hook), an archive's own hooks.
        Read from the registry's manifest and from the tarball's package.json alike."""
        found = [*self.installed().values(), *(installed_as(key, spec) for key, spec
                                               in self.contents.dependencies.items())]
        return sorted({f"{how.describe()}, whose code npm runs at install" for how in found
                       if how.outside in _RUNS_OUTSIDE})


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


_TOKENS = re.compile(r"""[\s;&|()<>'"`=]+""")


def _files_run(command: str, contents: Contents) -> list[str]:
    """The package's JavaScript files a command names (`node setup.js`, `node ./lib/x`), as
    node would find them: the path, then `.js`, then `/index.js`."""
    found: list[str] = []
    for token in _TOKENS.split(command)[:200]:
        path = token.removeprefix("./")
        for candidate in (path, f"{path}.js", f"{path}/index.js"):
            if path and candidate in contents.code:
                found.append(candidate)
                break
    return list(dict.fromkeys(found))


def _changed_runs(new: Release, previous: Release) -> list[str]:
    """A hook both versions have whose command text changed (a funding banner that now
    pipes a download to a shell), or that runs a file whose bytes changed (by their digest:
    the same `node setup.js` over a new 300 KB setup.js)."""
    details: list[str] = []
    for hook in sorted(new.hooks & previous.hooks):
        now, then = new.commands_of(hook), previous.commands_of(hook)
        if now and now != then:
            was = ("`" + "`, `".join(sorted(c[:200] for c in then)) + "`" if then
                   else "a command not shown")
            details += [f"{hook} now runs `{command[:200]}` ({previous.version} ran {was})"
                        for command in sorted(now - then)]
            continue
        for command in sorted(now):
            for path in _files_run(command, new.contents):
                after, before = new.contents.code[path], previous.contents.code.get(path)
                if before is None:
                    details.append(f"{hook} runs {path} ({after.size:,} bytes), which "
                                   f"{previous.version} did not have")
                elif before.digest != after.digest or before.size != after.size:
                    details.append(f"{hook} runs {path}, whose bytes changed since "
                                   f"{previous.version} ({before.size:,} bytes, now "
                                   f"{after.size:,})")
    return details


def check_install(new: Release, previous: Release) -> Fired | None:
    """Stops the Shai-Hulud shape: a release that runs code at install where the one before
    it ran none of that (manifest scripts, the tarball's package.json, binding.gyp, bundled
    dependencies'), or runs other code under the same hook: compared by what runs, not by
    the hook's name."""
    added = new.hooks - previous.hooks
    changed = _changed_runs(new, previous)
    if not added and not changed:
        return None
    runs = [run for run in (*new.runs, *new.contents.runs) if run.split(" (", 1)[0] in added]
    before = (f"{previous.version} ran {', '.join(sorted(previous.hooks))}" if previous.hooks
              else f"{previous.version} ran nothing at install")
    details = tuple(dict.fromkeys([*runs, *changed]))
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
    """A dependency as the public registry knows it: its first publish, the accounts that
    publish it, and the repositories its versions' provenance names (`rules.kinship`)."""

    first: datetime | None
    publishers: frozenset[str] = frozenset()
    provenance: frozenset[str] = frozenset()


FirstPublished = Mapping[str, Dependency | None]
"""What the public registry says of each dependency; None: it has no such package."""


def added_packages(new: Release, previous: Release) -> dict[str, Installed]:
    """The registry packages `new` installs that `previous` did not, by the name npm fetches
    (an `npm:` alias counts as its target, whatever its key; a peer as any dependency)."""
    before = {how.package for how in previous.installed().values() if how.package}
    found: dict[str, Installed] = {}
    for _key, how in sorted(new.installed().items()):
        if how.package is not None and how.package not in before:
            found.setdefault(how.package, how)
    return found


def check_dependencies(new: Release, previous: Release, first: FirstPublished,
                       young: timedelta, young_text: str, now: datetime) -> Fired | None:
    """Stops the axios shape: a package npm installs for this release (a dependency, an
    optional one, a peer npm 7+ installs, an `npm:` alias's target) and not for the previous
    one, first published less than `young` ago, or missing from the public registry.

    The one exemption is the project's own new package (esbuild's platform binaries): this
    release and the dependency both carry provenance naming the same repository. A shared
    publisher no longer suffices: a thief with one stolen token publishes the payload and the
    release from the same account; provenance needs a CI run of the project's repository
    (docs/serving.md#an-exemption-an-attacker-cannot-mint)."""
    details: list[str] = []
    for package, how in sorted(added_packages(new, previous).items()):
        if package not in first:
            continue  # not asked (a first-party name): no public age to measure
        known = first[package]
        label = how.describe() if how.package != how.key else f"`{package}`"
        when = known.first if known is not None else None
        if known is None:
            details.append(f"{label} is not on the public registry")
        elif new.provenance is not None and new.provenance in known.provenance:
            continue
        elif when is None:  # times that cannot establish its age never make it old
            details.append(f"{label} has no first publish its registry's times establish "
                           "(treated as young)")
        elif now - when < young:
            verb = "," if how.package != how.key else " was"
            details.append(f"{label}{verb} first published {stamp(when)}, less than "
                           f"{young_text} ago")
    if not details:
        return None
    return Fired(NEW_DEPENDENCY_YOUNG, f"it adds a dependency {previous.version} did not "
                 f"have: {_listed(details)}", tuple(details))


def check_outside(new: Release, previous: Release) -> Fired | None:
    """A dependency npm fetches from a git repository, a URL or a path: bytes no registry
    serves, so no gate reads them. New, or changed since the previous version, it fires
    (an existing key moved to `git+https://...` is the same door as a new one)."""
    details: list[str] = []
    for key, how in sorted(new.installed().items()):
        if how.outside is None or previous.dependencies.get(key) == how.spec:
            continue
        was = previous.dependencies.get(key)
        since = (f"{previous.version} had `{was[:200]}`" if was is not None
                 else f"not in {previous.version}")
        details.append(f"{how.describe()}, outside the gate ({since})")
    if not details:
        return None
    return Fired(NEW_DEPENDENCY_OUTSIDE, f"it installs a dependency from outside any "
                 f"registry: {_listed(details)}", tuple(details))


def check_young_package(new: Release, package_first: datetime | None, young: timedelta,
                        young_text: str, now: datetime) -> Fired | None:
    """A new package is not a blind spot: nothing to compare its first releases with, and
    most malicious first releases run their payload at install. A release that runs code at
    install, of a package first published less than `young` ago (the package's age, not the
    version's: a new version of an old package is compared instead), fires: its own hooks
    (the registry's manifest, its tarball's package.json, a `binding.gyp`, which npm builds
    with `node-gyp rebuild`, bundled dependencies'), and dependencies npm fetches from
    outside any registry and runs (`Release.fetched_outside`). A registry dependency is
    judged at its own pull."""
    if package_first is not None and now - package_first >= young:
        return None
    runs = list(dict.fromkeys((*new.runs, *new.contents.runs, *new.fetched_outside())))
    if not runs:
        return None
    # times that cannot establish the package's age never make it old (`gate.packuments.times`)
    age = (f"the package was first published {stamp(package_first)}, less than {young_text} "
           "ago" if package_first is not None else "the package's first publish cannot be "
           "established from its registry's times, so it is treated as young")
    detail = f"it runs code at install ({_listed(runs)}) and {age}"
    return Fired(YOUNG_PACKAGE_INSTALL_SCRIPT, detail, tuple(runs))


def check_unreadable(causes: list[str]) -> Fired | None:
    """Fail closed on what the publisher controls: a release that cannot be read whole
    because of its own shape (a tarball the reader refuses, a previous version over the
    bound, more new dependencies than are looked up) is not cleared by what could be read.
    An outage of mirrorgate's own sources is not a cause here (`release.unavailable`)."""
    if not causes:
        return None
    return Fired(UNREADABLE_RELEASE, f"the release signals cannot read it whole: "
                 f"{_listed(causes)}", tuple(causes))


def check_typosquat(name: str, first_published: datetime | None, installed_before: bool,
                    often: NameIndex, popular: NameIndex, young: timedelta,
                    young_text: str, now: datetime) -> Fired | None:
    """Stops a typo in a package.json: a name the organisation never installed, one edit
    away from one it installs often or from a widely used package, first published less than
    `young` ago."""
    if installed_before or (first_published is not None and now - first_published >= young):
        return None
    near = often.near(name)
    source = "a name this organisation installs often"
    if near is None:
        near, source = popular.near(name), "a widely used package"
    if near is None:
        return None
    when = (f"was first published {stamp(first_published)} (less than {young_text} ago)"
            if first_published is not None else "has no first publish its registry's times "
            "establish (treated as young)")
    detail = (f"`{name}` is one edit away from `{near}` ({source}), {when}, and was never "
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
          fired: list[Fired], now: datetime, compared_with: str | None,
          integrity: str = "") -> ReleaseVerdict:
    """The strongest action among the signals that fired, past the table's allow list, an
    `[[exception]]` naming the rule (a waiver: naming these bytes, `integrity`), and report
    mode (the table's or the file's)."""
    settings = rules.release
    subject = Subject(name, version, integrity)
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
