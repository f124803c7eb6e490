"""The release signals' I/O: the previous version's bytes, the new dependencies' first publish,
the names the organisation installs, and each version's verdict, remembered.

`ReleaseCheck` rides on the relay of a version's first public pull: the relay feeds its reading
(`npm.contents`, on the hashing lane, beside the loop) while this fetches the previous version's
tarball (bounded, verified, read in a thread) and, once the last byte is in, the checks of
`rules.release` run and the verdict is kept in the state store (`facts`), so a second pull, a
restart or another replica costs nothing and a warm packument never pays.
docs/serving.md#release-signals tells why it runs there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from mirrorgate.events import Alert
from mirrorgate.gate.facts import KeptFacts
from mirrorgate.gate.records import Denial, Gated, VersionRecord
from mirrorgate.integrity import (
    DigestMismatch,
    SizeMismatch,
    StreamVerifier,
    TooLarge,
    Unverifiable,
    strongest_of,
)
from mirrorgate.metrics import Metrics
from mirrorgate.moments import moment
from mirrorgate.npm.contents import (
    ContentReading,
    Contents,
    KeptReadings,
    contents_of,
    manifest_runs,
)
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.npm.versions import newest_first, version_before
from mirrorgate.rules import REPORT, LiveRules, Rules
from mirrorgate.rules.release import (
    Dependency,
    Fired,
    Release,
    ReleaseVerdict,
    check_dependencies,
    check_install,
    check_obfuscation,
    check_typosquat,
    judge,
)
from mirrorgate.rules.takeover import publishers_of
from mirrorgate.rules.typosquat import NameIndex, popular_names
from mirrorgate.store import INSTALLED, Verdict
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError

__all__ = ["MAX_DEPENDENCIES_ASKED", "OFTEN", "ReleaseCheck", "ReleaseJudge"]

log = structlog.get_logger("mirrorgate.serve")

OFTEN = 3
"""Pulls of a name that make it one the organisation "installs often" (typosquat's own list)."""
MAX_DEPENDENCIES_ASKED = 20
"""New dependencies of one release whose first publish is looked up at most; more are said."""
_PUBLISHERS_READ = 20  # versions of a dependency whose publisher is read


@dataclass(frozen=True, slots=True)
class _Facts:
    """What one analysis found, kept per version: the verdict is made again from it under the
    rules in force at each pull (an allow entry added later releases it without a new read)."""

    fired: tuple[Fired, ...]
    published: datetime | None
    compared_with: str | None

    def evidence(self) -> str:
        return json.dumps({"fired": [[f.signal, f.evidence, list(f.details)] for f in self.fired],
                           "published": self.published.isoformat() if self.published else None})

    @classmethod
    def of(cls, verdict: Verdict) -> _Facts | None:
        """The facts a kept verdict carries; None when its evidence cannot be read (then the
        version is read again at its next first pull)."""
        try:
            data = json.loads(verdict.evidence)
            fired = tuple(Fired(str(signal), str(evidence), tuple(str(d) for d in details))
                          for signal, evidence, details in data["fired"])
            published = moment(data["published"]) if data["published"] else None
        except (ValueError, KeyError, TypeError):
            return None
        return cls(fired, published, verdict.compared_with)


def _previous(gated: Gated, version: str) -> VersionRecord | None:
    """The version before `version` (`version_before`) among those whose bytes mirrorgate
    can read from public, verified."""
    readable = [text for text, record in gated.versions.items()
                if record.upstream_tarball is not None and record.digests]
    before = version_before(readable, version)
    return gated.versions[before] if before is not None else None


def _first_published(gated: Gated) -> datetime | None:
    created = moment(gated.time.get("created"))
    times = [when for key, value in gated.time.items() if key not in ("created", "modified")
             and (when := moment(value)) is not None]
    candidates = [*times, *([created] if created is not None else [])]
    return min(candidates) if candidates else None


def _publishers(gated: Gated) -> frozenset[str]:
    """Who publishes a package: its maintainers and the publishers of its newest versions."""
    found = set(publishers_of({"maintainers": gated.head.get("maintainers")}))
    for version in newest_first(gated.versions)[:_PUBLISHERS_READ]:
        found |= publishers_of(gated.versions[version].manifest())
    return frozenset(found)


def _dependencies(manifest: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key in ("dependencies", "optionalDependencies"):
        listed = manifest.get(key)
        if isinstance(listed, Mapping):
            found.update((str(k), str(v)) for k, v in list(listed.items())[:1000])
    return found


def _kept_as(name: PackageName, record: VersionRecord) -> tuple[str, str, str]:
    """A version's reading is kept by its name, version and bytes (its strongest digest)."""
    try:
        return (name.full, record.version, strongest_of(record.digests).sri())
    except Unverifiable:
        return (name.full, record.version, "")


class ReleaseJudge:
    """The release signals of one process: what they remember, and the I/O they need."""

    def __init__(self, *, rules: Rules | LiveRules, public: Upstream, metrics: Metrics,
                 packument: Callable[[PackageName], Awaitable[Gated | None]],
                 now: Callable[[], datetime], facts: KeptFacts | None = None,
                 previous_max_bytes: int, timeout: float,
                 forget: Callable[[PackageName], None] = lambda _name: None) -> None:
        self._rules = rules
        self.forget = forget
        """Drops a name's cached packument: a refusal then reaches it at once."""
        self.public = public
        self.metrics = metrics
        self.packument = packument
        self.now = now
        self.previous_max_bytes = previous_max_bytes
        self.timeout = timeout
        self.facts = facts if facts is not None else KeptFacts()
        self._decoded: dict[tuple[str, str], tuple[Verdict, _Facts | None]] = {}
        self._flagged: dict[str, set[str]] | None = None  # name -> versions a signal fired for
        self._counts: dict[str, int] = {}
        self._often: NameIndex | None = None
        self.readings = KeptReadings()
        """The last versions' readings: a predecessor read before is not fetched again."""
        self.facts.listeners.append(self._changed)

    def _changed(self, kind: str) -> None:
        """Another process kept a verdict or counted an install: rebuilt at the next use."""
        if kind == "verdict":
            self._flagged = None
        elif kind == INSTALLED:
            self._often = None

    @property
    def rules(self) -> Rules:
        rules = self._rules
        return rules.current if isinstance(rules, LiveRules) else rules

    def applies(self, record: VersionRecord) -> bool:
        """Whether a pull of this version is read by the signals: they are on, and it is a
        public version not yet mirrored (a mirrored copy passed them, or predates them)."""
        return (self.rules.release.on and not record.private
                and record.upstream_tarball is not None)

    def remembered(self, name: str, version: str) -> ReleaseVerdict | None:
        """The verdict for a version read before, under the rules in force now."""
        kept = self.facts.verdict(name, version)
        if kept is None:
            return None
        decoded = self._decoded.get((name, version))
        if decoded is None or decoded[0] is not kept:
            decoded = (kept, _Facts.of(kept))
            self._decoded[(name, version)] = decoded
            if len(self._decoded) > 2 * len(self._flagged_index()) + 10_000:
                self._decoded.clear()
        facts = decoded[1]
        if facts is None:
            return None
        return judge(self.rules, name, version, facts.published, list(facts.fired),
                     self.now(), facts.compared_with)

    def refused_versions(self, name: str) -> dict[str, Denial]:
        """The versions of `name` a release signal refuses now, as the gate denies them."""
        found: dict[str, Denial] = {}
        now = self.now()
        for version in sorted(self._flagged_index().get(name, ())):
            verdict = self.remembered(name, version)
            if verdict is not None and verdict.in_force(now):
                assert verdict.rule is not None
                found[version] = Denial(verdict.rule, verdict.reason or "refused",
                                        until=verdict.until)
        return found

    def _flagged_index(self) -> dict[str, set[str]]:
        if self._flagged is None:
            self._flagged = {}
            for kept in self.facts.verdicts():
                if kept.verdict == "flagged":
                    self._flagged.setdefault(kept.name, set()).add(kept.version)
        return self._flagged

    def installed(self, name: str) -> None:
        """A tarball of `name` was served: its count towards "installed often" (persisted at
        1, 2, 4, 8... pulls, so a busy name costs a few writes, not one per pull)."""
        count = self._counts.get(name)
        if count is None:
            count = self._stored(name)
        count += 1
        self._counts[name] = count
        if count & (count - 1) == 0:
            self.facts.put(INSTALLED, name, str(count))
        if count == OFTEN:
            self._often = None  # rebuilt at the next typosquat check

    def _stored(self, name: str) -> int:
        stored = self.facts.get(INSTALLED, name)
        return int(stored) if stored is not None and stored.isdigit() else 0

    def installed_before(self, name: str) -> bool:
        return name in self._counts or self.facts.get(INSTALLED, name) is not None

    def often(self) -> NameIndex:
        """The names the organisation installs often, indexed (rebuilt when one is added)."""
        if self._often is None:
            names = {name for name in self.facts.keys(INSTALLED) if self._stored(name) >= OFTEN}
            names |= {name for name, count in self._counts.items() if count >= OFTEN}
            self._often = NameIndex(names)
        return self._often

    def check(self, name: PackageName, gated: Gated, record: VersionRecord) -> ReleaseCheck:
        return ReleaseCheck(self, name, gated, record)

    async def fetch_previous(self, name: PackageName, record: VersionRecord) -> bytes | str:
        """The previous version's tarball, verified, or why it cannot be had (a sentence)."""
        url = record.upstream_tarball
        assert url is not None  # `_previous` picks only versions with a public URL
        try:
            verifier = StreamVerifier(record.digests, expected_size=None,
                                      limit=self.previous_max_bytes)
        except Unverifiable:
            return f"{record.version} carries no digest to verify its bytes against"
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout), self.public.stream(
                    url, pool=TARBALLS) as body:
                if body is None:
                    return f"the public registry has no tarball for {record.version}"
                verifier.declared_length(body.size)
                async for chunk in body.chunks:
                    verifier.update(chunk)
                    chunks.append(chunk)
            verifier.finish()
        except (TooLarge, SizeMismatch, DigestMismatch) as error:
            return f"{record.version}'s tarball was not read: {error}"
        except UpstreamError as error:
            return f"{record.version}'s tarball could not be fetched: {error}"
        except TimeoutError:
            return f"{record.version}'s tarball was not fetched within {self.timeout:g} s"
        return b"".join(chunks)

    async def read_previous(self, record: VersionRecord, fetched: bytes | str,
                            new: Contents) -> Contents | str:
        """The previous version's contents (its files unchanged in `new` not measured again),
        or why they cannot be had."""
        if isinstance(fetched, str):
            return fetched
        contents = await asyncio.to_thread(contents_of, fetched, new.code)
        if contents.problem is not None:
            return f"{record.version}'s tarball cannot be read: {contents.problem}"
        return contents

    async def first_published(self, names: list[str]) -> tuple[dict[str, Dependency | None],
                                                               list[str]]:
        """What the public registry says of each name (None: it lacks it), and the names
        that could not be looked up. First-party names are not asked."""
        found: dict[str, Dependency | None] = {}
        failed: list[str] = []
        rules = self.rules
        asked = [text for text in names[:MAX_DEPENDENCIES_ASKED] if not rules.private_alone(text)]

        async def one(text: str) -> None:
            try:
                parsed = parse_name(text)
            except InvalidNameError:
                found[text] = None  # npm cannot install it from the public registry either
                return
            try:
                async with asyncio.timeout(self.timeout):
                    gated = await self.packument(parsed)
            except Exception as error:  # an upstream failure, whatever the fill raised
                failed.append(f"{text} ({type(error).__name__})")
                return
            if gated is None:
                found[text] = None
            elif not gated.first_party:
                found[text] = Dependency(_first_published(gated), _publishers(gated))

        await asyncio.gather(*(one(text) for text in asked))  # cached, single-flight fills
        failed += [f"{text} (past the first {MAX_DEPENDENCIES_ASKED})"
                   for text in names[MAX_DEPENDENCIES_ASKED:]]
        return found, failed

    def remember(self, name: str, version: str, integrity: str, facts: _Facts) -> None:
        """Keep what the signals found as the version's verdict (memory now, the store in the
        background), read back under the rules in force at each pull (`remembered`)."""
        kept = Verdict(name, version, integrity, "flagged" if facts.fired else "clean",
                       facts.evidence(), facts.compared_with, str(self.rules.generation))
        self.facts.keep(kept)
        self._decoded[(name, version)] = (kept, facts)
        if facts.fired:
            self._flagged_index().setdefault(name, set()).add(version)


class ReleaseCheck:
    """One version's first pull, read by the release signals. The relay feeds `scan` and calls
    `begin()` when its download starts, `verdict()` once every byte is read (the last chunk
    held back meanwhile), and `close()` in any case."""

    def __init__(self, judge_: ReleaseJudge, name: PackageName, gated: Gated,
                 record: VersionRecord) -> None:
        self.judge = judge_
        self.name = name
        self.gated = gated
        self.record = record
        self.previous = _previous(gated, record.version)
        kept = (judge_.readings.get(_kept_as(name, self.previous))
                if self.previous is not None else None)
        # a predecessor read before lends its marks to this version's unchanged files
        self.reading = ContentReading(kept.code if kept is not None else None)
        self._task: asyncio.Task[bytes | str] | None = None
        self.refused: str | None = None
        """Why `verdict()` refused the bytes, once it has."""

    @property
    def scan(self) -> ScriptScan:
        return self.reading.scan

    @property
    def label(self) -> str:
        return f"{self.name.full}@{self.record.version}"

    @property
    def may_refuse(self) -> bool:
        """Whether the verdict may refuse the bytes: never in the table's or the file's report
        mode, where every signal (and `unavailable = "deny"`) is a would-deny, so a report-mode
        rollout is not held until the last byte (`relay.HOLD_AT_MOST`)."""
        return self.judge.rules.mode_of("release") != REPORT

    @property
    def integrity(self) -> str:
        """The bytes judged, by their strongest digest ("" for a version with none)."""
        try:
            return strongest_of(self.record.digests).sri()
        except Unverifiable:
            return ""

    def begin(self) -> None:
        """Start fetching the previous version's bytes, beside the download of these (unless
        they were read before)."""
        if (self.previous is not None and self._task is None
                and self.judge.readings.get(_kept_as(self.name, self.previous)) is None):
            self._task = asyncio.get_running_loop().create_task(
                self.judge.fetch_previous(self.name, self.previous))

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def verdict(self) -> str | None:
        """Every byte read: None when the bytes may leave, else the reason they may not (the
        denial is remembered, logged, counted and on the status page)."""
        judge_ = self.judge
        version = self.record.version
        now = judge_.now()
        published = moment(self.gated.time.get(version))
        manifest = self.record.manifest()
        contents = self.reading.contents()
        judge_.readings.keep(_kept_as(self.name, self.record), contents)  # the next's previous
        unchecked: list[str] = []
        fired: list[Fired] = []
        compared: str | None = None
        if contents.problem is not None:
            unchecked.append(f"its tarball cannot be read: {contents.problem}")
        elif self.previous is not None:
            before: Contents | str | None = judge_.readings.get(
                _kept_as(self.name, self.previous))
            if before is None:
                self.begin()
                assert self._task is not None
                before = await judge_.read_previous(self.previous, await self._task, contents)
                if not isinstance(before, str):
                    judge_.readings.keep(_kept_as(self.name, self.previous), before)
            previous_manifest = self.previous.manifest()
            if isinstance(before, str):
                unchecked.append(before)
            else:
                compared = self.previous.version
                new = Release(version, contents, manifest_runs(manifest),
                              _dependencies(manifest), published, publishers_of(manifest))
                old = Release(self.previous.version, before, manifest_runs(previous_manifest),
                              _dependencies(previous_manifest))
                fired += [found for found in (check_install(new, old),
                                              check_obfuscation(new, old)) if found]
                added = sorted(set(new.dependencies) - set(old.dependencies))
                if added:
                    first, failed = await judge_.first_published(added)
                    unchecked += [f"the dependency {text} could not be looked up"
                                  for text in failed]
                    rules = judge_.rules.release
                    found = check_dependencies(new, old, first, rules.young, rules.young_text,
                                               now)
                    if found is not None:
                        fired.append(found)
            if contents.unread:
                log.info("release_read_partly", package=self.name.full, version=version,
                         unread=list(contents.unread))
        rules = judge_.rules.release
        popular = await asyncio.to_thread(popular_names)  # read once, on first use
        squat = check_typosquat(self.name.full, _first_published(self.gated),
                                judge_.installed_before(self.name.full), judge_.often(),
                                popular, rules.young, rules.young_text, now)
        if squat is not None:
            fired.append(squat)
        verdict = judge(judge_.rules, self.name.full, version, published, fired, now, compared)
        self.refused = self._settle(verdict, fired, unchecked, published, compared)
        return self.refused

    def _settle(self, verdict: ReleaseVerdict, fired: list[Fired], unchecked: list[str],
                published: datetime | None, compared: str | None) -> str | None:
        judge_ = self.judge
        metrics = judge_.metrics
        version = self.record.version
        for found in fired:
            outcome = ("denied" if verdict.rule == found.signal
                       else "reported" if any(r == found.signal for r, _ in verdict.reported)
                       else "excepted" if any(e.startswith(found.signal)
                                              for e in verdict.excepted)
                       else "allowed")
            metrics.release_signals.labels(found.signal, outcome).inc()
        if unchecked and not verdict.denied:
            # the analysis could not finish: never a silent pass. `unavailable = "deny"`
            # refuses it (not remembered: the next pull tries again), else it is served,
            # logged and counted as unchecked; in report mode the refusal is a would-deny
            metrics.release_checks.labels("unchecked").inc()
            deny = judge_.rules.release.unavailable == "deny"
            report = deny and judge_.rules.mode_of("release") == REPORT
            reason = (f"the release signals could not check it: {'; '.join(unchecked)}")
            log.warning("release_unchecked", package=self.name.full, version=version,
                        reason=reason, refused=deny and not report)
            metrics.events.record("release_unchecked", self.label, reason)
            if report:
                self._would_deny("release-unchecked", reason + ' (release.unavailable is '
                                 '"deny")', compared)
            elif deny:
                metrics.rule_denials.labels("release-unchecked", "enforce").inc()
                metrics.events.denied(self.label, "release-unchecked", reason)
                return reason + " (release.unavailable is \"deny\")"
            if not fired:
                return None
        judge_.remember(self.name.full, version, self.integrity,
                        _Facts(tuple(fired), published, compared))
        for rule, reason in verdict.reported:
            self._would_deny(rule, reason, compared)
        if not verdict.in_force(judge_.now()):
            outcome = "first-version" if self.previous is None else (
                "flagged" if fired else "clean")
            metrics.release_checks.labels(outcome).inc()
            log.info("release_checked", package=self.name.full, version=version,
                     outcome=outcome, compared_with=compared,
                     signals=[found.signal for found in fired])
            return None
        assert verdict.rule is not None
        assert verdict.reason is not None
        metrics.release_checks.labels("refused").inc()
        metrics.rule_denials.labels(verdict.rule, "enforce").inc()
        metrics.events.denied(self.label, verdict.rule, verdict.reason)
        judge_.forget(self.name)  # the packument is gated again, without this version
        details = [detail for found in fired if found.signal == verdict.rule
                   for detail in found.details]
        log.warning("release_signal_refused", security=True, package=self.name.full,
                    version=version, rule=verdict.rule, reason=verdict.reason,
                    compared_with=compared, evidence=details[:20])
        metrics.events.alert(Alert(
                "release-signal", self.label, f"{self.label} was refused by the "
                f"{verdict.rule} release signal: {verdict.reason}", self.name.full, version,
                {"where": "proxy", "rule": verdict.rule, "compared_with": compared or "",
                 "evidence": "; ".join(details[:20])}))
        return verdict.reason

    def _would_deny(self, rule: str, reason: str, compared: str | None) -> None:
        """What a release signal in report mode would have refused: served, and said as the
        packument rules say it (`version_would_deny`, the metric under `mode="report"`, the
        status page's would-deny list)."""
        metrics = self.judge.metrics
        metrics.rule_denials.labels(rule, REPORT).inc()
        metrics.events.record("would-deny", self.label, f"{rule}: {reason}")
        log.info("version_would_deny", package=self.name.full, version=self.record.version,
                 rule=rule, reason=reason, compared_with=compared, where="tarball")
