"""One version's first read by the release signals (`ReleaseCheck`), riding on its relay.

The relay feeds the reading (`npm.contents`, on the hashing lane) while `begin()` chooses the
baseline (`gate.verdicts.baseline`) and fetches its tarball; once the last byte is in, `verdict()`
runs the checks of `rules.release` and the judge (`gate.verdicts.judge`) keeps the findings as the
version's record. Apart from the judge so that the judge stays what a pull asks, and this what
one reading does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Protocol

import orjson
import structlog

from mirrorgate.events import Alert
from mirrorgate.gate.records import Gated, VersionRecord
from mirrorgate.gate.verdicts.baseline import Baseline, Budget, History, Unsettled
from mirrorgate.gate.verdicts.capabilities import capability_findings
from mirrorgate.gate.verdicts.findings import (
    MAX_DEPENDENCIES_ASKED,
    UNSETTLED,
    Findings,
    Unread,
    kept_as,
    package_first_published,
    release_of,
)
from mirrorgate.metrics import Metrics
from mirrorgate.moments import moment, stamp
from mirrorgate.npm.attestations import Workflow, has_provenance
from mirrorgate.npm.contents import ContentReading, Contents, KeptReadings
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.scripts import install_commands
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.rules import REPORT, Rules
from mirrorgate.rules.capabilities import can_gain, of_release
from mirrorgate.rules.provenance import provenance_evidence
from mirrorgate.rules.release import (
    Dependency,
    Fired,
    Release,
    ReleaseVerdict,
    added_packages,
    check_dependencies,
    check_install,
    check_obfuscation,
    check_outside,
    check_typosquat,
    check_unreadable,
    check_young_package,
    judge,
)
from mirrorgate.rules.releasetable import NEW_CAPABILITY, TYPOSQUAT
from mirrorgate.rules.typosquat import NameIndex, popular_names

__all__ = ["Judging", "ReleaseCheck"]

log = structlog.get_logger("mirrorgate.serve")


class Judging(Protocol):
    """What one reading asks of the judge that started it (`gate.verdicts.judge`), declared
    here so that the judge imports the reading and the reading never imports the judge."""

    @property
    def rules(self) -> Rules: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def readings(self) -> KeptReadings: ...
    @property
    def now(self) -> Callable[[], datetime]: ...
    @property
    def forget(self) -> Callable[[PackageName], None]: ...
    @property
    def packument(self) -> Callable[[PackageName], Awaitable[Gated | None]]: ...
    @property
    def history(self) -> Callable[[PackageName], Awaitable[History | None]] | None: ...

    def installed_before(self, name: str) -> bool: ...
    def often(self) -> NameIndex: ...
    def note_unkept(self, name: str, version: str, integrity: str) -> None: ...
    def remember(self, name: str, version: str, integrity: str, facts: Findings) -> None: ...
    async def baseline(self, name: PackageName, gated: Gated, version: str, budget: Budget,
                       history: History | None = None) -> Baseline | Unsettled: ...
    async def fetch_previous(self, name: PackageName,
                             record: VersionRecord) -> bytes | Unread: ...
    async def workflow(self, name: PackageName, record: VersionRecord) -> Workflow | str: ...
    async def read_previous(self, record: VersionRecord, fetched: bytes | Unread,
                            new: Contents) -> Contents | Unread: ...
    async def first_published(self, names: list[str]) -> tuple[dict[str, Dependency | None],
                                                               list[str]]: ...


class ReleaseCheck:
    """One version's first pull, read by the release signals. The relay feeds `scan` and calls
    `begin()` when its download starts, `verdict()` once every byte is read (the last chunk
    held back meanwhile), and `close()` in any case."""

    def __init__(self, judge_: Judging, name: PackageName, gated: Gated,
                 record: VersionRecord, budget: Budget | None = None,
                 read: Contents | None = None, history: History | None = None) -> None:
        self.judge = judge_
        self.history = history
        """The releases the baseline is chosen from when the caller holds them (a release
        judged first, in its successor's walk); None: found when the walk starts."""
        self.read = read
        """These bytes' reading when it is kept from an earlier read (`KeptReadings`: the
        relay's, seconds before a job asks): `verdict()` takes it, nothing is fed."""
        self.name = name
        self.gated = gated
        self.record = record
        self.manifest = record.manifest()
        """The registry's manifest of the version, parsed once (`verdict()` reads it too)."""
        # the registry manifest's hooks: the files they run are read with those the
        # tarball's package.json runs (a lean reading reads no other file it holds)
        self.reading = ContentReading(lean=judge_.rules.release.lean,
                                      commands=install_commands(self.manifest))
        self.budget = budget if budget is not None else Budget()
        self.previous: VersionRecord | None = None
        """The release compared with, once `baseline` chose it (`gate.verdicts.baseline`); stays
        None when no signal that compares is on (`release.compares`)."""
        self.unsettled: str | None = None
        """Why no clean release could be compared with, when none could (a refusal)."""
        self.times: tuple[str, ...] = gated.time_doubts
        """What in the packument's times was not believed (the package's first publish, and
        why the baseline was chosen by version order), named in the verdict's evidence."""
        self._task: asyncio.Task[bytes | Contents | Unread | None] | None = None
        self._built: asyncio.Task[list[Workflow | str]] | None = None
        """The workflows this release's and its baseline's provenance statements name, when
        both carry provenance (`_fetch_workflows`)."""
        self.refused: str | None = None
        """Why `verdict()` refused the bytes, once it has."""
        self.looked = False
        """Whether a release to compare with was looked for (`verdict()`)."""
        self.built: str | None = None
        """Where this release was built against where its baseline was (`rules.provenance`),
        kept with the findings whatever the verdict; None when neither carries provenance."""

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
        return self.record.integrity()

    def begin(self, *, late: bool = False) -> None:
        """Start choosing the release to compare with and fetching its bytes, beside the
        download of these; with `new-capability` the only signal that compares, only once
        the bytes are read (`late`) and show a capability that could be gained."""
        if self._task is None and (late or self.judge.rules.release.compares_early):
            self._task = asyncio.get_running_loop().create_task(self._baseline_bytes())

    async def _baseline_bytes(self) -> bytes | Contents | Unread | None:
        """The baseline's bytes (or why they cannot be had), or its reading when this process
        read it before (`KeptReadings`: neither fetched nor read again); None when there is no
        baseline (`previous` None: a first version, `unsettled`, or no signal that compares
        on)."""
        if not self.judge.rules.release.compares:
            # only a signal that compares reads an earlier release: with none (the
            # young-package-install-script signal alone) no baseline is chosen, judged or
            # fetched
            return None
        gated, history = self.gated, self.history
        try:
            if history is None and gated.alone is not None and self.judge.history is not None:
                # one version's gating (a tarball's cold admission, `gate(only=)`) has no
                # history to choose from: the releases before it, each gated alone as the
                # walk reaches it (`gate.packuments.lazyhistory`), not the whole packument's
                # thousands
                history = await self.judge.history(self.name)
            if history is None and gated.alone is not None:
                # a first-party name, an upstream failing, no lazy history at all: the whole
                # packument's, lest a release look like a first version
                gated = await self.judge.packument(self.name) or gated
        except Exception as error:  # an upstream failure, whatever the fill raised
            self.unsettled = f"its packument could not be read ({type(error).__name__})"
            return None
        try:
            chosen = await self.judge.baseline(self.name, gated, self.record.version,
                                               self.budget, history)
        except orjson.JSONDecodeError as error:
            # a release's value in the lazily read packument is not JSON (`npm.lazydoc`):
            # the whole packument's fill refuses such a document
            self.unsettled = f"its packument could not be read ({type(error).__name__})"
            return None
        if isinstance(chosen, Unsettled):
            self.unsettled = chosen.reason
            return None
        self.times = (*self.times, *chosen.doubts)
        if chosen.passed_over:
            log.info("release_baseline_passed_over", package=self.name.full,
                     version=self.record.version, passed_over=list(chosen.passed_over),
                     compared_with=chosen.record.version if chosen.record else None)
        self.previous = chosen.record
        if chosen.record is None:
            return None
        self._fetch_workflows(chosen.record)
        kept = self.judge.readings.get(kept_as(self.name, chosen.record))
        if kept is not None and kept.lean == self.reading.lean:
            # a baseline read before lends its marks to this version's unchanged files (from
            # the bytes fed next on), and needs no fetch: the same bytes read the same
            self.reading.lend(kept.code)
            return kept
        return await self.judge.fetch_previous(self.name, chosen.record)

    def _fetch_workflows(self, previous: VersionRecord) -> None:
        """Both this release and its baseline carry provenance: the workflow each statement
        names is fetched beside the baseline's bytes, for the verdict's evidence
        (`rules.provenance`). Only here, where a verdict compares the two: never on a warm
        pull, never for a release compared with nothing."""
        if not (has_provenance(self.manifest) and has_provenance(previous.manifest())):
            return

        async def both() -> list[Workflow | str]:
            return list(await asyncio.gather(self.judge.workflow(self.name, self.record),
                                             self.judge.workflow(self.name, previous)))

        self._built = asyncio.get_running_loop().create_task(both())

    def close(self) -> None:
        for task in (self._task, self._built):
            if task is not None and not task.done():
                task.cancel()

    async def verdict(self) -> str | None:
        """Every byte read: None when the bytes may leave, else the reason they may not (the
        denial is remembered, logged, counted and on the status page)."""
        judge_ = self.judge
        version = self.record.version
        now = judge_.now()
        published = moment(self.gated.time.get(version))
        if published is None:
            # no time its registry gives that can be read: a quarantine runs from this first
            # read, as for a version published now (one measured from each judging would
            # never end), and the record says so
            published = now
            self.times = (*self.times, f"{version} has no publish time mirrorgate can read: "
                          f"a quarantine runs from its first read, {stamp(now)}")
        manifest = self.manifest
        contents = self.read if self.read is not None else self.reading.contents()
        if judge_.rules.release.compares:
            # a later release's baseline, read once; with no signal that compares (the
            # young-package-install-script signal alone) no baseline is ever read, so nothing
            # is held
            judge_.readings.keep(kept_as(self.name, self.record), contents)
        unchecked: list[str] = []  # outages of mirrorgate's sources: release.unavailable
        unreadable: list[str] = []  # the publisher's own shape: a refusal (fail closed)
        fired: list[Fired] = []
        compared: str | None = None
        before_capabilities: Release | None = None  # the baseline, when its bytes were read
        own = release_of(version, manifest, contents if contents.problem is None
                         else Contents(problem=contents.problem), published)
        looked = self.looked = judge_.rules.release.compares_early or (
            judge_.rules.release.action(NEW_CAPABILITY) != "off" and can_gain(of_release(own)))
        self.begin(late=looked)
        fetched = await self._task if self._task is not None else None
        if contents.problem is not None:
            unreadable.append(f"its tarball cannot be read: {contents.problem}")
        if self.previous is not None:
            previous_manifest = self.previous.manifest()
            before: Contents | Unread = Unread("its own tarball cannot be read")
            if contents.problem is None and fetched is not None:
                if isinstance(fetched, Contents):
                    before = fetched  # kept from an earlier read (`_baseline_bytes`)
                else:
                    before = await judge_.read_previous(self.previous, fetched, contents)
                    if isinstance(before, Contents):
                        judge_.readings.keep(kept_as(self.name, self.previous), before)
            if isinstance(before, Unread):
                if contents.problem is None:
                    (unreadable if before.publishers else unchecked).append(before.reason)
                # what the registry manifests say runs and installs needs no bytes: still
                # compared, so an unread tarball never hides a declared postinstall
                new = release_of(version, manifest, Contents(), published)
                old = release_of(self.previous.version, previous_manifest, Contents())
            else:
                new = release_of(version, manifest, contents, published)
                old = release_of(self.previous.version, previous_manifest, before)
                before_capabilities = old
                found = check_obfuscation(new, old)
                if found is not None:
                    fired.append(found)
            compared = self.previous.version
            fired += [found for found in (check_install(new, old), check_outside(new, old))
                      if found]
            added = sorted(added_packages(new, old))
            if added:
                if len(added) > MAX_DEPENDENCIES_ASKED:
                    unreadable.append(
                        f"it adds {len(added)} dependencies, more than the "
                        f"{MAX_DEPENDENCIES_ASKED} looked up ({', '.join(added[:3])}...)")
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
        unread_fired = check_unreadable(unreadable)
        if unread_fired is not None:
            fired.append(unread_fired)
        rules = judge_.rules.release
        young_package = check_young_package(own, package_first_published(self.gated),
                                            rules.young_package, rules.young_package_text, now)
        if young_package is not None:
            fired.append(young_package)
        if self.previous is not None:
            # where each was built, said whatever the verdict (`rules.provenance`)
            old_built = before_capabilities if before_capabilities is not None else \
                release_of(self.previous.version, self.previous.manifest(), Contents())
            if self._built is not None:
                # fetched beside the baseline's bytes, each within the judge's timeout
                now_workflow, then_workflow = await self._built
                own = replace(own, built=now_workflow)
                old_built = replace(old_built, built=then_workflow)
                if before_capabilities is not None:
                    before_capabilities = old_built
            self.built = provenance_evidence(own, old_built)
        fired += capability_findings(own, self.previous, before_capabilities, self.gated,
                                     rules, now, looked=looked and self.unsettled is None)
        if rules.action(TYPOSQUAT) != "off":
            # the widely used names' index (some 7 MiB, built once on first use, `typosquat`)
            # only for a rule that reads it: off by default, it was built at the first pull
            # of any package and held for the process's life (row 13 of the faults table)
            popular = await asyncio.to_thread(popular_names)
            squat = check_typosquat(self.name.full, package_first_published(self.gated),
                                    judge_.installed_before(self.name.full), judge_.often(),
                                    popular, rules.young, rules.young_text, now)
            if squat is not None:
                fired.append(squat)
        # what a signal that is off found refuses nothing, and kept it would make the verdict
        # a refusal (`KeptFacts` holds those apart, never pushed out by clean ones, and never
        # dropped on the way to the store) and keep its evidence: not kept. The verdict says
        # which signals it was read under, so turning one on reads the bytes again.
        fired = [found for found in fired if rules.action(found.signal) != "off"]
        verdict = judge(judge_.rules, self.name.full, version, published, fired, now, compared,
                        self.integrity)
        if self.unsettled is not None and not verdict.denied:
            self.refused = self._unsettled(self.unsettled)
        else:
            self.refused = self._settle(verdict, fired, unchecked, published, compared)
        return self.refused

    def _unsettled(self, why: str) -> str | None:
        """No clean release to compare with within the bound: refused whatever
        `release.unavailable` says (it is the publisher's doing, not an outage), a would-deny
        in report mode; not remembered, so a later pull judges it again."""
        metrics = self.judge.metrics
        metrics.release_checks.labels("unsettled").inc()
        reason = f"no release it could be compared with was judged clean: {why}"
        report = self.judge.rules.mode_of("release") == REPORT
        log.warning("release_unsettled", package=self.name.full, version=self.record.version,
                    reason=reason, refused=not report)
        if report:
            self._would_deny(UNSETTLED, reason, None)
            self.judge.note_unkept(self.name.full, self.record.version, self.integrity)
            return None
        metrics.rule_denials.labels(UNSETTLED, "enforce").inc()
        metrics.events.denied(self.label, UNSETTLED, reason)
        return reason

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
                if judge_.rules.mode_of("release") == REPORT:  # the worker's job: served
                    judge_.note_unkept(self.name.full, version, self.integrity)
                return None
        judge_.remember(self.name.full, version, self.integrity,
                        Findings(tuple(fired), published, compared, self.times, self.built))
        for rule, reason in verdict.reported:
            self._would_deny(rule, reason, compared)
        if not verdict.in_force(judge_.now()):
            outcome = "first-version" if self.previous is None and self.looked else (
                "flagged" if fired else "clean")
            metrics.release_checks.labels(outcome).inc()
            log.info("release_checked", package=self.name.full, version=version,
                     outcome=outcome, compared_with=compared,
                     signals=[found.signal for found in fired], times=list(self.times),
                     built=self.built)
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
                    compared_with=compared, evidence=details[:20], times=list(self.times),
                    built=self.built)
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
