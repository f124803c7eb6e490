"""The tarball route, `GET|HEAD /npm/<name>/-/<file>.tgz`: private first, then public.

The gate decides (`gate.admission`: an admission, or a refusal rendered as it words it); the
route streams what it admits through `relay` (one shared download per tarball, spooled), a
public tarball hashed on the way and, once it reached a client whole, enqueued for the worker
to mirror; and it records the pull.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from aiohttp import web

from mirrorgate.gate import VersionRecord
from mirrorgate.gate.admission import Admission, Admissions
from mirrorgate.gate.pulls.log import PullLog
from mirrorgate.gate.refusals import Refusal, not_mirrored, upstream_failed
from mirrorgate.integrity import StreamVerifier, strongest
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.serve.access import CLIENT, policy_of
from mirrorgate.serve.mirroring import MirrorJobs
from mirrorgate.serve.overload import Slot
from mirrorgate.serve.refusals import Refused
from mirrorgate.serve.relay import (
    OUTCOME,
    ContentsCheck,
    Relay,
    Withheld,
)
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["OUTCOME", "TarballRoute"]

log = structlog.get_logger("mirrorgate.serve")

SOURCE = web.RequestKey("mirrorgate_pull_source", str)
"""Where a tarball answer's bytes come from ("mirror" or "public"), for the pull log."""
RECORD = web.RequestKey("mirrorgate_pull_record", VersionRecord)
"""The version a tarball request asked for, once the gate admitted it (refusals carry theirs)."""
REQUEST_ID = web.RequestKey("mirrorgate_request_id", str)
"""The request's id as its log lines carry it, for the pull log: read off the request, not out
of the log context (a copy of every bound variable, per pull)."""


