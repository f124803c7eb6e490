"""The release signals' I/O: the baseline's bytes, the new dependencies' first publish, the
names the organisation installs, and each version's verdict, kept as a record of the version.

`ReleaseCheck` rides on the relay of a version's first public pull: the relay feeds its reading
(`npm.contents`, on the hashing lane, beside the loop) while this chooses the baseline
(`gate.baseline`) and fetches its tarball (bounded, verified, read in a thread) and, once the
last byte is in, the checks of `rules.release` run and the verdict is kept in the state store
(`facts`). The worker, `prewarm` and `check` judge off the relay (`verdict_for`).
docs/serving.md#release-signals tells why it runs there; docs/verdicts.md, the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from mirrorgate.events import Alert
from mirrorgate.gate.baseline import Baseline, Budget, Unsettled, choose_baseline
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
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS
from mirrorgate.npm.specs import installed_dependencies
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.npm.versions import newest_first
from mirrorgate.rules import REPORT, LiveRules, Rules
from mirrorgate.rules.kinship import provenance_repository
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
from mirrorgate.rules.releasetable import (
    RELEASE_SIGNALS,
    TYPOSQUAT,
    YOUNG_PACKAGE_INSTALL_SCRIPT,
)
from mirrorgate.rules.takeover import publishers_of
from mirrorgate.rules.typosquat import NameIndex, popular_names
from mirrorgate.store import INSTALLED, Verdict
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError

__all__ = ["MAX_DEPENDENCIES_ASKED", "OFTEN", "UNSETTLED", "AtPull", "ReleaseCheck",
           "ReleaseJudge"]

log = structlog.get_logger("mirrorgate.serve")

OFTEN = 3
"""Pulls of a name that make it one the organisation "installs often" (typosquat's own list)."""
MAX_DEPENDENCIES_ASKED = 20
"""New dependencies of one release whose first publish is looked up at most; more are a
refusal (`unreadable-release`): the publisher chose how many to add."""
_PUBLISHERS_READ = 20  # versions of a dependency whose publisher is read
_STEP = 256 * 1024  # bytes fed to a reading at a time
_AGES_KEPT = 16_384  # names whose first publish a pull noted, at most (oldest go)
_AGE_NOTED_FOR = timedelta(minutes=10)  # how long a pull's note answers a job (`verdict_for`)
_ON_THE_NAME = frozenset({TYPOSQUAT, YOUNG_PACKAGE_INSTALL_SCRIPT})  # not a baseline's flaw
UNSETTLED = "release-unchecked"
"""The rule a version is refused by when no release it could be compared with was judged
clean within the bound (`gate.baseline`): the signals' own "could not check"."""


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


def _first_published(gated: Gated) -> datetime | None:
    return first_published(gated.time)


def first_published(time: Mapping[str, Any]) -> datetime | None:
    """A package's first publish, from its packument's `time` map."""
    created = moment(time.get("created"))
    times = [when for key, value in time.items() if key not in ("created", "modified")
             and (when := moment(value)) is not None]
    candidates = [*times, *([created] if created is not None else [])]
    return min(candidates) if candidates else None


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


def _dependencies(manifest: Mapping[str, Any]) -> dict[str, str]:
    """What npm installs for it, by key (peers included), as the specs it reads them from."""
    return {key: how.spec for key, how in installed_dependencies(manifest).items()}


def _commands(manifest: Mapping[str, Any]) -> dict[str, str]:
    scripts = manifest.get("scripts")
    if not isinstance(scripts, Mapping):
        return {}
    return {key: scripts[key] for key in INSTALL_SCRIPT_KEYS
            if isinstance(scripts.get(key), str) and scripts[key]}


def _release(version: str, manifest: dict[str, Any], contents: Contents,
             published: datetime | None = None) -> Release:
    return Release(version, contents, manifest_runs(manifest), _dependencies(manifest),
                   published, publishers_of(manifest), _commands(manifest),
                   provenance_repository(manifest))


@dataclass(frozen=True, slots=True)
class _Unread:
    """Why the previous version's bytes could not be had, and whether the publisher's own
    shape is the cause (over the bound, unreadable) or an outage of mirrorgate's sources."""

    reason: str
    publishers: bool = False


def _feed(scan: ScriptScan, tarball: bytes) -> None:
    """A whole tarball held in memory, fed to a reading as the relay feeds a download."""
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        scan.feed(bytes(view[start:start + _STEP]))


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
                 forget: Callable[[PackageName], None] = lambda _name: None,
                 one_version: Callable[[PackageName, str], Awaitable[Gated | None]] | None = None,
                 ) -> None:
        self._rules = rules
        self.one_version = one_version
        """One version's gating (`Packuments.for_tarball`: the packument's when at hand), which
        `verdict_for` reads when no signal that compares is on; None: the whole packument."""
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
        self._judging: dict[tuple[str, str], asyncio.Task[Judged]] = {}
        self._flagged: dict[str, set[str]] | None = None  # name -> versions a signal fired for
        self._counts: dict[str, int] = {}
        self._often: NameIndex | None = None
        self._ages: OrderedDict[str, tuple[datetime | None, datetime]] = OrderedDict()
        """name -> its first publish, as the last pull's packument said, and when noted."""
        self.readings = KeptReadings()
        """The last versions' readings: a predecessor read before is not fetched again."""
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
        With `young-package-install-script` alone on (no `[release]` table), only a young
        package's versions are read: an old package's first pulls cost nothing."""
        release = self.rules.release
        if not release.on or record.private or record.upstream_tarball is None:
            return False
        if release.only_young_package and gated is not None:
            first = _first_published(gated)
            self._note_age(gated.name.full, first)
            return first is not None and self.now() - first < release.young_package
        return True

    def note_public(self, name: str, time: Mapping[str, Any]) -> None:
        """The package's age as public's packument says it (`time`), read by the worker's own
        re-gate: a sidecar's `verdict_for` under the default's young-package signal alone then
        fills no packument only to learn that the package is old."""
        self._note_age(name, first_published(time))

    def _note_age(self, name: str, first: datetime | None) -> None:
        self._ages[name] = (first, self.now())
        self._ages.move_to_end(name)
        while len(self._ages) > _AGES_KEPT:
            self._ages.popitem(last=False)

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
            return NOTHING
        verdict = self.remembered(name.full, record.version)
        if verdict is not None and verdict.in_force(self.now()):
            return AtPull(verdict, None)
        if verdict is None and reading and denial is None and self.applies(record, gated):
            return AtPull(None, lambda: self.check(name, gated, record))
        return NOTHING

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

    async def fetch_previous(self, name: PackageName, record: VersionRecord) -> bytes | _Unread:
        """A release's tarball, verified (the baseline's, or one judged off the relay:
        `read_and_judge`), or why it cannot be had (`_Unread`: the publisher's doing or an
        outage)."""
        url = record.upstream_tarball
        assert url is not None  # only versions with a public URL are baselines or judged
        try:
            verifier = StreamVerifier(record.digests, expected_size=None,
                                      limit=self.previous_max_bytes)
        except Unverifiable:
            return _Unread(f"{record.version} carries no digest to verify its bytes against")
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout), self.public.stream(
                    url, pool=TARBALLS) as body:
                if body is None:
                    return _Unread(f"the public registry has no tarball for {record.version}")
                verifier.declared_length(body.size)
                async for chunk in body.chunks:
                    verifier.update(chunk)
                    chunks.append(chunk)
            verifier.finish()
        except TooLarge as error:
            # the publisher chose the size: a padded previous version would otherwise
            # leave the next one unchecked (MIRRORGATE_RELEASE_PREVIOUS_MAX_BYTES)
            return _Unread(f"{record.version}'s tarball was not read: {error}", publishers=True)
        except (SizeMismatch, DigestMismatch) as error:
            # the public registry's bytes are not those its document names: its fault
            return _Unread(f"{record.version}'s tarball was not read: {error}")
        except UpstreamError as error:
            return _Unread(f"{record.version}'s tarball could not be fetched: {error}")
        except TimeoutError:
            return _Unread(f"{record.version}'s tarball was not fetched within "
                           f"{self.timeout:g} s")
        return b"".join(chunks)

    async def read_previous(self, record: VersionRecord, fetched: bytes | _Unread,
                            new: Contents) -> Contents | _Unread:
        """The previous version's contents (its files unchanged in `new` not measured again),
        or why they cannot be had."""
        if isinstance(fetched, _Unread):
            return fetched
        contents = await asyncio.to_thread(contents_of, fetched, new.code)
        if contents.problem is not None:
            return _Unread(f"{record.version}'s tarball cannot be read: {contents.problem}",
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
                found[text] = Dependency(_first_published(gated), *_publishers(gated))

        await asyncio.gather(*(one(text) for text in asked))  # cached, single-flight fills
        return found, failed

    def clean(self, name: str, version: str) -> bool | None:
        """Whether a version's kept verdict lets it vouch for a later release: nothing but
        typosquat or young-package-install-script (words on the name and the package's age,
        not on what changed in these bytes) fired, or what fired the rules now let through
        whole (an allow entry, a signal turned off); None: never judged."""
        kept = self.facts.verdict(name, version)
        facts = _Facts.of(kept) if kept is not None else None
        if facts is None:
            return None
        # a young package's every release with a hook fires young-package-install-script: were
        # it to count, none of its first month's releases could vouch, and each later one
        # would be judged as a first version, nothing compared
        fired = [found for found in facts.fired if found.signal not in _ON_THE_NAME]
        if not fired:
            return True
        verdict = judge(self.rules, name, version, facts.published, fired, self.now(),
                        facts.compared_with)
        return not (verdict.denied or verdict.reported or verdict.excepted)

    async def baseline(self, name: PackageName, gated: Gated, version: str,
                       budget: Budget) -> Baseline | Unsettled:
        """The release `version` is compared with (`gate.baseline`): releases never judged
        are read and judged first, on `budget`."""
        return await choose_baseline(
            gated, version, judged=lambda record: self.clean(name.full, record.version),
            judge_first=lambda record: self.judge_read(name, gated, record, budget),
            budget=budget, settled_after=self.rules.release.quarantine)

    async def judge_read(self, name: PackageName, gated: Gated, record: VersionRecord,
                         budget: Budget | None = None) -> bool | None:
        """Read `record`'s bytes and judge them now (`read_and_judge`): True when the verdict
        kept is clean, False when it is not or no clean release could be compared with within
        the bound, None when its bytes could not be read (an outage, not a verdict)."""
        judged = await self.read_and_judge(name, gated, record, budget)
        clean = self.clean(name.full, record.version)
        if clean is not None:
            return clean
        return None if judged.unread or not judged.unsettled else False

    async def read_and_judge(self, name: PackageName, gated: Gated, record: VersionRecord,
                             budget: Budget | None = None) -> Judged:
        """Read `record`'s bytes from public (bounded, verified) and judge them as a first
        pull would (a read that failed is never a verdict: nothing is kept, and it is read
        again next time). One read per version at a time, however many ask."""
        key = (name.full, record.version)
        running = self._judging.get(key)
        if running is None:
            running = asyncio.get_running_loop().create_task(
                self._read_and_judge(name, gated, record, budget or Budget()))
            self._judging[key] = running
            running.add_done_callback(lambda _task: self._judging.pop(key, None))
        return await asyncio.shield(running)

    async def _read_and_judge(self, name: PackageName, gated: Gated, record: VersionRecord,
                              budget: Budget) -> Judged:
        check = ReleaseCheck(self, name, gated, record, budget)
        try:
            check.begin()  # the baseline chosen and fetched beside this read
            fetched = await self.fetch_previous(name, record)
            if isinstance(fetched, _Unread):
                log.warning("release_read_failed", package=name.full, version=record.version,
                            reason=fetched.reason, publishers=fetched.publishers)
                return Judged(f"its bytes could not be read: {fetched.reason}", unread=True)
            await asyncio.to_thread(_feed, check.scan, fetched)
            refused = await check.verdict()
            return Judged(refused, unsettled=check.unsettled is not None)
        finally:
            check.close()

    async def verdict_for(self, name: PackageName, version: str) -> ReleaseVerdict | str | None:
        """The verdict on `name@version` under the rules in force, its bytes read and judged
        now when they never were (the worker's re-gate, `prewarm`, `check`); a sentence when
        no verdict can be kept (unchecked, unsettled: a refusal for whoever asks); None when
        the signals do not apply to it (off, a first-party or unknown version)."""
        if not self.rules.release.on:
            return None
        remembered = self.remembered(name.full, version)
        if remembered is not None:
            return remembered
        if self._old_at_pull(name.full):
            # the worker beside the proxy, seconds after the pull that enqueued the job: the
            # pull found an old package, which the default's young-package signal alone does
            # not read; filling its packument again (evicted since, on a cold install of
            # thousands of names) only to learn that would cost a fill per job
            return None
        # with no signal that compares on (the default's young-package signal alone), the
        # version's own gating carries what is read (its record, the package's first publish):
        # a job's packument is not filled whole to learn a package is old
        gated = await (self.packument(name) if self.one_version is None
                       or self.rules.release.compares else self.one_version(name, version))
        record = gated.versions.get(version) if gated is not None else None
        if gated is None or record is None or not self.applies(record, gated):
            return None
        judged = await self.read_and_judge(name, gated, record)
        remembered = self.remembered(name.full, version)
        return remembered if remembered is not None else judged.refused

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
                 record: VersionRecord, budget: Budget | None = None) -> None:
        self.judge = judge_
        self.name = name
        self.gated = gated
        self.record = record
        self.reading = ContentReading()
        self.budget = budget if budget is not None else Budget()
        self.previous: VersionRecord | None = None
        """The release compared with, once `baseline` chose it (`gate.baseline`); stays None
        when no signal that compares is on (`release.compares`)."""
        self.unsettled: str | None = None
        """Why no clean release could be compared with, when none could (a refusal)."""
        self._task: asyncio.Task[bytes | Contents | _Unread | None] | None = None
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
        """Start choosing the release to compare with and fetching its bytes, beside the
        download of these."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._baseline_bytes())

    async def _baseline_bytes(self) -> bytes | Contents | _Unread | None:
        """The baseline's bytes (or why they cannot be had), or its reading when this process
        read it before (`KeptReadings`: neither fetched nor read again); None when there is no
        baseline (`previous` None: a first version, `unsettled`, or no signal that compares
        on)."""
        if not self.judge.rules.release.compares:
            # only a signal that compares reads an earlier release: with the default's one
            # (young-package-install-script) no baseline is chosen, judged or fetched
            return None
        gated = self.gated
        if gated.alone is not None:
            # one version's gating (a tarball's cold admission, `gate(only=)`) has no history
            # to choose from: the whole packument's, lest a release look like a first version
            # (the proxy reads it up front when a comparing signal is on; rules reloaded
            # meanwhile reach here)
            try:
                gated = await self.judge.packument(self.name) or gated
            except Exception as error:  # an upstream failure, whatever the fill raised
                self.unsettled = f"its packument could not be read ({type(error).__name__})"
                return None
        chosen = await self.judge.baseline(self.name, gated, self.record.version,
                                           self.budget)
        if isinstance(chosen, Unsettled):
            self.unsettled = chosen.reason
            return None
        if chosen.passed_over:
            log.info("release_baseline_passed_over", package=self.name.full,
                     version=self.record.version, passed_over=list(chosen.passed_over),
                     compared_with=chosen.record.version if chosen.record else None)
        self.previous = chosen.record
        if chosen.record is None:
            return None
        kept = self.judge.readings.get(_kept_as(self.name, chosen.record))
        if kept is not None:
            # a baseline read before lends its marks to this version's unchanged files (from
            # the bytes fed next on), and needs no fetch: the same bytes read the same
            self.reading.lend(kept.code)
            return kept
        return await self.judge.fetch_previous(self.name, chosen.record)

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
        if judge_.rules.release.compares:
            # a later release's baseline, read once; with no signal that compares (the
            # default's young-package one) no baseline is ever read, so nothing is held
            judge_.readings.keep(_kept_as(self.name, self.record), contents)
        unchecked: list[str] = []  # outages of mirrorgate's sources: release.unavailable
        unreadable: list[str] = []  # the publisher's own shape: a refusal (fail closed)
        fired: list[Fired] = []
        compared: str | None = None
        self.begin()
        assert self._task is not None
        fetched = await self._task
        if contents.problem is not None:
            unreadable.append(f"its tarball cannot be read: {contents.problem}")
        if self.previous is not None:
            previous_manifest = self.previous.manifest()
            before: Contents | _Unread = _Unread("its own tarball cannot be read")
            if contents.problem is None and fetched is not None:
                if isinstance(fetched, Contents):
                    before = fetched  # kept from an earlier read (`_baseline_bytes`)
                else:
                    before = await judge_.read_previous(self.previous, fetched, contents)
                    if isinstance(before, Contents):
                        judge_.readings.keep(_kept_as(self.name, self.previous), before)
            if isinstance(before, _Unread):
                if contents.problem is None:
                    (unreadable if before.publishers else unchecked).append(before.reason)
                # what the registry manifests say runs and installs needs no bytes: still
                # compared, so an unread tarball never hides a declared postinstall
                new = _release(version, manifest, Contents(), published)
                old = _release(self.previous.version, previous_manifest, Contents())
            else:
                new = _release(version, manifest, contents, published)
                old = _release(self.previous.version, previous_manifest, before)
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
        young_package = check_young_package(
            _release(version, manifest, contents if contents.problem is None else Contents(),
                     published), _first_published(self.gated), rules.young_package,
            rules.young_package_text, now)
        if young_package is not None:
            fired.append(young_package)
        popular = await asyncio.to_thread(popular_names)  # read once, on first use
        squat = check_typosquat(self.name.full, _first_published(self.gated),
                                judge_.installed_before(self.name.full), judge_.often(),
                                popular, rules.young, rules.young_text, now)
        if squat is not None:
            fired.append(squat)
        verdict = judge(judge_.rules, self.name.full, version, published, fired, now, compared)
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
