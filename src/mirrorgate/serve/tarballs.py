"""The tarball route, `GET|HEAD /npm/<name>/-/<file>.tgz`: private first, then public.

Only a version the gated packument admits is served; the bytes are moved by `relay` (one
shared download per tarball, spooled), a public tarball hashed on the way and, once it reached
a client whole, enqueued for the worker to mirror.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from datetime import datetime

import structlog
from aiohttp import web

from mirrorgate import tracing
from mirrorgate.gate import Gated, VersionRecord, mirror_job
from mirrorgate.gate.alerts import denial_alert
from mirrorgate.gate.pulllog import PullLog
from mirrorgate.gate.release import NOTHING, ReleaseJudge
from mirrorgate.handoff import Handoff
from mirrorgate.integrity import StreamVerifier, Unverifiable, Verified, strongest
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue
from mirrorgate.npm.names import InvalidNameError, PackageName, version_from_filename
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules.license import LICENSE, tarball_license_finding
from mirrorgate.rules.release import ReleaseVerdict
from mirrorgate.rules.wayout import exception_how, installable_from
from mirrorgate.serve.access import CLIENT, policy_of
from mirrorgate.serve.overload import Slot
from mirrorgate.serve.refusals import Refused, by_rule, denied, not_mirrored, upstream_failed
from mirrorgate.serve.relay import (
    INSTALL_SCRIPTS,
    OUTCOME,
    ContentsCheck,
    LicenseCheck,
    Relay,
    ScriptsRead,
    Withheld,
    remember,
)
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["OUTCOME", "TarballRoute"]

log = structlog.get_logger("mirrorgate.serve")

# A version is enqueued at most once per window: parallel CI jobs and npm's own retry after an
# integrity failure pull the same tarball several times in a row, and one job mirrors it. A pull
# after the window enqueues again, so a job the queue lost (the bounded memory queue drops when
# full) is made good by the next pull.
ENQUEUE_WINDOW = 300.0

SOURCE = web.RequestKey("mirrorgate_pull_source", str)
"""Where a tarball answer's bytes come from ("mirror" or "public"), for the pull log."""
RECORD = web.RequestKey("mirrorgate_pull_record", VersionRecord)
"""The version a tarball request asked for, once the gated packument knows it."""
REQUEST_ID = web.RequestKey("mirrorgate_request_id", str)
"""The request's id as its log lines carry it, for the pull log: read off the request, not out
of the log context (a copy of every bound variable, per pull)."""


