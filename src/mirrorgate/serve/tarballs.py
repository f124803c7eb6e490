"""The tarball route, `GET|HEAD /npm/<name>/-/<file>.tgz`: private first, then public.

Only a version the gated packument admits is served; bytes stream through in constant memory,
and a public tarball is hashed on the way and, once it reached the client whole, enqueued for
the worker to mirror.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import aiohttp
import structlog
from aiohttp import web

from mirrorgate import tracing
from mirrorgate.events import Alert
from mirrorgate.gate import Gated, VersionRecord, mirror_job
from mirrorgate.gate.alerts import denial_alert
from mirrorgate.integrity import DigestMismatch, StreamVerifier, Unverifiable, Verified, strongest
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue
from mirrorgate.npm.names import InvalidNameError, PackageName, version_from_filename
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.serve.refusals import Refused, denied, upstream_failed
from mirrorgate.serve.relayhash import RelayHasher
from mirrorgate.upstream.client import TARBALLS, Upstream, UpstreamError
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["OUTCOME", "TarballRoute"]

log = structlog.get_logger("mirrorgate.serve")

_K = TypeVar("_K")
_V = TypeVar("_V")
OCTETS = "application/octet-stream"
# A version is enqueued at most once per window: parallel CI jobs and npm's own retry after an
# integrity failure pull the same tarball several times in a row, and one job mirrors it. A pull
# after the window enqueues again, so a job the queue lost (the bounded memory queue drops when
# full) is made good by the next pull.
ENQUEUE_WINDOW = 300.0
ENQUEUE_MEMORY = 10_000
"""Versions remembered for the enqueue window; the oldest are forgotten first."""
OUTCOME = web.ResponseKey("mirrorgate_outcome", str)
"""Set on a response whose transfer did not complete (`aborted`, `client_gone`): the
request metric's status label instead of the status that was already sent."""


