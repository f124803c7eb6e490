"""One mirror job from message to outcome: re-gate, fetch, verify, publish, and what came of it.

`JobRunner.decide` returns the outcome and the loop (`worker.loop`) acks or releases the
message with it, so every rule about a job's bytes lives here and every rule about the queue
lives there. The outcomes and their log events are listed in docs/operations.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import orjson
import structlog

from mirrorgate import tracing
from mirrorgate.config import WorkerSettings
from mirrorgate.errors import MirrorgateError
from mirrorgate.events import Alert
from mirrorgate.gate.kept.facts import UnrecordedError
from mirrorgate.gate.kept.withdrawals import WithdrawnVersions
from mirrorgate.gate.packuments.entry import PublicAnswer
from mirrorgate.gate.packuments.merge import PUBLIC_WITHDRAWN
from mirrorgate.gate.packuments.public import CachedPublic, PublicPackuments
from mirrorgate.gate.records import Gated, TooManyVersionsError
from mirrorgate.gate.verdicts.findings import UNSETTLED
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.handoff import Handed, Handoff
from mirrorgate.healthz import Heartbeat
from mirrorgate.integrity import (
    Digest,
    DigestMismatch,
    SizeMismatch,
    StreamVerifier,
    TarballDigests,
    TooLarge,
    Unverifiable,
    Verified,
    dist_digests,
    same_digest,
    strongest_of,
    strongest_sri,
)
from mirrorgate.logs import loggable_url
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue, QueueMessage
from mirrorgate.npm.licenses import declared_license
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.npm.origins import OriginRefusal, check_on_origin
from mirrorgate.npm.tarscripts import ScriptScan, scanned
from mirrorgate.npm.versions import is_version_string, unstorable
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules import (
    DEFAULT_RULES,
    REPORT,
    LiveRules,
    Rules,
    live,
    scan_finding,
    scripts_blocked,
    scripts_reported,
)
from mirrorgate.rules.license import LICENSE, tarball_license_finding
from mirrorgate.rules.release import ReleaseVerdict
from mirrorgate.upstream.client import WORKER, Upstream, UpstreamError
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.upstream.registry import RegistryError, TargetConflict
from mirrorgate.worker import alerts
from mirrorgate.worker.regate import JobRefused, check_digest_floor, regate, regate_record
from mirrorgate.worker.target import (
    MirrorTarget,
    PublishResult,
)

__all__ = ["FORGED_JOB_REASONS", "JobRunner", "Outcome", "WorkerDeps", "subject"]

log = structlog.get_logger("mirrorgate.worker")

_T = TypeVar("_T")


class Outcome(enum.StrEnum):
    """One message, one outcome, one log line and one count in `mirrorgate_jobs{outcome}`."""

    PUBLISHED = "published"  # the target took the verified bytes; acked
    # the target holds the version with the job's integrity (asked before any download), or
    # answered "already exists" and reading it back shows that integrity; acked
    ALREADY_PRESENT = "already_present"
    # the bytes are not the admitted digest or size: never published, a security line,
    # `mirrorgate_tampered`, acked (never retried)
    TAMPERED = "tampered"
    # a failure that may pass (connection, timeout, 5xx, 408, 429) or a crash: not acked,
    # released for another delivery after `loop.retry_delay`
    RETRIED = "retried"
    # the job can never succeed; acked, the reason in `mirrorgate_jobs_retired{reason}`
    RETIRED = "retired"


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerDeps:
    """`rules` and `now` re-gate each job as the serve path gates (`regate`). `on_outcome`
    hears each message's outcome: how `mirrorgate prewarm` follows the jobs it runs itself."""

    settings: WorkerSettings
    queue: MirrorQueue
    public: Upstream
    target: MirrorTarget
    metrics: Metrics
    heartbeat: Heartbeat
    rules: Rules | LiveRules = DEFAULT_RULES
    """The rules in force (re-read as the rules file changes, `rules.live`)."""
    now: Callable[[], datetime] = _utcnow
    on_outcome: Callable[[QueueMessage, str], None] | None = None
    packuments: PublicPackuments | None = None
    """Where the re-gate reads public packuments: the serve path's cache in `mirrorgate
    serve`; None builds the worker's own (`packuments.CachedPublic`)."""
    withdrawals: WithdrawnVersions | None = None
    """The takedowns the serve path has seen (`gate.kept.withdrawals`), kept in the state store: the
    proxy's own in `mirrorgate serve`, the worker's view of the same store in `mirrorgate
    worker`; None: this process's memory only (the operator commands)."""
    release: ReleaseJudge | None = None
    """The gate's release verdicts (`gate.verdicts.judge`): a job whose version has none under rules
    that ask for one is read and judged before it is published; None: not consulted."""
    handoff: Handoff | None = None
    """The tarballs the proxy beside this worker verified as it relayed them (`handoff`):
    taken instead of a second download, with the digest the relay matched (`_check`). None
    (a sidecar worker) downloads every tarball and hashes it whole."""