class TarballRoute:
    def __init__(self, *, private: PrivateRegistry, public: Upstream, queue: MirrorQueue,
                 metrics: Metrics, relay: Relay,
                 packument: Callable[[PackageName, str | None], Awaitable[Gated | None]],
                 private_answered: Callable[[PackageName, str, str | None], bool] = (
                     lambda _n, _v, _p: False),
                 for_tarball: Callable[[PackageName, str, str | None],
                                       Awaitable[Gated | None]] | None = None,
                 handoff: Handoff | None = None,
                 on_enqueued: Callable[[PackageName, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 release: ReleaseJudge | None = None, contact: str | None = None,
                 pulls: PullLog | None = None,
                 mirrored: Callable[[PackageName, str], Awaitable[bool]] | None = None,
                 ) -> None:
        self.private = private
        self.public = public
        self.queue = queue
        self.metrics = metrics
        self.relay = relay
        self.packument = packument
        self.for_tarball = for_tarball
        """The gating a tarball needs (`Packuments.for_tarball`): its version judged alone
        when the packument is not cached; `packument` when None."""
        self.private_answered = private_answered
        self.handoff = handoff
        self.on_enqueued = on_enqueued
        self.clock = clock
        self.release = release
        self.contact = contact
        """MIRRORGATE_OPERATOR_CONTACT, named in a denied tarball's 403."""
        self.pulls = pulls
        """The pull log (`gate.pulllog`): one record per tarball GET served or refused."""
        self.mirrored = mirrored
        """Whether the default rules admit `name@version`: a version pulled under a policy set
        is mirrored only then, as the worker re-gates every job with the default rules."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._enqueued: OrderedDict[str, float] = OrderedDict()

    async def __call__(self, request: web.Request, name: PackageName, filename: str,
                       deadline: asyncio.Timeout, slot: Slot) -> web.StreamResponse:
        """The tarball's answer, and its record in the pull log: the one place every GET
        served (mirror or public) or refused by a rule (403) passes. A 404, an upstream
        failure and a HEAD are not pulls."""
        pulls = self.pulls if request.method == "GET" else None
        if pulls is not None:
            # read back with `[]`: a key a request lacks costs `.get` a KeyError raised and
            # caught, a microsecond per pull (bench/pull_log.py); the mirror path overwrites it
            request[SOURCE] = "public"
        try:
            answer = await self._answer(request, name, filename, deadline, slot)
        except Refused as refused:
            rule = refused.fields.get("rule")
            record = request.get(RECORD)
            if pulls is not None and refused.status == 403 and rule and record is not None:
                pulls.refusal(_who(request), name.full, record.version, _integrity(record),
                              rule, request.get(REQUEST_ID, ""), _ends(refused))
            raise
        record = request.get(RECORD)
        if pulls is not None and answer.status == 200 and record is not None:
            # a transfer cut before its last byte (bytes that did not match, scripts the
            # manifest hid) installed nothing: a refusal; a client that hung up or an upstream
            # that failed mid-body, no pull
            # an answer holds no state unless the relay marked it cut: `len` first spares the
            # whole transfer's pull the KeyError of a missing key
            cut = answer.get(OUTCOME) if len(answer) else None
            if cut is None:
                self._log_served(pulls, request, name, record)
            elif cut not in ("client_gone", "aborted"):
                pulls.refusal(_who(request), name.full, record.version, _integrity(record),
                              cut, request.get(REQUEST_ID, ""))
        return answer

    def _log_served(self, pulls: PullLog, request: web.Request, name: PackageName,
                    record: VersionRecord) -> None:
        """A pull served, with what a bill of materials reads of it (`mirrorgate sbom`): the
        client's name and CI identity (never its token), the sha1, the license, the verdict."""
        client = request.get(CLIENT)
        identity = client.identity if client is not None else None
        pulls.record(_who(request), name.full, record.version, _integrity(record),
                     request[SOURCE], request.get(REQUEST_ID, ""),
                     client.name if client is not None else None,
                     identity.repository if identity is not None else None,
                     identity.ref if identity is not None else None,
                     identity.workflow if identity is not None else None, record.sha1,
                     record.license, _served_under(record))

    async def _answer(self, request: web.Request, name: PackageName, filename: str,
                      deadline: asyncio.Timeout, slot: Slot) -> web.StreamResponse:
        try:
            # the file name must be `<bare name>-<version>.tgz` for this package, else 400
            version = version_from_filename(name, filename)
        except InvalidNameError as error:
            self.metrics.refusals.labels("bad_tarball_filename").inc()
            raise Refused(400, f"refused tarball path: {error}", reason=str(error)) from None
        # The gated packument (cached) is read first, so the rules reach every version: a denied
        # one is a 403 wherever its bytes are, mirrored and first-party versions included, and a
        # version no upstream lists is a 404 before any tarball is asked for.
        # Its own version judged alone suffices (`for_tarball`): the release signals read the
        # package's first publish, which one version's gating carries, and a first pull that
        # compares with an earlier release walks the releases before it, each gated alone as
        # the walk reaches it (`gate.lazyhistory`), never the whole packument's thousands.
        # By the client's policy set (`policy:NAME` on its tokens-file line), as its packument.
        policy = policy_of(request)
        gated = await (self.packument(name, policy) if self.for_tarball is None
                       else self.for_tarball(name, version, policy))
        record = gated.versions.get(version) if gated is not None else None
        if gated is not None and record is None and isinstance(gated.public_failure,
                                                                UpstreamError):
            raise not_mirrored(gated.public_failure, name, version)
        if gated is None or record is None:
            raise Refused(404, f"{name.full}@{version} is not on the private or the public "
                          "upstream", reason="not found")
        request[RECORD] = record
        # the release verdicts, asked once: a verdict in force is a 403 with its evidence (a
        # mirrored copy's too, flagged in report mode and enforced since), else perhaps the
        # check that reads these bytes as they stream
        ruling = (self.release.at_pull(name, gated, record, request.method == "GET")
                  if self.release is not None else NOTHING)
        if ruling.refused is not None:
            raise self._release_refusal(name, version, ruling.refused)
        if record.denial is not None:
            log.info("tarball_denied", package=name.full, version=version,
                     rule=record.denial.rule, reason=record.denial.reason)
            self.metrics.events.denied(f"{name.full}@{version}", record.denial.rule,
                                       record.denial.reason)
            alert = denial_alert(name.full, version, record.denial, "tarball")
            if alert is not None:
                self.metrics.events.alert(alert)
            raise denied(name, record, await self._survivors(name, gated, policy),
                         self.contact)
        # bytes the scan refused at an earlier pull (report mode serves them, and said so)
        found = (self.relay.scripts_found.get(f"{name.full}@{version}")
                 if record.scan_scripts and not record.scan_reports else None)
        if found is not None:
            log.info("tarball_denied", package=name.full, version=version,
                     rule=INSTALL_SCRIPTS, reason=found)
            raise by_rule(name, version, INSTALL_SCRIPTS, found,
                          await self._survivors(name, gated, policy), self.contact)
        found = (self.relay.licenses_found.get(f"{name.full}@{version}")
                 if record.license_read is not None and not record.license_read.report
                 else None)
        if found is not None:  # its tarball's license was refused at an earlier pull
            log.info("tarball_denied", package=name.full, version=version, rule=LICENSE,
                     reason=found)
            raise by_rule(name, version, LICENSE, found,
                          await self._survivors(name, gated, policy), self.contact)
        private_error: UpstreamError | None = None
        skipped = not record.private and self.private_answered(name, version, policy)
        if skipped:
            # the packument, built with the private upstream's answer, says the version is
            # public-only: asking private again would cost a round trip per tarball for a miss
            # (a cold install costs one private request per name, its packument). Built while
            # the private side was failing, the private side is asked first all the same.
            self.metrics.private_skipped.inc()
        else:
            # A private version is streamed from the private upstream, at the npm-standard path.
            # A miss or a private failure falls back to public (`_public`) only for a version the
            # gate kept a public URL for: a mirrored one public still admits.
            # a copy read again by the release signals is verified first: the verdict names
            # the bytes the mirror's mark does
            answer, private_error = await self._from_private(
                request, name, filename, record, deadline, slot,
                verify=ruling.check is not None, release=ruling.check)
            if answer is not None:
                return answer
        try:
            return await self._public(request, name, record, private_error, deadline, slot,
                                      gated, ruling.check)
        except Refused as missing:
            # public has no such tarball (a package removed there, a withdrawn tarball): the
            # same holds as for an outage, a copy mirrored since the packument was filled is
            # served (verified), and the 404 stands only when private lacks it too
            if skipped and missing.status == 404:
                copy, _ = await self._from_private(request, name, filename, record, deadline,
                                                  slot, verify=True)
                if copy is not None:
                    return copy
            raise
        except UpstreamError as error:
            # Skipped on the packument's word, private may hold the version all the same: the
            # worker mirrors within seconds of a pull, the packument says "public-only" for
            # its whole TTL, and a public outage in that window must not fail an install of
            # what is already mirrored. Asked only once public has failed, so the skip still
            # saves the round trip on every healthy pull; the bytes are checked against the
            # admitted digest as public ones would be.
            if skipped:
                copy, _ = await self._from_private(request, name, filename, record, deadline,
                                                  slot, verify=True)
                if copy is not None:
                    return copy
            raise not_mirrored(error, name, version) from None

    async def _whole(self, name: PackageName, gated: Gated, policy: str | None) -> Gated:
        """The whole packument's gating where one version's (`Gated.alone`) is not enough."""
        if gated.alone is None:
            return gated
        whole = await self.packument(name, policy)
        return whole if whole is not None else gated

    async def _survivors(self, name: PackageName, gated: Gated,
                         policy: str | None) -> list[str]:
        """The versions a refusal names as installable instead (the whole packument's)."""
        return (await self._whole(name, gated, policy)).survivors

    def _release_withheld(self, name: PackageName, record: VersionRecord,
                          withheld: Withheld) -> Refused:
        """The 403 for bytes the release signals refused as they streamed: the verdict's
        evidence, or `release-unchecked` when no verdict was kept."""
        judge, version = self.release, record.version
        kept = (judge.remembered(name.full, version, record.integrity())
                if judge is not None else None)
        if judge is not None and kept is not None and kept.in_force(judge.now()):
            return self._release_refusal(name, version, kept)
        label = f"{name.full}@{version}"
        return Refused(403, f"mirrorgate denied {label}: {withheld.reason}",
                       reason=withheld.reason, rule="release-unchecked", package=name.full,
                       version=version, status_text=f"Forbidden: mirrorgate denied {label} "
                       "(release signals)")

    def _release_refusal(self, name: PackageName, version: str,
                         verdict: ReleaseVerdict) -> Refused:
        """The 403 with the evidence for a version a release signal refuses (the verdict,
        made again under the rules in force, is in force)."""
        assert verdict.rule is not None
        assert verdict.reason is not None
        label = f"{name.full}@{version}"
        log.info("tarball_denied", package=name.full, version=version, rule=verdict.rule,
                 reason=verdict.reason)
        self.metrics.events.denied(label, verdict.rule, verdict.reason)
        evidence = [detail for found in verdict.fired if found.signal == verdict.rule
                    for detail in found.details]
        until = installable_from(verdict.until)
        return Refused(403, f"mirrorgate denied {label} by its {verdict.rule} release signal: "
                      f"{verdict.reason}{'; ' + until if until else ''}; "
                      f"{exception_how(name.full, version, self.contact)}",
                      reason=verdict.reason, rule=verdict.rule,
                      package=name.full, version=version, evidence=evidence[:50],
                      compared_with=verdict.compared_with,
                      until=verdict.until.isoformat() if verdict.until else None,
                      status_text=f"Forbidden: mirrorgate denied {label} ({verdict.rule} "
                                  "release signal)")

    async def _from_private(self, request: web.Request, name: PackageName, filename: str,
                            record: VersionRecord, deadline: asyncio.Timeout, slot: Slot, *,
                            verify: bool, release: Callable[[], ContentsCheck] | None = None,
                            ) -> tuple[web.StreamResponse | None, UpstreamError | None]:
        """The private upstream's copy, relayed: (answer, None); (None, None) when private
        lacks it; (None, error), logged, when private failed. With `verify`, the bytes are
        checked against the admitted digest (a copy of a version the packument called
        public-only); a private hit is otherwise relayed as is. A mirrored copy is read like
        public's bytes where the scripts rule applies: it may predate the rule, or this
        check; and by the release signals (`release`) where its verdict was read under fewer
        signals than are in force (`ReleaseJudge.at_pull`)."""
        verifier = _verifier(record) if verify else None
        try:
            relayed = await self.relay.relay(
                request, lambda: self.private.tarball(name, filename),
                key=("private", name.full, filename, _checked(verifier), _reads(record)),
                source="private",
                name=name, version=record.version, verifier=verifier,
                scan=_scripts_read(record), slot=slot, deadline=deadline, release=release,
                license=_license_check(record))
        except Withheld as withheld:  # refused before a byte was sent
            if withheld.rule in (INSTALL_SCRIPTS, LICENSE):
                raise by_rule(name, record.version, withheld.rule, withheld.reason, (),
                              self.contact) from None
            raise self._release_withheld(name, record, withheld) from None
        except UpstreamError as failure:
            log.warning("upstream_failed", upstream="private", package=name.full,
                        version=record.version, kind=failure.kind, detail=str(failure))
            return None, failure
        if relayed is not None:
            request[SOURCE] = "mirror"
        if relayed is not None and self.release is not None and request.method == "GET":
            self.release.installed(name.full)
        return (relayed[0] if relayed is not None else None), None

    async def _public(self, request: web.Request, name: PackageName, record: VersionRecord,
                      private_error: UpstreamError | None, deadline: asyncio.Timeout,
                      slot: Slot, gated: Gated,
                      release: Callable[[], ContentsCheck] | None) -> web.StreamResponse:
        version = record.version
        published = gated.time.get(version)
        # Never a URL built here: the version's own `dist.tarball`, which the gate checked is on
        # the public upstream's origin (one that is not was denied as unavailable, a 403). A
        # first-party name has no public URL, so its tarballs never come from public.
        url = record.upstream_tarball
        if url is None:
            if private_error is not None:
                raise upstream_failed(private_error, name)
            raise Refused(404, f"{name.full}@{version} is listed by the private upstream, "
                          "which did not serve its tarball", reason="not found")
        verifier = _verifier(record)
        key = ("public", url, _checked(verifier), _reads(record))
        judge = self.release
        # `release`: the release signals read a first GET of a version they have no verdict
        # for (`at_pull`); a version they judged is refused above or relayed as any other
        try:
            relayed = await self.relay.relay(
                request, lambda: self.public.stream(url, method=request.method, pool=TARBALLS),
                key=key, source="public", name=name,
                version=version, verifier=verifier, scan=_scripts_read(record), slot=slot,
                deadline=deadline, release=release, license=_license_check(record))
        except Withheld as withheld:
            # refused before a byte was sent: the 403 with the reason, at the first pull
            if withheld.rule in (INSTALL_SCRIPTS, LICENSE):
                raise by_rule(name, version, withheld.rule, withheld.reason,
                              await self._survivors(name, gated, policy_of(request)),
                              self.contact) from None
            raise self._release_withheld(name, record, withheld) from None
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="public", package=name.full,
                        version=version, kind=error.kind, detail=str(error))
            raise  # the caller turns it into the client's answer (`upstream_failed`)
        if relayed is None:
            raise Refused(404, f"the public upstream has no tarball for {name.full}@{version}",
                          reason="not found")
        answer, verified = relayed
        # Only a public GET read to its end, matched and reached a client whole is mirrored:
        # a client that hangs up early causes no job (the worker would download up to the
        # size cap for nothing); HEAD never enqueues, nor does a version the private upstream
        # lists. Many readers of one spool enqueue once (`_first_in_window`).
        if verified is not None and request.method == "GET" and not record.private:
            if judge is not None:
                judge.installed(name.full)
            # the license rule in force read these bytes and found them agreeing (else they
            # were refused, or, in report mode, said so: the worker says it again)
            agreed = record.license_read is not None and not record.license_read.report
            self._enqueue(name, record, url, verified.size, published,
                          hand_over=lambda: self._hand_over(key, url, verified, agreed),
                          policy=policy_of(request))
        return answer

    async def _hand_over(self, key: Hashable, url: str,
                         verified: Verified, license_read: bool = False) -> None:
        """The worker beside the proxy gets the bytes just verified with the job, from the
        spool they were relayed through (a tarball that streamed unspooled is downloaded by
        the worker as before). A large one is copied in a thread, the spool held open as a
        reader's would be."""
        handoff = self.handoff
        if handoff is None:
            return
        spool = self.relay.spools.find(key)
        place = (handoff.reserve(url, spool.size, verified.digest, license_read=license_read)
                 if spool is not None and spool.verified == verified else None)
        if spool is None or place is None:
            self.metrics.handoffs.labels("not_offered").inc()
            return
        self.relay.spools.join(spool)
        try:
            written = await in_thread_if_large(spool.size, handoff.write, place, spool.contents)
        finally:
            self.relay.spools.leave(spool)
        kept = handoff.commit(url, place, written)
        self.metrics.handoffs.labels("offered" if kept else "not_offered").inc()

    def _first_in_window(self, label: str) -> bool:
        now = self.clock()
        last = self._enqueued.get(label)
        if last is not None and now - last < ENQUEUE_WINDOW:
            return False
        remember(self._enqueued, label, now)
        return True

    def _enqueue(self, name: PackageName, record: VersionRecord, url: str, size: int,
                 published: str | None, *,
                 hand_over: Callable[[], Awaitable[None]] | None = None,
                 policy: str | None = None) -> bool:
        """Enqueue the version's job (`mirror_job`, with the size relayed) in a background task:
        the response never waits on the queue and never fails because of it. `hand_over` runs
        in that task before the job is sent, so the worker finds the bytes when the job comes.
        A pull under a policy set (`policy`) sends one only if the default rules admit the
        version too. False when no job is sent (one was sent in the window, or none can be
        made)."""
        if not self._first_in_window(f"{name.full}@{record.version}"):  # MirrorJob.label
            log.debug("job_recently_enqueued", package=name.full, version=record.version)
            return False
        try:
            job = mirror_job(name, record, url, size, published)
        except ValueError as error:
            log.warning("job_not_enqueued", package=name.full, version=record.version,
                        reason=str(error))
            return False
        task = asyncio.get_running_loop().create_task(self._send(
            job, hand_over, name if policy is not None else None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.on_enqueued is not None:
            self.on_enqueued(name, record.version)
        return True

    async def _send(self, job: MirrorJob,
                    hand_over: Callable[[], Awaitable[None]] | None = None,
                    judged: PackageName | None = None) -> None:
        if judged is not None and self.mirrored is not None \
                and not await self._default_admits(judged, job):
            return
        if hand_over is not None:
            try:
                await hand_over()
            except Exception as error:  # a bug: the worker downloads instead, the job goes out
                log.error("handoff_failed", package=job.name, version=job.version,
                          reason=f"{type(error).__name__}: {error}")
        # a task of the request, so its span is the request's child even after the answer
        with tracing.span("mirrorgate.enqueue", {
                "mirrorgate.package": job.name, "mirrorgate.version": job.version,
                "messaging.system": self.queue.provider,
                "messaging.operation.type": "send"}, kind="producer") as span:
            parent = tracing.traceparent()
            if parent is not None:  # what the worker's span continues from
                job = dataclasses.replace(job, traceparent=parent)
            taken = await self._enqueue_now(job)
            span.set("mirrorgate.taken", taken)

    async def _default_admits(self, name: PackageName, job: MirrorJob) -> bool:
        """Whether a version pulled under a policy set may be mirrored: the worker re-gates a
        job with the default rules, and a version only a laxer set admits would reach it as a
        job the rules deny, which reads as a forged one. Such a version is served from public
        to its set's clients, and mirrored at a pull once the default rules admit it."""
        assert self.mirrored is not None
        try:
            admitted = await self.mirrored(name, job.version)
        except Exception as error:  # an upstream failed: the next pull enqueues it again
            admitted, why = False, f"{type(error).__name__}: {error}"
        else:
            why = "the default rules do not admit it (pulled under a policy set)"
        if not admitted:
            log.info("job_not_enqueued", package=job.name, version=job.version, reason=why)
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
        return admitted

    async def _enqueue_now(self, job: MirrorJob) -> bool:
        try:
            taken = await self.queue.enqueue(job)
        except Exception as error:  # the queue promised not to raise; a bug is logged
            log.error("enqueue_failed", package=job.name, version=job.version,
                      reason=f"{type(error).__name__}: {error}")
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
            return False
        if not taken:
            # The queue was full: it counts the drop and reports it at its own cadence
            # (mirror_queue_dropped: the first, then every 1,000th), so a burst is not one line
            # per request; nor is it counted as enqueued. The next pull of this version may
            # enqueue it again.
            self._enqueued.pop(job.label, None)
            self._withdraw_handoff(job)
            return False
        self.metrics.enqueued.inc()
        log.info("job_enqueued", package=job.name, version=job.version,
                 queue=self.queue.provider)
        return True

    def _withdraw_handoff(self, job: MirrorJob) -> None:
        # no job will take these bytes: their room goes to the next offer
        if self.handoff is not None:
            self.handoff.discard(job.artifact.tarball_url)

    async def drain(self) -> None:
        """Wait for the enqueues still running (at application cleanup)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _scripts_read(record: VersionRecord) -> ScriptsRead | None:
    """How the install-scripts rule reads this version's bytes (None: it does not)."""
    if not record.scan_scripts:
        return None
    return ScriptsRead(record.scan_reports, record.manifest)


def _license_check(record: VersionRecord) -> LicenseCheck | None:
    """How the license rule reads this version's bytes: the tarball's own package.json
    against the license its registry manifest declared (None: the rule does not read them)."""
    read = record.license_read
    if read is None:
        return None
    return LicenseCheck(read.report, functools.partial(tarball_license_finding, read.rule,
                                                       record.license))


def _checked(verifier: StreamVerifier | None) -> str | None:
    """The digest a relay checks its bytes against, in its spool's key: bytes admitted under
    another digest (a packument changed meanwhile) are another download."""
    return verifier.expected.sri() if verifier is not None else None


def _reads(record: VersionRecord) -> tuple[str | None, str | None]:
    """How the rules of the asking client's policy set read the bytes (the install-scripts
    scan, the license), in its spool's key: a download's one reading serves or refuses it for
    every reader, so a client whose set reads them otherwise (not at all, or in report mode)
    never joins it, nor the spool it leaves lingering: one team's [license] is not skipped
    because another team's download of the same bytes read none."""
    scripts = ("report" if record.scan_reports else "enforce") if record.scan_scripts else None
    read = record.license_read
    return scripts, ("report" if read.report else "enforce") if read is not None else None


def _ends(refused: Refused) -> float | None:
    """When a refusal said it ends (a cooldown's, a quarantine's moment), for the pull log."""
    said = refused.fields.get("installable_at") or refused.fields.get("until")
    try:
        return datetime.fromisoformat(said).timestamp() if isinstance(said, str) else None
    except ValueError:
        return None


def _who(request: web.Request) -> str:
    """The client as the pull log names it: its name (and its CI identity), never its token."""
    client = request.get(CLIENT)
    return client.who if client is not None else "anonymous"


def _integrity(record: VersionRecord) -> str:
    """The integrity the version was admitted with (a first-party one: its manifest's)."""
    chosen = strongest(record.digests)
    if chosen is not None:
        return chosen.sri()
    dist = record.manifest().get("dist")  # first-party: no public digests to compare with
    found = dist.get("integrity") if isinstance(dist, dict) else None
    return found if isinstance(found, str) else ""


def _served_under(record: VersionRecord) -> str:
    """The verdict a version is served under, as the pull log keeps it: `admitted`, with
    `weak`, what report mode would have denied and the exceptions that let it through."""
    if not (record.weak or record.reported or record.excepted):
        return "admitted"  # almost every pull: no string built
    parts = ["admitted"] + (["weak"] if record.weak else [])
    parts += [f"would deny: {denial.rule}" for denial in record.reported]
    parts += [f"excepted: {text}" for text in record.excepted]
    return "; ".join(parts)


def _verifier(record: VersionRecord) -> StreamVerifier | None:
    """The verifier for a public version's bytes: its strongest admitted digest, no size cap
    (the relay never had one). None only for a version without a digest this process can
    compute, which the gate never admits."""
    try:
        return StreamVerifier(record.digests, expected_size=None, limit=None)
    except Unverifiable:
        return None