class TarballRoute:
    def __init__(self, *, private: PrivateRegistry, public: Upstream, queue: MirrorQueue,
                 metrics: Metrics,
                 packument: Callable[[PackageName], Awaitable[Gated | None]],
                 private_answered: Callable[[PackageName], bool] = lambda _name: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.private = private
        self.public = public
        self.queue = queue
        self.metrics = metrics
        self.packument = packument
        self.private_answered = private_answered
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._enqueued: OrderedDict[str, float] = OrderedDict()
        # versions whose tarball was found to run code at install (`npm.tarscripts`): the next
        # request is a 403 saying why, not another download cut without a word to the client
        self._scripts_found: OrderedDict[str, str] = OrderedDict()
        # (version, the digest its bytes were verified against) whose tarball was read and
        # runs nothing at install: the same bytes are not inflated again (a bomb's CPU is
        # spent once per version, not once per download)
        self._scanned_clean: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def __call__(self, request: web.Request, name: PackageName, filename: str,
                       deadline: asyncio.Timeout) -> web.StreamResponse:
        try:
            # the file name must be `<bare name>-<version>.tgz` for this package, else 400
            version = version_from_filename(name, filename)
        except InvalidNameError as error:
            self.metrics.refusals.labels("bad_tarball_filename").inc()
            raise Refused(400, f"refused tarball path: {error}", reason=str(error)) from None
        # The gated packument (cached) is read first, so the rules reach every version: a denied
        # one is a 403 wherever its bytes are, mirrored and first-party versions included, and a
        # version no upstream lists is a 404 before any tarball is asked for.
        gated = await self.packument(name)
        record = gated.versions.get(version) if gated is not None else None
        if gated is None or record is None:
            raise Refused(404, f"{name.full}@{version} is not on the private or the public "
                          "upstream", reason="not found")
        if record.denial is not None:
            log.info("tarball_denied", package=name.full, version=version,
                     rule=record.denial.rule, reason=record.denial.reason)
            self.metrics.events.denied(f"{name.full}@{version}", record.denial.rule,
                                       record.denial.reason)
            alert = denial_alert(name.full, version, record.denial, "tarball")
            if alert is not None:
                self.metrics.events.alert(alert)
            raise denied(name, record)
        found = (self._scripts_found.get(f"{name.full}@{version}") if record.scan_scripts
                 else None)
        if found is not None:
            log.info("tarball_denied", package=name.full, version=version,
                     rule="install-scripts", reason=found)
            raise Refused(403, f"mirrorgate denied {name.full}@{version} by its install-scripts "
                          f"rule: {found}", reason=found, rule="install-scripts",
                          package=name.full, version=version,
                          status_text=f"Forbidden: mirrorgate denied {name.full}@{version} "
                                      "(install-scripts rule)")
        private_error: UpstreamError | None = None
        skipped = not record.private and self.private_answered(name)
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
            answer, private_error = await self._from_private(request, name, filename, record,
                                                             deadline, verify=False)
            if answer is not None:
                return answer
        try:
            return await self._public(request, name, record, private_error, deadline,
                                      gated.time.get(version))
        except UpstreamError as error:
            # Skipped on the packument's word, private may hold the version all the same: the
            # worker mirrors within seconds of a pull, the packument says "public-only" for
            # its whole TTL, and a public outage in that window must not fail an install of
            # what is already mirrored. Asked only once public has failed, so the skip still
            # saves the round trip on every healthy pull; the bytes are checked against the
            # admitted digest as public ones would be.
            if skipped:
                copy, _ = await self._from_private(request, name, filename, record, deadline,
                                                  verify=True)
                if copy is not None:
                    return copy
            raise upstream_failed(error, name) from None

    async def _from_private(self, request: web.Request, name: PackageName, filename: str,
                            record: VersionRecord, deadline: asyncio.Timeout, *, verify: bool,
                            ) -> tuple[web.StreamResponse | None, UpstreamError | None]:
        """The private upstream's copy, streamed: (answer, None); (None, None) when private
        lacks it; (None, error), logged, when private failed. With `verify`, the bytes are
        checked against the admitted digest (a copy of a version the packument called
        public-only); a private hit is otherwise streamed as is."""
        failure: UpstreamError
        try:
            async with self.private.tarball(name, filename) as body:
                if body is None:
                    return None, None
                # a mirrored copy is read like public's bytes where the scripts rule applies:
                # it may predate the rule, or this check
                answer, _ = await self._stream(
                    request, body.size, body.chunks, deadline, source="private", name=name,
                    version=record.version, verifier=_verifier(record) if verify else None,
                    scan=self._scan_for(name, record))
                return answer, None
        except UpstreamError as error:
            failure = error
        log.warning("upstream_failed", upstream="private", package=name.full,
                    version=record.version, kind=failure.kind, detail=str(failure))
        return None, failure

    async def _public(self, request: web.Request, name: PackageName, record: VersionRecord,
                      private_error: UpstreamError | None, deadline: asyncio.Timeout,
                      published: str | None) -> web.StreamResponse:
        version = record.version
        # Never a URL built here: the version's own `dist.tarball`, which the gate checked is on
        # the public upstream's origin (one that is not was denied as unavailable, a 403). A
        # first-party name has no public URL, so its tarballs never come from public.
        url = record.upstream_tarball
        if url is None:
            if private_error is not None:
                raise upstream_failed(private_error, name)
            raise Refused(404, f"{name.full}@{version} is listed by the private upstream, "
                          "which did not serve its tarball", reason="not found")
        try:
            async with self.public.stream(url, method=request.method,
                                          pool=TARBALLS) as response:
                if response is None:
                    raise Refused(404, f"the public upstream has no tarball for "
                                  f"{name.full}@{version}", reason="not found")
                answer, verified = await self._stream(
                    request, response.size, response.chunks,
                    deadline, source="public", name=name, version=version,
                    verifier=_verifier(record), scan=self._scan_for(name, record))
                # Only a public GET read to its end, matched and reached the client whole is
                # mirrored: a client that hangs up early causes no job (the worker would
                # download up to the size cap for nothing); HEAD never enqueues, nor does a
                # version the private upstream lists.
                if verified is not None and request.method == "GET" and not record.private:
                    self._enqueue(name, record, url, verified.size, published)
                return answer
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="public", package=name.full,
                        version=version, kind=error.kind, detail=str(error))
            raise  # the caller turns it into the client's answer (`upstream_failed`)

    async def _stream(self, request: web.Request, size: int | None,
                      chunks: AsyncIterator[bytes], deadline: asyncio.Timeout, *,
                      source: str, name: PackageName, version: str,
                      verifier: StreamVerifier | None = None, scan: ScriptScan | None = None,
                      ) -> tuple[web.StreamResponse, Verified | None]:
        """Relay `chunks`; with a `verifier`, the bytes are hashed and the last chunk held back
        until they are known to match. Returns the response and, when the body was verified
        and reached the client whole, what matched.

        Chunks are copied as they arrive (constant memory). An upstream that breaks mid-body,
        or bytes that do not match, close the connection (`_cut`). A client that stops reading
        is cut by the listener's write-stall timeout; the write here then fails as a disconnect
        and the upstream connection, on the tarball pool, is released."""
        response = web.StreamResponse(headers={"Content-Type": OCTETS})
        if size is not None:
            response.content_length = size
        await response.prepare(request)
        # the request timeout stops at the first byte; the upstream's per-read timeout bounds
        # the rest
        deadline.reschedule(None)
        if request.method == "HEAD":
            log.info("tarball_served", upstream=source, package=name.full, version=version,
                     bytes=0, head=True)
            return response, None
        # hashed and scanned beside the loop when a second CPU is there, so neither sha512 nor
        # inflating a tarball (a compression bomb's gigabyte) runs on the relay's own core
        reader = RelayHasher(verifier, scan) if verifier is not None or scan is not None \
            else None
        try:
            return await self._relay(request, response, chunks, reader, source=source,
                                     name=name, version=version)
        finally:
            if reader is not None:
                reader.close()

    async def _relay(self, request: web.Request, response: web.StreamResponse,
                     chunks: AsyncIterator[bytes], reader: RelayHasher | None, *, source: str,
                     name: PackageName, version: str,
                     ) -> tuple[web.StreamResponse, Verified | None]:
        """The body of `_stream`: copy, hash and scan (holding the last chunk back), finish or
        cut."""
        sent = 0
        verified: Verified | None = None
        iterator = aiter(chunks)
        held: bytes | None = None
        while True:
            try:
                read = await anext(iterator)
            except StopAsyncIteration:
                break
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                log.warning("tarball_stream_failed", upstream=source, package=name.full,
                            version=version, sent=sent, detail=type(error).__name__)
                return self._cut(request, response, "aborted"), None
            chunk: bytes | None = read
            if reader is not None:
                await reader.feed(read)
                # Holding one chunk back means the digest (and the scan) is known before the
                # final bytes leave; it costs no copy and delays only the last 64 KiB.
                chunk, held = held, read  # send the previous chunk, hold this one
            if chunk is None:
                continue
            if not await self._write(response, chunk, name, version, sent):
                return response, None
            sent += len(chunk)
        if reader is not None:
            try:
                verified = await reader.finish()  # every byte read, the last still held
            except DigestMismatch as mismatch:
                # The held chunk is dropped and the connection closed: even a client that
                # checks no integrity gets a truncated answer it cannot install.
                self.metrics.tampered.inc()
                self.metrics.events.tampered(f"{name.full}@{version}", f"the {source} "
                                             "tarball did not match the admitted digest; "
                                             "the client's download was cut")
                log.critical("tarball_digest_mismatch", security=True, upstream=source,
                             package=name.full, version=version,
                             expected=mismatch.expected.sri(), actual=mismatch.actual.sri(),
                             algorithm=mismatch.expected.algorithm, sent=sent,
                             withheld=len(held or b""))
                self.metrics.events.alert(Alert(
                    "tampered", f"{name.full}@{version}",
                    f"the {source} upstream's tarball for {name.full}@{version} did not match "
                    f"the {mismatch.expected.algorithm} digest it was admitted with; the "
                    "client's download was cut and nothing was mirrored", name.full, version,
                    {"where": "proxy", "upstream": source, "algorithm":
                     mismatch.expected.algorithm, "expected": mismatch.expected.sri(),
                     "actual": mismatch.actual.sri()}))
                return self._cut(request, response, "tampered"), None
        scan = reader.scan if reader is not None else None
        if scan is not None and (reason := scan.finish()) is not None:
            # Manifest confusion: the manifest the install-scripts rule admitted shows no
            # scripts, the tarball's own package.json (which yarn 1 runs) has some. Cut like
            # tampered bytes: the held chunk never leaves, so no client can install it.
            self.metrics.rule_denials.labels("install-scripts").inc()
            self.metrics.events.record("denied", f"{name.full}@{version}",
                                       f"the download was cut: {reason}")
            log.warning("tarball_scripts_refused", security=True, upstream=source,
                        package=name.full, version=version, rule="install-scripts",
                        reason=reason, sent=sent)
            self.metrics.events.alert(Alert(
                "install-scripts", f"{name.full}@{version}",
                f"the tarball of {name.full}@{version} runs code at install that its manifest "
                f"did not show ({reason}); the download was cut", name.full, version,
                {"where": "proxy", "upstream": source, "rule": "install-scripts",
                 "reason": reason}))
            self._remember(self._scripts_found, f"{name.full}@{version}", reason)
            return self._cut(request, response, "denied"), None
        if scan is not None and verified is not None:
            self._remember(self._scanned_clean, (f"{name.full}@{version}", verified.digest.sri()),
                           None)
        if held is not None:
            if not await self._write(response, held, name, version, sent):
                return response, None
            sent += len(held)
        await response.write_eof()
        log.info("tarball_served", upstream=source, package=name.full, version=version,
                 bytes=sent, head=False)
        return response, verified

    def _scan_for(self, name: PackageName, record: VersionRecord) -> ScriptScan | None:
        """A fresh install-scripts scan where the rule applies, unless these admitted bytes
        were read already and run nothing (`_scanned_clean`): the download is verified against
        the same digest, so bytes that differ are cut anyway."""
        if not record.scan_scripts:
            return None
        best = strongest(record.digests)
        if best is not None and (f"{name.full}@{record.version}",
                                 best.sri()) in self._scanned_clean:
            return None
        return ScriptScan()

    @staticmethod
    def _remember(memory: OrderedDict[_K, _V], key: _K, value: _V) -> None:
        memory[key] = value
        memory.move_to_end(key)
        while len(memory) > ENQUEUE_MEMORY:
            memory.popitem(last=False)

    @staticmethod
    async def _write(response: web.StreamResponse, chunk: bytes, name: PackageName,
                     version: str, sent: int) -> bool:
        """Send one chunk; False (logged, outcome set) when the client has gone."""
        try:
            await response.write(chunk)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            log.info("tarball_client_gone", package=name.full, version=version, sent=sent)
            response[OUTCOME] = "client_gone"
            return False
        return True

    @staticmethod
    def _cut(request: web.Request, response: web.StreamResponse,
             outcome: str) -> web.StreamResponse:
        """Close the connection mid-body: the client sees a failed transfer, never a short 200."""
        if request.transport is not None:
            request.transport.close()
        response[OUTCOME] = outcome
        return response

    def _first_in_window(self, label: str) -> bool:
        now = self.clock()
        last = self._enqueued.get(label)
        if last is not None and now - last < ENQUEUE_WINDOW:
            return False
        self._remember(self._enqueued, label, now)
        return True

    def _enqueue(self, name: PackageName, record: VersionRecord, url: str, size: int,
                 published: str | None) -> None:
        """Enqueue the version's job (`mirror_job`, with the size relayed) in a background task:
        the response never waits on the queue and never fails because of it."""
        if not self._first_in_window(f"{name.full}@{record.version}"):  # MirrorJob.label
            log.debug("job_recently_enqueued", package=name.full, version=record.version)
            return
        try:
            job = mirror_job(name, record, url, size, published)
        except ValueError as error:
            log.warning("job_not_enqueued", package=name.full, version=record.version,
                        reason=str(error))
            return
        task = asyncio.get_running_loop().create_task(self._send(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, job: MirrorJob) -> None:
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

    async def _enqueue_now(self, job: MirrorJob) -> bool:
        try:
            taken = await self.queue.enqueue(job)
        except Exception as error:  # the queue promised not to raise; a bug is logged
            log.error("enqueue_failed", package=job.name, version=job.version,
                      reason=f"{type(error).__name__}: {error}")
            self._enqueued.pop(job.label, None)
            return False
        if not taken:
            # The queue was full: it counts the drop and reports it at its own cadence
            # (mirror_queue_dropped: the first, then every 1,000th), so a burst is not one line
            # per request; nor is it counted as enqueued. The next pull of this version may
            # enqueue it again.
            self._enqueued.pop(job.label, None)
            return False
        self.metrics.enqueued.inc()
        log.info("job_enqueued", package=job.name, version=job.version,
                 queue=self.queue.provider)
        return True

    async def drain(self) -> None:
        """Wait for the enqueues still running (at application cleanup)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _verifier(record: VersionRecord) -> StreamVerifier | None:
    """The verifier for a public version's bytes: its strongest admitted digest, no size cap
    (the relay never had one). None only for a version without a digest this process can
    compute, which the gate never admits."""
    try:
        return StreamVerifier(record.digests, expected_size=None, limit=None)
    except Unverifiable:
        return None
