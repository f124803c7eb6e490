"""The release signals' judge: each version's verdict, kept as a record of the version, and
the I/O the verdicts need (the baseline's bytes, the new dependencies' first publish, the names
the organisation installs).

A pull asks `at_pull` once: a verdict in force, or a `ReleaseCheck` (`gate.verdicts.reading`) to
read the bytes as they relay. The worker, `prewarm` and `check` judge off the relay
(`verdict_for`). docs/serving.md#release-signals tells why it runs there; docs/verdicts.md,
the record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import structlog

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.records import Denial, Gated, RefusedBytes, VersionRecord
from mirrorgate.gate.verdicts.baseline import (
    Baseline,
    Budget,
    History,
    Unsettled,
    Whole,
    choose_baseline,
)
from mirrorgate.gate.verdicts.findings import (
    MAX_DEPENDENCIES_ASKED,
    Findings,
    Unread,
    kept_as,
    package_first_published,
    read_under,
    signals_text,
)
from mirrorgate.gate.verdicts.reading import ReleaseCheck
from mirrorgate.integrity import (
    DigestMismatch,
    SizeMismatch,
    StreamVerifier,
    TooLarge,
    Unverifiable,
    strongest_sri,
)
from mirrorgate.metrics import Metrics
from mirrorgate.npm.attestations import (
    MAX_ATTESTATIONS_BYTES,
    AttestationsError,
    Workflow,
    attestations_path,
    workflow_of,
)
from mirrorgate.npm.contents import (
    Contents,
    KeptReadings,
    contents_of,
)
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.npm.scripts import install_commands
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.npm.versions import newest_first
from mirrorgate.rules import REPORT, LiveRules, Rules
from mirrorgate.rules.kinship import provenance_repository
from mirrorgate.rules.release import (
    Dependency,
    Fired,
    ReleaseVerdict,
    judge,
)
from mirrorgate.rules.releasetable import (
    RELEASE_SIGNALS,
    TYPOSQUAT,
    YOUNG_PACKAGE_CAPABILITY,
    YOUNG_PACKAGE_INSTALL_SCRIPT,
)
from mirrorgate.rules.takeover import publishers_of
from mirrorgate.rules.typosquat import NameIndex
from mirrorgate.store import INSTALLED, Verdict
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError

__all__ = ["NOTHING", "OFTEN", "AtPull", "Judged", "ReleaseJudge"]

log = structlog.get_logger("mirrorgate.serve")

OFTEN = 3
"""Pulls of a name that make it one the organisation "installs often" (typosquat's own list)."""
_PUBLISHERS_READ = 20  # versions of a dependency whose publisher is read
_STEP = 256 * 1024  # bytes fed to a reading at a time
_AGES_KEPT = 16_384  # names whose first publish a pull noted, at most (oldest go)
_UNKEPT_NOTED = 16_384  # versions a report-mode pull judged and kept nothing for, at most
_WORKFLOWS_KEPT = 4_096  # versions whose provenance workflow is kept, at most (oldest go)
_AGE_NOTED_FOR = timedelta(minutes=10)  # how long a pull's note answers a job (`verdict_for`)
_ON_THE_NAME = frozenset({TYPOSQUAT, YOUNG_PACKAGE_INSTALL_SCRIPT, YOUNG_PACKAGE_CAPABILITY})
"""Not a baseline's flaw: words on the name and the package's age, not on what changed."""


def _publishers(gated: Gated) -> tuple[frozenset[str], frozenset[str]]:
    """Who publishes a package (its maintainers and the publishers of its newest versions),
    and the repositories its newest versions' provenance names."""
    found = set(publishers_of({"maintainers": gated.head.get("maintainers")}))
    repositories: set[str] = set()
    for version in newest_first(gated.versions)[:_PUBLISHERS_READ]:
        manifest = gated.versions[version].manifest()
        found |= publishers_of(manifest)
        repository = provenance_repository(manifest)
        if repository is not None:
            repositories.add(repository)
    return frozenset(found), frozenset(repositories)


def _feed(scan: ScriptScan, tarball: bytes) -> None:
    """A whole tarball held in memory, fed to a reading as the relay feeds a download, and
    settled on the same thread (`ScriptScan.settle`)."""
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        scan.feed(bytes(view[start:start + _STEP]))
    scan.settle()


@dataclass(frozen=True, slots=True)
class AtPull:
    """The release verdicts' word on one pull (`ReleaseJudge.at_pull`)."""

    refused: ReleaseVerdict | None = None
    """A verdict in force: the pull is refused with its evidence."""
    check: Callable[[], ReleaseCheck] | None = None
    """The bytes are to be read and judged as they stream (`ReleaseCheck`)."""


NOTHING = AtPull()


@dataclass(frozen=True, slots=True)
class Judged:
    """What reading and judging one release came to (`ReleaseJudge.read_and_judge`)."""

    refused: str | None
    """Why its bytes may not be served (None: they may)."""
    unread: bool = False
    """Its own bytes could not be fetched or read: no verdict at all."""
    unsettled: bool = False
    """No release it could be compared with was judged clean within the bound."""


class ReleaseJudge:
    """The release signals of one process: what they remember, and the I/O they need."""

    def __init__(self, *, rules: Rules | LiveRules, public: Upstream, metrics: Metrics,
                 packument: Callable[[PackageName], Awaitable[Gated | None]],
                 now: Callable[[], datetime], facts: KeptFacts | None = None,
                 previous_max_bytes: int, timeout: float,
                 forget: Callable[[PackageName], None] = lambda _name: None,
                 one_version: Callable[[PackageName, str], Awaitable[Gated | None]] | None = None,
                 history: Callable[[PackageName], Awaitable[History | None]] | None = None,
                 ) -> None:
        self._rules = rules
        self.history = history
        """A name's releases gated one at a time as the baseline walk reaches them
        (`PackumentSource.history`), for a pull judged on its version's gating alone; None
        (or its None): the whole packument's gating."""
        self.one_version = one_version
        """One version's gating (`Packuments.for_tarball`: the packument's when at hand), which
        `verdict_for` reads (a baseline is walked from `history`); None: the whole packument."""
        self.forget = forget
        """Drops a name's cached packument: a refusal then reaches it at once."""
        self.public = public
        self.metrics = metrics
        self.packument = packument
        self.now = now
        self.previous_max_bytes = previous_max_bytes
        self.timeout = timeout
        self.facts = facts if facts is not None else KeptFacts()
        self._decoded: OrderedDict[tuple[str, str, str], tuple[Verdict, Findings | None]] = \
            OrderedDict()
        """The findings of the verdicts read last, decoded (`remembered`), the least recently
        used forgotten first past what the kept verdicts can use (`_decode`)."""
        self._judging: dict[tuple[str, str, str], asyncio.Task[Judged]] = {}
        self._flagged: dict[str, set[tuple[str, str]]] | None = None
        """name -> the (version, integrity) a signal fired for."""
        self._counts: dict[str, int] = {}
        self._often: NameIndex | None = None
        self._ages: OrderedDict[str, tuple[datetime | None, datetime]] = OrderedDict()
        """name -> its first publish, as the last pull's packument said, and when noted."""
        self._unkept: OrderedDict[tuple[str, str, str], tuple[int, datetime]] = OrderedDict()
        """(name, version, integrity) -> the rules' generation and the moment a pull in report
        mode judged these bytes and kept no verdict (`unchecked`, `unsettled`): `note_unkept`."""
        self._whole: Whole | None = None
        self.readings = KeptReadings()
        """The last versions' readings: a predecessor read before is not fetched again."""
        self._workflows: OrderedDict[tuple[str, str, str], Workflow | str] = OrderedDict()
        """The workflow each version's provenance statement names, or why its document
        cannot be read, as the readings are kept: a baseline's is not fetched again."""
        self.facts.listeners.append(self._changed)

    def _changed(self, kind: str) -> None:
        """Another process kept a verdict or counted an install: rebuilt at the next use. A
        name whose flagged versions changed has its packument dropped: a revalidation that
        public answers "not modified" would otherwise keep serving what another replica
        refused until public changes."""
        if kind == "verdict":
            before = self._flagged or {}
            self._flagged = None
            after = self._flagged_index()
            for name in {*before, *after}:
                if before.get(name) != after.get(name):
                    with contextlib.suppress(InvalidNameError):
                        self.forget(parse_name(name))
        elif kind == INSTALLED:
            self._often = None

    @property
    def rules(self) -> Rules:
        rules = self._rules
        return rules.current if isinstance(rules, LiveRules) else rules

    def applies(self, record: VersionRecord, gated: Gated | None = None) -> bool:
        """Whether a pull of this version is read by the signals: they are on, and it is a
        public version not yet mirrored (a mirrored copy passed them, or predates them).
        With `young-package-install-script` alone on, only a young package's versions are
        read: an old package's first pulls cost nothing. The default's capability signals
        read every first pull (docs/serving.md "What a release's code can do")."""
        release = self.rules.release
        if not release.on or record.private or record.upstream_tarball is None:
            return False
        if release.only_young_package and gated is not None:
            first = package_first_published(gated)
            self._note_age(gated.name.full, first)
            # an age the times cannot establish is young's: read (`gate.packuments.times`)
            return first is None or self.now() - first < release.young_package
        return True

    def _note_age(self, name: str, first: datetime | None) -> None:
        self._ages[name] = (first, self.now())
        self._ages.move_to_end(name)
        while len(self._ages) > _AGES_KEPT:
            self._ages.popitem(last=False)

    def note_unkept(self, name: str, version: str, integrity: str) -> None:
        """A pull in report mode judged these bytes of `name@version` and kept no verdict (an
        unreadable baseline, no clean release within the bound): served, and said as a
        would-deny."""
        key = (name, version, integrity)
        self._unkept[key] = (self.rules.generation, self.now())
        self._unkept.move_to_end(key)
        while len(self._unkept) > _UNKEPT_NOTED:
            self._unkept.popitem(last=False)

    def _unkept_at_pull(self, name: str, version: str, integrity: str) -> bool:
        """Whether a pull minutes ago judged these bytes of `name@version` in report mode,
        under the rules in force now, and kept nothing (`verdict_for`)."""
        noted = self._unkept.get((name, version, integrity))
        if noted is None:
            return False
        rules = self.rules
        generation, when = noted
        return (generation == rules.generation and rules.mode_of("release") == REPORT
                and self.now() - when < _AGE_NOTED_FOR)

    def _old_at_pull(self, name: str) -> bool:
        """Whether a pull of `name` minutes ago found it an old package, so that with the
        default's young-package signal alone nothing of it is read (`verdict_for`)."""
        release = self.rules.release
        noted = self._ages.get(name)
        if not release.only_young_package or noted is None:
            return False
        first, when = noted
        now = self.now()
        return (now - when < _AGE_NOTED_FOR and first is not None
                and now - first >= release.young_package)

    def remembered(self, name: str, version: str, integrity: str) -> ReleaseVerdict | None:
        """The verdict for these bytes of a version (`integrity`, their strongest digest),
        read before, under the rules in force now; None when these bytes were never judged
        (a verdict on other bytes listed before under the same version never vouches)."""
        kept = self.facts.verdict(name, version, integrity)
        if kept is None:
            return None
        key = (name, version, integrity)
        decoded = self._decoded.get(key)
        if decoded is None or decoded[0] is not kept:
            decoded = (kept, Findings.of(kept))
        self._decode(key, decoded)
        facts = decoded[1]
        if facts is None:
            return None
        fired, whole = self._answered(kept, facts)
        verdict = judge(self.rules, name, version, facts.published, fired, self.now(),
                        facts.compared_with, integrity)
        if whole or verdict.in_force(self.now()):
            return verdict
        # read under fewer or other signals than are in force: what it found refuses nothing
        # now, and what the others would find is not in it, so the bytes are read again (a
        # refusal by what it did read stands meanwhile: more signals only refuse more)
        return None

    def _answered(self, kept: Verdict, facts: Findings) -> tuple[list[Fired], bool]:
        """What fired, among the signals in force a kept verdict answers for (those read under
        the same settings, `ReleaseRules.signals_in_force`), and whether it answers for all of them.
        A verdict an earlier release kept names no signals: what fired there still counts
        (fail closed: a refusal stands until it ends), and it answers for nothing else."""
        now_read = self.rules.release.signals_in_force(self.previous_max_bytes)
        read = read_under(kept)
        if read is not None and now_read <= read:
            return list(facts.fired), True
        tokens = {token.split(":", 1)[0]: token for token in now_read}
        return [found for found in facts.fired if found.signal in tokens
                and (read is None or tokens[found.signal] in read)], False

    def at_pull(self, name: PackageName, gated: Gated, record: VersionRecord,
                reading: bool) -> AtPull:
        """What the release verdicts say to one tarball pull, asked once: a verdict in force
        (the 403 with its evidence), or a check to read the bytes with (`reading`: a GET of a
        public version they never judged), or nothing. A mirrored copy is asked only once a
        release signal denies it (report mode, then enforced)."""
        denial = record.denial
        if denial is not None and denial.rule not in RELEASE_SIGNALS:
            return NOTHING
        if record.private and denial is None:
            return self._read_again(name, gated, record, reading)
        # the bytes this pull would serve: a verdict on others under the same version (the
        # registry lists it again with another `dist.integrity`) neither vouches nor refuses
        verdict = self.remembered(name.full, record.version, record.integrity())
        if verdict is not None and verdict.in_force(self.now()):
            return AtPull(verdict, None)
        if verdict is None and reading and denial is None and self.applies(record, gated):
            return AtPull(None, lambda: self.check(name, gated, record))
        return NOTHING

    def _read_again(self, name: PackageName, gated: Gated, record: VersionRecord,
                    reading: bool) -> AtPull:
        """A mirrored copy served as it is, unless its bytes' verdict was read under fewer or
        other signals than are in force and finds nothing they refuse: then read again as
        they stream from the mirror (kept clean under the young-package signal alone, say,
        before every signal was turned on). A copy no verdict was kept for (mirrored before
        the signals, or of a package they did not read) is served as before."""
        if not reading or not self.rules.release.on or record.upstream_tarball is None:
            return NOTHING  # a first-party version, or one public no longer lists the same
        integrity = strongest_sri(record.digests)  # public's, which the copy's mark names
        kept = self.facts.verdict(name.full, record.version, integrity)
        if kept is None or self.remembered(name.full, record.version, integrity) is not None:
            return NOTHING
        return AtPull(None, lambda: self.check(name, gated, record))

    def refused_versions(self, name: str) -> RefusedBytes:
        """The bytes of `name`'s versions a release signal refuses now, as the gate denies
        them (other bytes of the same versions are judged at their own pull)."""
        found: dict[str, dict[str, Denial]] = {}
        now = self.now()
        for version, integrity in sorted(self._flagged_index().get(name, ())):
            verdict = self.remembered(name, version, integrity)
            if verdict is not None and verdict.in_force(now):
                assert verdict.rule is not None
                found.setdefault(version, {})[integrity] = Denial(
                    verdict.rule, verdict.reason or "refused", until=verdict.until)
        return found

    def _flagged_index(self) -> dict[str, set[tuple[str, str]]]:
        if self._flagged is None:
            self._flagged = {}
            for kept in self.facts.verdicts():
                if kept.verdict == "flagged":
                    self._flagged.setdefault(kept.name, set()).add(
                        (kept.version, kept.integrity))
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

    async def fetch_previous(self, name: PackageName, record: VersionRecord) -> bytes | Unread:
        """A release's tarball, verified (the baseline's, or one judged off the relay:
        `read_and_judge`), or why it cannot be had (`Unread`: the publisher's doing or an
        outage)."""
        url = record.upstream_tarball
        assert url is not None  # only versions with a public URL are baselines or judged
        try:
            verifier = StreamVerifier(record.digests, expected_size=None,
                                      limit=self.previous_max_bytes)
        except Unverifiable:
            return Unread(f"{record.version} carries no digest to verify its bytes against")
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout), self.public.stream(
                    url, pool=TARBALLS) as body:
                if body is None:
                    return Unread(f"the public registry has no tarball for {record.version}")
                verifier.declared_length(body.size)
                async for chunk in body.chunks:
                    verifier.update(chunk)
                    chunks.append(chunk)
            verifier.finish()
        except TooLarge as error:
            # the publisher chose the size: a padded previous version would otherwise
            # leave the next one unchecked (MIRRORGATE_RELEASE_PREVIOUS_MAX_BYTES)
            return Unread(f"{record.version}'s tarball was not read: {error}", publishers=True)
        except (SizeMismatch, DigestMismatch) as error:
            # the public registry's bytes are not those its document names: its fault
            return Unread(f"{record.version}'s tarball was not read: {error}")
        except UpstreamError as error:
            return Unread(f"{record.version}'s tarball could not be fetched: {error}")
        except TimeoutError:
            return Unread(f"{record.version}'s tarball was not fetched within "
                           f"{self.timeout:g} s")
        return b"".join(chunks)

    async def workflow(self, name: PackageName, record: VersionRecord) -> Workflow | str:
        """The workflow `record`'s provenance statement names, from the public upstream's
        attestations document (bounded in time and size like a baseline's tarball), or why
        it was not read: said in the verdict, never a refusal and never a pass. Read once per
        version and kept; an outage is not kept (the next verdict asks again)."""
        key = kept_as(name, record)
        found = self._workflows.get(key)
        if found is not None:
            self._workflows.move_to_end(key)
            return found
        found, keep = await self._read_workflow(name, record.version)
        self.metrics.release_attestations.labels(
            "read" if isinstance(found, Workflow) else "unread").inc()
        if not isinstance(found, Workflow):
            log.warning("release_attestations_unread", package=name.full,
                        version=record.version, reason=found)
        if keep:
            self._workflows[key] = found
            while len(self._workflows) > _WORKFLOWS_KEPT:
                self._workflows.popitem(last=False)
        return found

    async def _read_workflow(self, name: PackageName,
                             version: str) -> tuple[Workflow | str, bool]:
        """`workflow`'s fetch and reading, and whether what it came to is the document's own
        (kept) rather than an outage's."""
        try:
            async with asyncio.timeout(self.timeout):
                # the configured public upstream's path, never `dist.attestations.url`'s host
                answer = await self.public.get_json(attestations_path(name, version),
                                                    parse=False)
                if answer.status != 200:
                    return (f"the public registry has no attestations document for {version}",
                            False)
                if answer.size > MAX_ATTESTATIONS_BYTES:
                    return (f"its attestations document is {answer.size:,} bytes, over the "
                            f"{MAX_ATTESTATIONS_BYTES:,} read", True)
                document = (await self.public.parsed(answer)).document
        except UpstreamError as error:
            if error.kind == "invalid":  # not JSON: the document's own shape
                return f"its attestations document cannot be read: {error}", True
            return f"its attestations document could not be fetched: {error}", False
        except TimeoutError:
            return (f"its attestations document was not fetched within {self.timeout:g} s",
                    False)
        try:
            assert document is not None  # a 200 parsed
            return workflow_of(document, name, version), True
        except AttestationsError as error:
            return f"its attestations document cannot be read: {error}", True

    async def read_previous(self, record: VersionRecord, fetched: bytes | Unread,
                            new: Contents) -> Contents | Unread:
        """The previous version's contents (its files unchanged in `new` not measured again),
        or why they cannot be had."""
        if isinstance(fetched, Unread):
            return fetched
        contents = await asyncio.to_thread(
            partial(contents_of, lean=new.lean, commands=install_commands(record.manifest())),
            fetched, new.code)
        if contents.problem is not None:
            return Unread(f"{record.version}'s tarball cannot be read: {contents.problem}",
                           publishers=True)
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
                found[text] = Dependency(package_first_published(gated), *_publishers(gated))

        await asyncio.gather(*(one(text) for text in asked))  # cached, single-flight fills
        return found, failed

    def clean(self, name: str, record: VersionRecord) -> bool | None:
        """Whether a release's kept verdict lets it vouch for a later release: nothing but
        typosquat or young-package-install-script (words on the name and the package's age,
        not on what changed in these bytes) fired, or what fired the rules now let through
        whole (an allow entry, a signal turned off); None: the bytes it lists now were never
        judged."""
        version, integrity = record.version, record.integrity()
        kept = self.facts.verdict(name, version, integrity)
        if kept is None or (facts := Findings.of(kept)) is None:
            return None
        answered, whole = self._answered(kept, facts)
        # a young package's every release with a hook fires young-package-install-script: were
        # it to count, none of its first month's releases could vouch, and each later one
        # would be judged as a first version, nothing compared
        fired = [found for found in answered if found.signal not in _ON_THE_NAME]
        if fired:
            verdict = judge(self.rules, name, version, facts.published, fired, self.now(),
                            facts.compared_with, integrity)
            if verdict.denied or verdict.reported or verdict.excepted:
                return False
        # clean by what it was read for; read under fewer signals than are in force, it
        # cannot vouch for what the others would find: as if never judged
        return True if whole else None

    async def baseline(self, name: PackageName, gated: Gated, version: str,
                       budget: Budget, history: History | None = None) -> Baseline | Unsettled:
        """The release `version` is compared with (`gate.verdicts.baseline`), among `history`'s
        releases (else `gated`'s, a whole packument's gating): releases never judged are read
        and judged first, on `budget`, each with the same history."""
        releases = history if history is not None else self._whole_of(gated)
        return await choose_baseline(
            releases, version, judged=lambda record: self.clean(name.full, record),
            judge_first=lambda record: self.judge_read(
                name, releases.gated(record.version), record, budget, releases),
            budget=budget, settled_after=self.rules.release.quarantine, now=self.now(),
            doubts=releases.doubts())

    def _whole_of(self, gated: Gated) -> Whole:
        """`gated` as the walk's history, its contradictions (`gate.packuments.times`) read once
        per packument: a walk's nested choices share it."""
        if self._whole is None or self._whole.whole is not gated:
            self._whole = Whole(gated)
        return self._whole

    async def judge_read(self, name: PackageName, gated: Gated, record: VersionRecord,
                         budget: Budget | None = None,
                         history: History | None = None) -> bool | None:
        """Read `record`'s bytes and judge them now (`read_and_judge`): True when the verdict
        kept is clean, False when it is not or no clean release could be compared with within
        the bound, None when its bytes could not be read (an outage, not a verdict)."""
        judged = await self.read_and_judge(name, gated, record, budget, history=history)
        clean = self.clean(name.full, record)
        if clean is not None:
            return clean
        return None if judged.unread or not judged.unsettled else False

    async def read_and_judge(self, name: PackageName, gated: Gated, record: VersionRecord,
                             budget: Budget | None = None, tarball: bytes | None = None,
                             history: History | None = None) -> Judged:
        """Read `record`'s bytes and judge them as a first pull would (a read that failed is
        never a verdict: nothing is kept, and it is read again next time): `tarball` when the
        caller holds them, verified against `record`'s digests (the worker's one download),
        else fetched from public, bounded and verified. One read per version at a time,
        however many ask."""
        key = kept_as(name, record)
        running = self._judging.get(key)
        if running is None:
            running = asyncio.get_running_loop().create_task(
                self._read_and_judge(name, gated, record, budget or Budget(), tarball,
                                     history))
            self._judging[key] = running
            running.add_done_callback(lambda _task: self._judging.pop(key, None))
        return await asyncio.shield(running)

    async def _read_and_judge(self, name: PackageName, gated: Gated, record: VersionRecord,
                              budget: Budget, tarball: bytes | None,
                              history: History | None) -> Judged:
        # bytes read before (the relay's pull seconds before the worker's job asks, or a
        # baseline's) are neither fetched nor read again: the same bytes, by their strongest
        # digest, read the same (`KeptReadings`)
        kept = self.readings.get(kept_as(name, record))
        if kept is not None and kept.lean != self.rules.release.lean:
            kept = None  # read for other signals than those in force now: read again
        check = ReleaseCheck(self, name, gated, record, budget, read=kept, history=history)
        try:
            check.begin()  # the baseline chosen and fetched beside this read
            if kept is None:
                # the caller's verified bytes are read as they are: a job's tarball is
                # downloaded once, by the worker, under its own cap (MAX_TARBALL_BYTES)
                fetched = (tarball if tarball is not None
                           else await self.fetch_previous(name, record))
                if isinstance(fetched, Unread):
                    log.warning("release_read_failed", package=name.full,
                                version=record.version, reason=fetched.reason,
                                publishers=fetched.publishers)
                    return Judged(f"its bytes could not be read: {fetched.reason}",
                                  unread=True)
                await asyncio.to_thread(_feed, check.scan, fetched)
            refused = await check.verdict()
            return Judged(refused, unsettled=check.unsettled is not None)
        finally:
            check.close()

    async def verdict_for(self, name: PackageName, version: str, integrity: str, *,
                          gated: Gated | None = None,
                          tarball: bytes | None = None) -> ReleaseVerdict | str | None:
        """The verdict on these bytes of `name@version` (`integrity`: the strongest digest of
        the job's, the lockfile's, the packument's) under the rules in force, read and judged
        now when they never were (the worker's re-gate, `prewarm`, `check`); a sentence when
        no verdict can be kept (unchecked, unsettled, or public lists other bytes now: a
        refusal for whoever asks); None when the signals do not apply to it (off, a
        first-party or unknown version).

        The worker hands what it has: `gated`, its own gating of public's version (the
        re-gate's: not filled again), and `tarball`, the bytes it downloaded and verified
        against `integrity` (read as they are: not downloaded again)."""
        if not self.rules.release.on:
            return None
        remembered = self.remembered(name.full, version, integrity)
        if remembered is not None:
            return remembered
        if self._old_at_pull(name.full):
            # the worker beside the proxy, seconds after the pull that enqueued the job: the
            # pull found an old package, which the default's young-package signal alone does
            # not read; filling its packument again (evicted since, on a cold install of
            # thousands of names) only to learn that would cost a fill per job
            return None
        if self._unkept_at_pull(name.full, version, integrity):
            # the worker beside the proxy, seconds after the pull that judged these bytes in
            # report mode and kept nothing: judged again, the verdict could be no more than a
            # would-deny (report mode refuses nothing) and the job is mirrored either way; the
            # whole packument filled again, the baselines fetched again, for a log line. The
            # next pull judges it again; a reload (another generation, enforce) judges here.
            return None
        # the version's own gating carries what is read (its record, the package's first
        # publish), and a baseline is walked from the releases gated one at a time as it
        # reaches them (`ReleaseCheck`): a job's packument is not filled whole
        if gated is None:
            gated = await (self.packument(name) if self.one_version is None
                           else self.one_version(name, version))
        record = gated.versions.get(version) if gated is not None else None
        if gated is None or record is None or not self.applies(record, gated):
            return None
        listed = record.integrity()
        if listed != integrity:
            # the bytes asked about are not those public lists now (republished under the
            # same version): they cannot be fetched to be read, and the ones listed are
            # judged at their own pull
            return (f"the public registry now lists other bytes for {version} "
                    f"({listed or 'no digest'}) than those asked about "
                    f"({integrity or 'no digest'}); they are judged at their first pull")
        judged = await self.read_and_judge(name, gated, record, tarball=tarball)
        remembered = self.remembered(name.full, version, integrity)
        return remembered if remembered is not None else judged.refused

    def remember(self, name: str, version: str, integrity: str, facts: Findings) -> None:
        """Keep what the signals found as the version's verdict (memory now, the store in the
        background), read back under the rules in force at each pull (`remembered`)."""
        kept = Verdict(name, version, integrity, "flagged" if facts.fired else "clean",
                       facts.evidence(), facts.compared_with,
                       signals_text(self.rules.release.signals_in_force(self.previous_max_bytes)))
        self.facts.keep(kept)
        if facts.fired:
            self._flagged_index().setdefault(name, set()).add((version, integrity))
        self._decode((name, version, integrity), (kept, facts))

    def _decode(self, key: tuple[str, str, str],
                decoded: tuple[Verdict, Findings | None]) -> None:
        """`decoded` held as the newest of `_decoded`, which holds no more entries than
        `KeptFacts` holds verdicts: one whose verdict it forgot is decoded again anyway. An
        entry holds its verdict, so the memo cleared only when it was read back grew by every
        verdict kept since (and kept each one `KeptFacts` had forgotten): row 13 of the faults
        table, 50,000 distinct first pulls, held all 50,000."""
        self._decoded[key] = decoded
        self._decoded.move_to_end(key)
        while len(self._decoded) > self.facts.held:
            self._decoded.popitem(last=False)