class TarballRoute:
    """Streams what the gate admits (`gate.admission`): from the private upstream, else the
    public one, recorded in the pull log and, from public, enqueued for the worker."""

    def __init__(self, *, private: PrivateRegistry, public: Upstream, metrics: Metrics,
                 relay: Relay, admissions: Admissions, jobs: MirrorJobs,
                 pulls: PullLog | None = None) -> None:
        self.private = private
        self.public = public
        self.metrics = metrics
        self.relay = relay
        self.admissions = admissions
        """The gate's answer to a pull: an `Admission` or a `Refusal`."""
        self.jobs = jobs
        """What a public pull served whole enqueues for the worker (`mirroring`)."""
        self.pulls = pulls
        """The pull log (`gate.pulls.log`): one record per tarball GET served or refused."""

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
            said = refused.refusal
            if pulls is not None and said is not None and said.status == 403 \
                    and said.rule and said.record is not None:
                pulls.refusal(_who(request), name.full, said.record.version,
                              _integrity(said.record), said.rule, request.get(REQUEST_ID, ""),
                              said.ends)
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
        admitted = await self.admissions.tarball(name, filename, policy_of(request),
                                                 request.method == "GET")
        if isinstance(admitted, Refusal):
            raise self._refused(admitted)
        request[RECORD] = admitted.record
        private_error: UpstreamError | None = None
        if admitted.public_only:
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
                request, admitted, filename, deadline, slot,
                verify=admitted.release is not None, release=admitted.release)
            if answer is not None:
                return answer
        try:
            return await self._public(request, admitted, private_error, deadline, slot)
        except Refused as missing:
            # public has no such tarball (a package removed there, a withdrawn tarball): the
            # same holds as for an outage, a copy mirrored since the packument was filled is
            # served (verified), and the 404 stands only when private lacks it too
            if admitted.public_only and missing.status == 404:
                copy, _ = await self._from_private(request, admitted, filename, deadline,
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
            if admitted.public_only:
                copy, _ = await self._from_private(request, admitted, filename, deadline,
                                                  slot, verify=True)
                if copy is not None:
                    return copy
            raise Refused.of(not_mirrored(error, name, admitted.record.version)) from None

    def _refused(self, refusal: Refusal) -> Refused:
        """The gate's refusal as this request's answer, raising the alert it carries."""
        if refusal.alert is not None:
            self.metrics.events.alert(refusal.alert)
        return Refused.of(refusal)

    async def _withheld(self, admitted: Admission, withheld: Withheld,
                        source: str) -> Refused:
        """The 403 for bytes a reading refused before any was sent, as the gate words it."""
        return self._refused(await self.admissions.bytes_refused(
            admitted, withheld.rule, withheld.reason, source))

    async def _from_private(self, request: web.Request, admitted: Admission, filename: str,
                            deadline: asyncio.Timeout, slot: Slot, *, verify: bool,
                            release: Callable[[], ContentsCheck] | None = None,
                            ) -> tuple[web.StreamResponse | None, UpstreamError | None]:
        """The private upstream's copy, relayed: (answer, None); (None, None) when private
        lacks it; (None, error), logged, when private failed. With `verify`, the bytes are
        checked against the admitted digest (a copy of a version the packument called
        public-only); a private hit is otherwise relayed as is. A mirrored copy is read like
        public's bytes where the scripts rule applies: it may predate the rule, or this
        check; and by the release signals (`release`) where its verdict was read under fewer
        signals than are in force (`ReleaseJudge.at_pull`)."""
        name, version = admitted.name, admitted.record.version
        verifier = admitted.verifier() if verify else None
        try:
            relayed = await self.relay.relay(
                request, lambda: self.private.tarball(name, filename),
                key=("private", name.full, filename, _checked(verifier), admitted.reads),
                source="private", name=name, version=version, verifier=verifier,
                scan=admitted.scripts, slot=slot, deadline=deadline, release=release,
                license=admitted.license)
        except Withheld as withheld:  # refused before a byte was sent
            raise await self._withheld(admitted, withheld, "private") from None
        except UpstreamError as failure:
            log.warning("upstream_failed", upstream="private", package=name.full,
                        version=version, kind=failure.kind, detail=str(failure))
            return None, failure
        if relayed is not None:
            request[SOURCE] = "mirror"
            if request.method == "GET":
                self.admissions.installed(admitted)
        return (relayed[0] if relayed is not None else None), None

    async def _public(self, request: web.Request, admitted: Admission,
                      private_error: UpstreamError | None, deadline: asyncio.Timeout,
                      slot: Slot) -> web.StreamResponse:
        name, record = admitted.name, admitted.record
        version = record.version
        # Never a URL built here: the version's own `dist.tarball`, which the gate checked is on
        # the public upstream's origin (one that is not was denied as unavailable, a 403). A
        # first-party name has no public URL, so its tarballs never come from public.
        url = admitted.url
        if url is None:
            if private_error is not None:
                raise Refused.of(upstream_failed(private_error, name))
            raise Refused(404, f"{name.full}@{version} is listed by the private upstream, "
                          "which did not serve its tarball", reason="not found")
        verifier = admitted.verifier()
        key = ("public", url, _checked(verifier), admitted.reads)
        # `release`: the release signals read a first GET of a version they have no verdict
        # for (`at_pull`); a version they judged was refused by the gate or is relayed as any
        # other
        try:
            relayed = await self.relay.relay(
                request, lambda: self.public.stream(url, method=request.method, pool=TARBALLS),
                key=key, source="public", name=name, version=version, verifier=verifier,
                scan=admitted.scripts, slot=slot, deadline=deadline, release=admitted.release,
                license=admitted.license)
        except Withheld as withheld:
            # refused before a byte was sent: the 403 with the reason, at the first pull
            raise await self._withheld(admitted, withheld, "public") from None
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
        # lists. Many readers of one spool enqueue once (`MirrorJobs.enqueue`).
        if verified is not None and request.method == "GET" and not record.private:
            self.admissions.installed(admitted)
            # the license rule in force read these bytes and found them agreeing (else they
            # were refused, or, in report mode, said so: the worker says it again)
            agreed = admitted.license is not None and not admitted.license.report
            self.jobs.enqueue(name, record, url, verified.size, admitted.published,
                              hand_over=lambda: self.jobs.hand_over(key, url, verified, agreed),
                              policy=admitted.policy)
        return answer

    async def drain(self) -> None:
        """Wait for the enqueues still running (at application cleanup)."""
        await self.jobs.drain()


def _checked(verifier: StreamVerifier | None) -> str | None:
    """The digest a relay checks its bytes against, in its spool's key: bytes admitted under
    another digest (a packument changed meanwhile) are another download."""
    return verifier.expected.sri() if verifier is not None else None


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