class Retire(Exception):  # noqa: N818 - control flow inside one job, never escapes it
    def __init__(self, reason: str, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.reason = reason
        self.fields = fields


class Retry(Exception):  # noqa: N818 - control flow inside one job, never escapes it
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class WrongSize(MirrorgateError):  # noqa: N818 - tampering, logged as such, never escapes a job
    """Bytes that are not the size the job declares, and what hashing all of them showed:
    `actual` is None when the answer ran past the cap or broke off before its end."""

    def __init__(self, mismatch: SizeMismatch, expected: Digest, actual: Digest | None,
                 actual_size: int, complete: bool) -> None:
        super().__init__(str(mismatch))
        self.expected = expected
        self.expected_size = mismatch.expected
        self.actual = actual
        self.actual_size = actual_size
        self.complete = complete


@dataclass
class _VersionLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


FORGED_JOB_REASONS = ("unsigned", "bad-signature", "digest-mismatch", "manifest-mismatch",
                      "tarball-mismatch")
"""`mirrorgate_jobs_retired{reason}` values that say a job was written by someone who can send
to the queue, not by a proxy (deploy/prometheus's MirrorgateForgedJob alerts on them): no job
key vouches for it, or it describes other bytes or another manifest than public publishes. A
job the rules now deny or public no longer lists is as likely stale as forged, and left out."""


class JobRunner:
    """The steps of one job, shared by every message the worker holds."""

    def __init__(self, deps: WorkerDeps, keys: RegistryKeys) -> None:
        self.deps = deps
        # the series an alert reads start at 0, so its increase() sees the first one
        for outcome in Outcome:
            deps.metrics.jobs.labels(outcome.value)
        for reason in FORGED_JOB_REASONS:
            deps.metrics.retired.labels(reason)
        self._keys = keys  # the registry's keys, for the signature rule
        self._packuments = (deps.packuments if deps.packuments is not None
                            else CachedPublic(deps.public, deps.settings))
        self._withdrawals = (deps.withdrawals if deps.withdrawals is not None
                             else WithdrawnVersions())
        self._versions: dict[tuple[str, str], _VersionLock] = {}
        self._in_force = live(deps.rules)

    @property
    def _rules(self) -> Rules:
        return self._in_force.current

    async def decide(self, message: QueueMessage) -> tuple[Outcome, str]:
        """Carry one message's job to its outcome, and say why when it is to be retried.

        Nothing here acks or releases: the loop does that with what this returns.
        """
        job = message.job
        if job is None:
            problem = message.problem or "the message is not a mirror job"
            if message.refusal != "undecodable":  # a signature the keys do not vouch for
                log.critical("mirror_job_refused", security=True, reason=message.refusal,
                             detail=problem)
                self._alert(alerts.unvouched(message))
            return self._retired(message.refusal, problem)
        limit = self.deps.settings.max_deliveries
        if message.deliveries is not None and message.deliveries > limit:
            return self._retired("max-deliveries",
                                      f"delivered {message.deliveries} times; the limit is "
                                      f"{limit} (MIRRORGATE_MAX_DELIVERIES)")
        try:
            async with self._one_at_a_time(job):
                result = await self._mirror(job)
        except JobRefused as refused:
            # what anyone who can write to the queue could send: a security event, named
            log.critical("mirror_job_refused", security=True, reason=refused.reason,
                         detail=str(refused), **refused.fields)
            self._alert(alerts.refused(job, refused, message.message_id))
            return self._retired(refused.reason, str(refused))
        except Retire as retire:
            if retire.reason == "install-scripts":
                self._alert(alerts.hiding_scripts(job, str(retire)))
            return self._retired(retire.reason, str(retire), **retire.fields)
        except Retry as retry:
            log.warning("mirror_retry", reason=retry.reason, detail=str(retry))
            return Outcome.RETRIED, retry.reason
        except UnrecordedError as error:  # a re-gate learned what cannot be kept yet
            log.warning("mirror_retry", reason="store-unavailable", detail=str(error))
            return Outcome.RETRIED, "store-unavailable"
        except DigestMismatch as mismatch:
            log.critical("mirror_digest_mismatch", security=True,
                         expected=mismatch.expected.sri(), actual=mismatch.actual.sri(),
                         algorithm=mismatch.expected.algorithm,
                         url=loggable_url(job.artifact.tarball_url))
            return self._tampered(message, f"the {mismatch.expected.algorithm} digest",
                                  expected=mismatch.expected.sri(),
                                  actual=mismatch.actual.sri())
        except WrongSize as wrong:
            log.critical("mirror_size_mismatch", security=True, expected=wrong.expected.sri(),
                         actual=wrong.actual.sri() if wrong.actual is not None else None,
                         algorithm=wrong.expected.algorithm, expected_size=wrong.expected_size,
                         actual_size=wrong.actual_size, complete=wrong.complete,
                         url=loggable_url(job.artifact.tarball_url))
            return self._tampered(message, "the declared size", expected=wrong.expected.sri(),
                                  actual=wrong.actual.sri() if wrong.actual else None,
                                  expected_size=wrong.expected_size,
                                  actual_size=wrong.actual_size)
        except SizeMismatch as mismatch:  # a target that checked the bytes itself
            log.critical("mirror_size_mismatch", security=True, expected_size=mismatch.expected,
                         actual_size=mismatch.actual, complete=mismatch.complete,
                         url=loggable_url(job.artifact.tarball_url))
            return self._tampered(message, "the declared size", expected_size=mismatch.expected,
                                  actual_size=mismatch.actual)
        except TargetConflict as conflict:
            log.critical("mirror_target_conflict", security=True, target=self.deps.target.label,
                         expected=conflict.expected.sri(),
                         stored=conflict.stored.sri() if conflict.stored else None)
            self._alert(alerts.conflicting(job, self.deps.target.label, conflict.expected.sri(),
                                           conflict.stored.sri() if conflict.stored else None))
            return self._retired("target-conflict", str(conflict))
        return Outcome(result.value), ""

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, job: MirrorJob) -> AsyncIterator[None]:
        """Serialise jobs for the same version: the second waits, then finds it present."""
        key = (job.name, job.version)
        entry = self._versions.get(key)
        if entry is None:
            entry = self._versions[key] = _VersionLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._versions[key]

    async def _mirror(self, job: MirrorJob) -> PublishResult:
        """Re-gate, fetch, verify and publish; raises JobRefused, Retire, Retry or a
        verify/target error."""
        try:
            name = parse_name(job.name)
        except InvalidNameError as error:
            raise Retire("invalid-name", f"{job.name!r}: {error}") from None
        if not is_version_string(job.version):
            raise Retire("invalid-version", f"{job.version!r} is not a version string")
        if (why := unstorable(job.version)) is not None:
            # refused before anything is sent: the target could not store it (or dies of it)
            raise Retire("unstorable-version", why)
        try:
            check_on_origin(job.artifact.tarball_url, self.deps.public.origin)
        except OriginRefusal as refusal:
            raise Retire("off-origin", str(refusal), url=loggable_url(job.artifact.tarball_url),
                          kind=refusal.kind) from None
        try:
            strongest_of(job.artifact.digests)
        except Unverifiable as error:
            raise Retire("unverifiable", str(error)) from None
        check_digest_floor(job, self._rules)
        # The queue is not trusted: anyone with send rights can write a job. The job is
        # re-gated against the public packument with today's rules, and from there on what is
        # verified and published is public's description of the version, never the job's.
        # dependency confusion: never publish a public version into the organisation's name
        # ([private].names, or a name the target holds unmarked versions of: its packument,
        # read once, also says after the re-gate whether the version is held already)
        if self._rules.private_alone(job.name) or (
                held := await self._target_call(self.deps.target.held(job))).first_party:
            raise Retire("first-party", f"{job.name} is first-party: a public version is "
                          f"never published into it")
        if not self._withdrawals.known:
            # the state store's withdrawals are not loaded yet: never publish past one
            raise Retry("store-unavailable", "the state store's remembered withdrawals are not "
                        "loaded yet")
        seen = self._withdrawals.seen(job.name, job.version)
        if seen is not None:
            # asked before public: a takedown holds while public is down, as on the serve path
            raise Retire(PUBLIC_WITHDRAWN, f"{job.name}@{job.version} was withdrawn from the "
                         f"public registry (first seen {seen})", first_seen=seen)
        with tracing.span("mirrorgate.regate"):
            job, gated = await self._regate(job, name)
        self._kept_verdict(job)  # one that refuses these bytes: retired before any download
        url = job.artifact.tarball_url
        # public's digests: the gate denies a version without one this worker can compute
        verifier = StreamVerifier(job.artifact.digests, expected_size=job.artifact.size,
                                  limit=self.deps.settings.max_tarball_bytes)
        target = self.deps.target
        # the cheap question first: a version already held costs a metadata read, no download
        if await self._target_call(target.holds(job, held)):
            if self.deps.handoff is not None:  # bytes the proxy handed over, not needed
                self.deps.handoff.discard(url)
            log.info("mirror_already_present", target=target.label, fetched=False)
            return PublishResult.ALREADY_PRESENT
        with contextlib.ExitStack() as owned:
            with tracing.span("mirrorgate.fetch", {"mirrorgate.algorithm":
                                                   verifier.expected.algorithm}) as fetched:
                handed = self._handed(job)
                fetched.set("mirrorgate.handoff", handed is not None)
                known: TarballDigests | None = None
                if handed is not None:
                    owned.callback(handed.close)  # its file, linked in or not
                    tarball, verified, known = await self._check(handed, verifier, job)
                else:
                    tarball, verified = await self._fetch(url, verifier)
                fetched.set("mirrorgate.bytes", verified.size)
            # never judged (a sidecar's job, one written by hand): these verified bytes are
            # read, not a second download under another cap (`_release_verdict`)
            await self._release_verdict(job, name, gated, tarball)
            scripts = scripts_blocked(self._rules, job.name, job.version)
            # the relay beside this worker read these very bytes for the license rule and
            # found the manifest's license (`Handed.license_read`): not read again for it
            licensed = self._rules.license.on and not (handed is not None
                                                       and handed.license_read)
            scan: ScriptScan | None = None
            if scripts or licensed:  # one read of the bytes for both rules
                scan = await in_thread_if_large(len(tarball), scanned, tarball)
            if scripts and scan is not None:
                # manifest confusion (`npm.tarscripts`): the re-gate judged public's manifest,
                # but a client runs the package.json inside these bytes; a private copy is
                # re-read by the relay where the rule applies, and this is the last look
                # before it is stored
                found = scan.finish()
                if found is not None:
                    reason = scan_finding(found, job.manifest)
                    if not scripts_reported(self._rules):
                        raise Retire("install-scripts", f"{job.name}@{job.version}: {reason}")
                    # report mode: the proxy served these bytes and said so; mirrored as served
                    log.info("version_would_deny", package=job.name, version=job.version,
                             rule="install-scripts", reason=reason, where="worker")
            if licensed and scan is not None:
                # the license npm installs is the tarball's own (`rules.license`): another
                # than the manifest the re-gate judged is never stored
                found = tarball_license_finding(self._rules.license,
                                                declared_license(job.manifest), scan.manifest,
                                                scan.problem)
                if found is not None:
                    if self._rules.mode_of("license") != REPORT:
                        raise Retire(LICENSE, f"{job.name}@{job.version}: {found}")
                    log.info("version_would_deny", package=job.name, version=job.version,
                             rule=LICENSE, reason=found, where="worker")
            digests: TarballDigests = known if known is not None else await in_thread_if_large(
                len(tarball), dist_digests, tarball, verified, job.artifact.digests)
            # the handed file holds the very bytes checked: a file store links it in as the
            # stored tarball instead of writing them again (docs/untrusted-queue.md)
            unnamed = handed.unnamed if handed is not None else None
            with tracing.span("mirrorgate.publish", {"mirrorgate.target": target.label}) as put:
                result = await self._target_call(target.publish(job, tarball, digests,
                                                                unnamed=unnamed))
                put.set("mirrorgate.result", result.value)
        event = ("mirror_published" if result is PublishResult.PUBLISHED
                 else "mirror_already_present")
        log.info(event, target=target.label, fetched=True, size=verified.size,
                 integrity=digests.integrity)
        return result

    async def _regate(self, job: MirrorJob,
                      name: PackageName) -> tuple[MirrorJob, Gated | None]:
        """The job as the public packument describes it now (`regate`), and the gating that
        admitted it when the worker gated public's packument itself (None: judged by the
        proxy's record); raises JobRefused."""
        if not self._rules.signatures.verify:
            # Beside the proxy: its own current verdict on public's version, no parse and no
            # second gate. With signatures verified, the worker asks for the keys itself
            # (`_judge`): an entry may have been gated while they were unavailable.
            verdict = await self._public(
                lambda named: self._packuments.verdict(named, job.version), name)
            if verdict is not None:
                with contextlib.suppress(JobRefused):  # a refusal is confirmed below
                    return regate_record(job, name, verdict.record, verdict.published), None
        answer = await self._public(self._packuments.read, name)  # cached, as the proxy reads
        try:
            return await self._judge(job, name, answer)
        except JobRefused:
            # the cached copy may predate the version (published since the cache was filled):
            # a refusal stands only once public, asked now, still says the same
            fresh = await self._public(self._packuments.refresh, name)
            if fresh is answer:  # revalidated unchanged: the verdict is the same
                raise
            return await self._judge(job, name, fresh)

    def _kept_verdict(self, job: MirrorJob) -> None:
        """The release verdict kept on the job's bytes, asked before they are downloaded: one
        that refuses them now retires the job, as on the serve path."""
        judge = self.deps.release
        if judge is not None and judge.rules.release.on:
            self._judged(job, judge.remembered(job.name, job.version,
                                               strongest_sri(job.artifact.digests)))

    async def _release_verdict(self, job: MirrorJob, name: PackageName, gated: Gated | None,
                               tarball: bytes) -> None:
        """The version's release verdict, read and judged now when it has none (a sidecar's
        job, one written by hand), on `tarball`, the bytes downloaded (or handed over) and
        verified against the job's digest, with the re-gate's `gated` when it made one: a
        refusal in force retires the job, as on the serve path."""
        judge = self.deps.release
        if judge is None:
            return
        with tracing.span("mirrorgate.release_verdict"):
            try:
                verdict = await self._public(
                    lambda named: judge.verdict_for(named, job.version,
                                                    strongest_sri(job.artifact.digests),
                                                    gated=gated, tarball=tarball), name)
            except TooManyVersionsError as error:
                raise Retire("release-signal", str(error), rule=UNSETTLED) from None
        self._judged(job, verdict)

    def _judged(self, job: MirrorJob, verdict: ReleaseVerdict | str | None) -> None:
        """Retire the job when `verdict` refuses its bytes (a sentence: none could be kept)."""
        if isinstance(verdict, str):
            raise Retire("release-signal", f"{job.name}@{job.version}: {verdict}",
                         rule=UNSETTLED)
        if verdict is not None and verdict.in_force(self.deps.now()):
            raise Retire("release-signal", f"{job.name}@{job.version}: {verdict.reason}",
                         rule=verdict.rule, compared_with=verdict.compared_with)

    @staticmethod
    async def _public(read: Callable[[PackageName], Awaitable[_T]], name: PackageName) -> _T:
        try:
            return await read(name)
        except UpstreamError as error:
            if error.transient:
                raise Retry("public-failed", str(error)) from None
            raise Retire("public-refused", str(error), status=error.status) from None

    async def _judge(self, job: MirrorJob, name: PackageName,
                     answer: PublicAnswer) -> tuple[MirrorJob, Gated]:
        signatures = self._rules.signatures
        keys = await self._keys.current() if signatures.verify else None
        if signatures.verify and keys is None and signatures.missing == "deny":
            # Refusing now would retire a job only a passing outage stands in the way of.
            raise Retry("public-failed", "the public registry's signing keys are unavailable")
        document = await in_thread_if_large(answer.size, answer.document)  # a parse of its own
        try:
            return await regate(job, name, document, answer.size, public=self.deps.public,
                                rules=self._rules, now=self.deps.now(), keys=keys)
        except orjson.JSONDecodeError as error:
            # a value the gate read of the lazily read document (`npm.lazydoc`) is not JSON:
            # public's document refused, as a whole parse of it would have been
            raise Retire("public-refused", "the public upstream's packument is not usable "
                         f"JSON ({str(error)[:120]})") from None

    async def _target_call(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except TargetConflict:
            raise
        except RegistryError as error:
            if error.transient:
                raise Retry(error.reason, str(error)) from None
            raise Retire(error.reason, str(error)) from None

    def _handed(self, job: MirrorJob) -> Handed | None:
        """The bytes the proxy beside this worker relayed for the job's version, if it holds
        them (matched against one of the re-gated job's digests)."""
        handoff = self.deps.handoff
        if handoff is None:
            return None
        handed = handoff.take(job.artifact.tarball_url, job.artifact.digests)
        self.deps.metrics.handoffs.labels("taken" if handed is not None else "missed").inc()
        return handed

    async def _check(self, handed: Handed, verifier: StreamVerifier, job: MirrorJob,
                     ) -> tuple[bytes, Verified, TarballDigests | None]:
        """Handed-over bytes, and their digests for the publish when already known.

        The strongest digest is the relay's (`Handed.matched`): its hash of the chunks it
        relayed and wrote, a claim only the in-process handoff carries (a queue message or a
        file cannot), equal to the re-gated job's (`Handoff.take`), so sha512 is not run a
        second time here. What was read back is checked all the same, by the sha1 the
        publish's `shasum` needs anyway, against the admitted one (`dist_digests`): bytes
        changed since the relay hashed them (its spool or handoff file, a bug between) are
        tampered, never published. A job with no sha1 to check them against, or whose
        strongest is sha1, has its bytes hashed whole, exactly as a download's."""
        body = handed.body
        relayed = (handed.matched.algorithm != "sha1"
                   and same_digest(handed.matched, verifier.expected)
                   and any(digest.algorithm == "sha1" for digest in job.artifact.digests))

        def verify() -> tuple[Verified, TarballDigests | None]:
            verifier.declared_length(len(body))
            if relayed:
                matched = Verified(handed.matched, len(body))
                return matched, dist_digests(body, matched, job.artifact.digests)
            verifier.update(body)
            return verifier.finish(), None

        try:
            verified, known = await in_thread_if_large(len(body), verify)
        except SizeMismatch as mismatch:
            actual = Digest(verifier.expected.algorithm, base64.b64encode(
                hashlib.new(verifier.expected.algorithm, body).digest()).decode("ascii"))
            raise WrongSize(mismatch, verifier.expected, actual, len(body),
                            complete=True) from None
        except TooLarge as error:
            raise Retire("oversized", str(error), url=loggable_url(job.artifact.tarball_url),
                         size=error.size) from None
        return body, verified, known

    async def _fetch(self, url: str, verifier: StreamVerifier) -> tuple[bytes, Verified]:
        """The tarball from the public origin only (checked before anything is sent), never
        through a redirect, never past MIRRORGATE_MAX_TARBALL_BYTES, hashed as it arrives."""
        chunks: list[bytes] = []
        shown = loggable_url(url)
        try:
            async with self.deps.public.stream(url, pool=WORKER) as response:
                if response is None:
                    raise Retire("public-missing", "the public upstream answered 404", url=shown)
                try:
                    verifier.declared_length(response.size)
                    async for chunk in response.chunks:
                        chunks.append(chunk)
                        verifier.update(chunk)
                    verified = verifier.finish()
                except SizeMismatch as mismatch:
                    raise await self._wrong_size(mismatch, verifier.expected, chunks,
                                                 response.chunks) from None
        except UpstreamError as error:
            if error.kind == "refused":
                raise Retire("off-origin", str(error), url=shown) from None
            if error.transient:
                raise Retry("public-failed", str(error)) from None
            if error.kind == "invalid":  # a content coding mirrorgate cannot decode: not tampering
                raise Retire("public-coding", str(error), url=shown) from None
            raise Retire("public-refused", str(error), url=shown, status=error.status) from None
        except TooLarge as error:
            raise Retire("oversized", str(error), url=shown, size=error.size) from None
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as error:
            raise Retry("public-failed", "the download broke off "
                         f"({type(error).__name__})") from None
        return b"".join(chunks), verified

    async def _wrong_size(self, mismatch: SizeMismatch, expected: Digest, chunks: list[bytes],
                          rest: AsyncIterator[bytes]) -> WrongSize:
        """Hash everything the upstream sends for a tarball of the wrong size (what was read
        already, then the rest as it arrives, keeping none of it), up to the cap.

        Wrong size is tampering as much as a wrong digest, and the security line names both
        digests either way. A download that breaks off here leaves `actual` None; it never
        turns the refusal into a retry.
        """
        hasher = hashlib.new(expected.algorithm)
        size = 0
        for chunk in chunks:
            hasher.update(chunk)
            size += len(chunk)
        chunks.clear()
        limit = self.deps.settings.max_tarball_bytes
        try:
            async for chunk in rest:
                size += len(chunk)
                if size > limit:
                    return WrongSize(mismatch, expected, None, size, complete=False)
                hasher.update(chunk)
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return WrongSize(mismatch, expected, None, size, complete=False)
        actual = Digest(expected.algorithm, base64.b64encode(hasher.digest()).decode("ascii"))
        return WrongSize(mismatch, expected, actual, size, complete=True)

    def _retired(self, reason: str, detail: str, **fields: Any) -> tuple[Outcome, str]:
        log.warning("mirror_retired", reason=reason, detail=detail, **fields)
        self.deps.metrics.retired.labels(reason).inc()
        return Outcome.RETIRED, reason

    def _tampered(self, message: QueueMessage, what: str,
                  **data: Any) -> tuple[Outcome, str]:
        self.deps.metrics.tampered.inc()
        self.deps.metrics.events.tampered(subject(message), "the downloaded bytes did not "
                                          "match the admitted digest or size; not published")
        assert message.job is not None
        self._alert(alerts.tampered(message.job, what, **data))
        return Outcome.TAMPERED, "tampered"

    def _alert(self, alert: Alert) -> None:
        self.deps.metrics.events.alert(alert)


def subject(message: QueueMessage) -> str:
    job = message.job
    return f"{job.name}@{job.version}" if job is not None else f"message {message.message_id}"
