"""Relaying a tarball's bytes to clients: through a shared spool, or streamed straight through.

A GET whose upstream body has a declared size is spooled (`spool`): one download fills it at
the upstream's pace, hashed and scanned on the way (`relayhash`), holding the admission slot
and the upstream connection, and every request for those bytes reads it at its own pace. A
HEAD, a body of unknown size, or one the spool bound cannot take is one request's own stream.
Either way the last chunk leaves only once the body matched the admitted digest (and, where
the install-scripts rule applies, runs nothing at install); a body that does not is cut for
every reader. A spooled pull the scan or the release signals may refuse, of at most
`HOLD_AT_MOST` bytes, is withheld until their verdict: a refusal is then a 403 with its reason.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Protocol, TypeVar

import aiohttp
import structlog
from aiohttp import web

from mirrorgate.errors import MirrorgateError
from mirrorgate.events import Alert
from mirrorgate.gate.admission import LicenseCheck, ScanFindings, ScriptsRead
from mirrorgate.integrity import DigestMismatch, StreamVerifier, Verified
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.rules import INSTALL_SCRIPTS, scan_finding
from mirrorgate.rules.license import LICENSE
from mirrorgate.serve.listener import SendFloor
from mirrorgate.serve.overload import Slot
from mirrorgate.serve.relayhash import RelayHasher
from mirrorgate.serve.spool import Spool, SpoolOutcome, Spools

__all__ = ["CHUNK", "HOLD_AT_MOST", "OCTETS", "OUTCOME", "Body", "ContentsCheck", "Relay",
           "Withheld"]

log = structlog.get_logger("mirrorgate.serve")

_K = TypeVar("_K")
_V = TypeVar("_V")
OCTETS = "application/octet-stream"
CHUNK = 256 * 1024
"""Bytes a spool reader sends per write, at most: a chunk as it arrived goes out whole, never
sliced into copies (the file store reads 256 KiB at a time, public's answers come in 64 KiB),
and a larger write costs less a MB (0.55 against 0.69 ms of CPU, bare aiohttp on loopback)."""
MEMORY = 10_000
"""Versions remembered in each memo (scripts found, scanned clean); the oldest go first."""
HOLD_AT_MOST = 16 * 1024 * 1024
"""A spooled pull the install-scripts scan (in enforce mode) or the release signals read, of a
tarball up to this size, is withheld until their verdict: the client then gets a 403 with the
reason rather than a cut it reads as a network error. Larger ones stream as they arrive and
are cut if refused (docs/serving.md#a-refusal-from-the-bytes)."""
OUTCOME = web.ResponseKey("mirrorgate_outcome", str)
"""Set on a response whose transfer did not complete (`aborted`, `client_gone`, `tampered`,
`denied`): the request metric's status label instead of the status that was already sent."""


class Body(Protocol):
    """An upstream tarball answer being read (`client.Download`, `registry.TarballBody`)."""

    @property
    def size(self) -> int | None: ...

    @property
    def chunks(self) -> AsyncIterator[bytes]: ...


Opener = Callable[[], AbstractAsyncContextManager[Body | None]]
"""Opens the upstream body: None when the upstream has no such tarball (a 404)."""


class Withheld(MirrorgateError):  # noqa: N818 - an outcome carried to the route, not a bug
    """A withheld download its reading refused: nothing was sent; `reason` says why, `rule`
    which rule (`install-scripts`, `license`; None: the release signals, whose check
    remembers it)."""

    def __init__(self, reason: str, rule: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rule = rule


class ContentsCheck(Protocol):
    """A reader of the bytes' contents that may refuse them once the last one is in (the
    release signals, `gate.verdicts.reading.ReleaseCheck`): fed through `scan` on the hashing lane;
    `refused` holds the reason once `verdict()` refused."""

    refused: str | None

    @property
    def scan(self) -> ScriptScan: ...

    @property
    def may_refuse(self) -> bool:
        """Whether `verdict()` may refuse the bytes (not in report mode): else no hold."""

    def begin(self) -> None: ...

    async def verdict(self) -> str | None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Reading:
    """What reads one download beside the relay: the hash (and scan) lane, how the
    install-scripts rule reads the scan's verdict (None: it does not), the contents check
    riding on it, and (rule, reason) once the reading refused the bytes."""

    hasher: RelayHasher
    scripts: ScriptsRead | None
    release: ContentsCheck | None = None
    refusal: tuple[str | None, str] | None = None
    license: LicenseCheck | None = None

    @property
    def may_refuse(self) -> bool:
        """Whether the verdict may refuse the bytes (not only report on them)."""
        return (self.release is not None and self.release.may_refuse) or (
            self.scripts is not None and not self.scripts.report) or (
            self.license is not None and not self.license.report)

    async def feed(self, chunk: bytes) -> None:
        await self.hasher.feed(chunk)

    def close(self) -> None:
        self.hasher.close()
        if self.release is not None:
            self.release.close()


class Relay:
    """The relays of one process: its spools, the downloads being opened, and what reading
    tarballs taught it (a version whose bytes run scripts; bytes already read clean)."""

    def __init__(self, spools: Spools, metrics: Metrics,
                 floor: Callable[[web.Request], SendFloor],
                 findings: ScanFindings | None = None) -> None:
        self.spools = spools
        self.metrics = metrics
        self.floor = floor
        self._opening: dict[Hashable, asyncio.Future[Spool | None]] = {}
        self._fills: set[asyncio.Task[None]] = set()
        # versions whose tarball was found to run code at install (`npm.tarscripts`) or to
        # declare another license than its manifest: the gate's (`gate.admission`), whose
        # answer to the next request is a 403 saying why; bounded here, where they are written
        self.findings = findings if findings is not None else ScanFindings()
        # (version, the digest its bytes were verified against) whose tarball was read and
        # runs nothing at install: the same bytes are not inflated again (a bomb's CPU is
        # spent once per version, not once per download)
        self._scanned_clean: OrderedDict[tuple[str, str], None] = OrderedDict()
        # the same for bytes whose scripts report mode said once: not read again in report
        # mode (read again in enforce mode, which refuses them)
        self._scanned_reported: OrderedDict[tuple[str, str], None] = OrderedDict()
        # bytes whose license was read and agreed: not read again for it; and bytes whose
        # difference report mode said once: not read again in report mode (read again in
        # enforce mode, which refuses them)
        self._license_agreed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._license_reported: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def relay(self, request: web.Request, opener: Opener, *, key: Hashable, source: str,
                    name: PackageName, version: str, verifier: StreamVerifier | None,
                    scan: ScriptsRead | None, slot: Slot, deadline: asyncio.Timeout,
                    release: Callable[[], ContentsCheck] | None = None,
                    license: LicenseCheck | None = None,
                    ) -> tuple[web.StreamResponse, Verified | None] | None:
        """The bytes `opener` opens, relayed to this request: None when the upstream has no
        such tarball (nothing sent). `key` names the bytes (the same key, the same spool);
        `verifier` checks them against the admitted digest; `scan`, whether the install-scripts
        rule reads them. Returns the response and, when the body was verified and reached
        the client whole, what matched. `release` makes the contents check of a download this
        request starts (a request reading another's spool shares that one's); `license`, how
        the license rule reads them. Raises what `opener` raises (`UpstreamError`)."""
        label = f"{name.full}@{version}"
        if request.method != "HEAD":
            spool = self.spools.find(key)
            opening = self._opening.get(key) if spool is None else None
            if opening is not None:
                # another request is opening these bytes right now: its spool, or its miss
                spool = await asyncio.shield(opening)
            if spool is not None:
                slot.release()  # this request does no upstream work
                return await self._read(request, spool, deadline, label, source)
        opened: asyncio.Future[Spool | None] = asyncio.get_running_loop().create_future()
        if request.method != "HEAD":
            self._opening[key] = opened
        try:
            async with AsyncExitStack() as stack:
                body = await stack.enter_async_context(opener())
                if body is None:
                    return None
                spool = (self.spools.make(key, body.size)
                         if request.method != "HEAD" and body.size is not None else None)
                opened.set_result(spool)
                if spool is None:
                    reader = self._reader(verifier, scan, name, version, release, license)
                    return await self._stream(request, body.size, body.chunks, deadline,
                                              reader, source=source, name=name,
                                              version=version)
                reading = self._reader(verifier, scan, name, version, release, license)
                spool.withheld = (reading is not None and reading.may_refuse
                                  and spool.size <= HOLD_AT_MOST)
                # the download outlives this request's interest in it: it owns the upstream
                # answer and the slot from here on, and gives both back when the body is read
                owned = stack.pop_all()
            task = asyncio.get_running_loop().create_task(self._fill(
                spool, body.chunks, owned, slot.hand_over(), reading, source=source, name=name,
                version=version))
            self._fills.add(task)
            task.add_done_callback(self._fills.discard)
        finally:
            if not opened.done():
                opened.set_result(None)
            if self._opening.get(key) is opened:
                del self._opening[key]
        return await self._read(request, spool, deadline, label, source)

    def _reader(self, verifier: StreamVerifier | None, scan: ScriptsRead | None,
                name: PackageName, version: str,
                release: Callable[[], ContentsCheck] | None = None,
                license: LicenseCheck | None = None) -> _Reading | None:
        """Hashing and scanning beside the loop when a second CPU is there, so neither sha512
        nor inflating a tarball (a compression bomb's gigabyte) runs on the relay's core. The
        scan (and the license's reading) is skipped for bytes read clean before (or, in report
        mode, reported before): they are verified against the same digest, so bytes that
        differ are cut anyway."""
        read = (f"{name.full}@{version}", verifier.expected.sri()) if verifier else None
        clean = read is not None and (read in self._scanned_clean or (
            scan is not None and scan.report and read in self._scanned_reported))
        scripts = scan if not clean else None
        agreed = read is not None and (read in self._license_agreed or (
            license is not None and license.report and read in self._license_reported))
        licensed = license if not agreed else None
        if release is not None:
            # one scan of the bytes serves every reader: the release signals' reading walks
            # the same tar and sees the same package.json files
            check = release()
            check.begin()
            return _Reading(RelayHasher(verifier, check.scan), scripts, check, license=licensed)
        reading = ScriptScan() if scripts is not None or licensed is not None else None
        if verifier is None and reading is None:
            return None
        return _Reading(RelayHasher(verifier, reading), scripts, license=licensed)

    # -- the shared download ---------------------------------------------------------------

    async def _fill(self, spool: Spool, chunks: AsyncIterator[bytes], owned: AsyncExitStack,
                    release: Callable[[], None], reader: _Reading | None, *, source: str,
                    name: PackageName, version: str) -> None:
        """Read the upstream body into `spool`, then give the upstream answer and the slot
        back. Never raises: every ending is the spool's outcome."""
        try:
            async with owned:
                outcome = await self._download(spool, chunks, reader, source=source,
                                               name=name, version=version)
        except Exception as error:  # a bug, or the upstream answer failing to close
            log.error("tarball_spool_failed", package=name.full, version=version,
                      detail=f"{type(error).__name__}: {error}")
            outcome = "aborted"
        except asyncio.CancelledError:
            outcome = "aborted"
            raise
        finally:
            release()
            if reader is not None:
                reader.close()
            if spool.outcome is SpoolOutcome.FILLING:
                if outcome == "complete":
                    spool.complete()
                else:
                    spool.fail(outcome)
            self.spools.settled(spool)

    async def _download(self, spool: Spool, chunks: AsyncIterator[bytes],
                        reader: _Reading | None, *, source: str, name: PackageName,
                        version: str) -> str:
        try:
            async for chunk in chunks:
                if reader is not None:
                    await reader.feed(chunk)
                try:
                    spool.append(chunk, hold_last=reader is not None)
                except OSError as error:  # the spool's file: a full or read-only disk
                    self.spools.unusable(error)
                    return "aborted"
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            log.warning("tarball_stream_failed", upstream=source, package=name.full,
                        version=version, sent=spool.filled, detail=type(error).__name__)
            return "aborted"
        if spool.filled != spool.size:
            log.warning("tarball_stream_failed", upstream=source, package=name.full,
                        version=version, sent=spool.filled,
                        detail=f"the body ended at {spool.filled} of {spool.size} bytes")
            return "aborted"
        verdict, verified = await self._verdict(reader, source=source, name=name,
                                                version=version, sent=spool.safe,
                                                withheld=spool.filled - spool.safe)
        if verdict is not None:
            if reader is not None:
                spool.refusal = reader.refusal
            return verdict
        spool.verified = verified
        return "complete"

    async def _verdict(self, reader: _Reading | None, *, source: str, name: PackageName,
                       version: str, sent: int, withheld: int,
                       ) -> tuple[str | None, Verified | None]:
        """Every byte read: (None, what matched) when the bytes may leave whole, else (why
        they may not: `tampered`, `denied`; None), counted, logged and remembered once per
        download."""
        if reader is None:
            return None, None
        label = f"{name.full}@{version}"
        try:
            verified = await reader.hasher.finish()
        except DigestMismatch as mismatch:
            self.metrics.tampered.inc()
            self.metrics.events.tampered(label, f"the {source} tarball did not match the "
                                         "admitted digest; the client's download was cut")
            log.critical("tarball_digest_mismatch", security=True, upstream=source,
                         package=name.full, version=version,
                         expected=mismatch.expected.sri(), actual=mismatch.actual.sri(),
                         algorithm=mismatch.expected.algorithm, sent=sent, withheld=withheld)
            self.metrics.events.alert(Alert(
                "tampered", label,
                f"the {source} upstream's tarball for {label} did not match the "
                f"{mismatch.expected.algorithm} digest it was admitted with; the client's "
                "download was cut and nothing was mirrored", name.full, version,
                {"where": "proxy", "upstream": source, "algorithm":
                 mismatch.expected.algorithm, "expected": mismatch.expected.sri(),
                 "actual": mismatch.actual.sri()}))
            return "tampered", None
        rule = reader.scripts
        scan = reader.hasher.scan if rule is not None else None
        found = scan.finish() if scan is not None else None
        if rule is not None and found is not None:
            # what npm reads from the registry's manifest is not confusion: said as such
            reason = scan_finding(found, rule.manifest())
            if not rule.report:
                self._scripts_refused(reader, label, reason, source, sent)
                return "denied", None
            # report mode reaches the bytes as it reaches the manifest: served, and said
            self._would_deny(label, reason, source)
            if verified is not None:
                remember(self._scanned_reported, (label, verified.digest.sri()), None)
        elif scan is not None and verified is not None:
            remember(self._scanned_clean, (label, verified.digest.sri()), None)
        if reader.license is not None and self._license_refused(reader, label, source, sent,
                                                                verified):
            return "denied", None
        if reader.release is not None:
            try:
                refused = await reader.release.verdict()
            except Exception as error:  # a bug: never a silent pass, the download is cut
                log.error("release_check_failed", package=name.full, version=version,
                          detail=f"{type(error).__name__}: {error}")
                return "aborted", None
            if refused is not None:
                # a release signal in force: cut like bytes that run hidden scripts; the
                # check remembered why, so the next request is a 403 with the evidence
                reader.refusal = (None, refused)
                return "denied", None
        return None, verified

    def _scripts_refused(self, reader: _Reading, label: str, reason: str, source: str,
                         sent: int) -> None:
        """Manifest confusion (the manifest the install-scripts rule admitted shows no
        scripts, the tarball's own package.json, which yarn 1 runs, has some), or bytes that
        cannot be shown to run nothing: refused like tampered bytes (the held chunk never
        leaves, so no client can install them), remembered so the next request is a 403."""
        package, _, version = label.rpartition("@")
        self.metrics.rule_denials.labels(INSTALL_SCRIPTS, "enforce").inc()
        self.metrics.events.record("denied", label, f"the download was refused: {reason}")
        log.warning("tarball_scripts_refused", security=True, upstream=source,
                    package=package, version=version, rule=INSTALL_SCRIPTS, reason=reason,
                    sent=sent)
        self.metrics.events.alert(Alert(
            INSTALL_SCRIPTS, label,
            f"the tarball of {label} runs code at install ({reason}); the download was "
            "refused", package, version,
            {"where": "proxy", "upstream": source, "rule": INSTALL_SCRIPTS, "reason": reason}))
        remember(self.findings.scripts, label, reason)
        reader.refusal = (INSTALL_SCRIPTS, reason)

    def _license_refused(self, reader: _Reading, label: str, source: str, sent: int,
                         verified: Verified | None) -> bool:
        """The license rule's reading of the tarball's own package.json: True when it refuses
        the bytes (a license other than the manifest's, or none it can read), remembered so
        the next request is a 403; in report mode said, and the bytes served."""
        check, scan = reader.license, reader.hasher.scan
        assert check is not None
        if scan is None:
            return False
        scan.finish()
        reason = check.finding(scan.manifest, scan.problem)
        read = (label, verified.digest.sri()) if verified is not None else None
        if reason is None:
            if read is not None:
                remember(self._license_agreed, read, None)
            return False
        if check.report:
            self._would_deny(label, reason, source, LICENSE)
            if read is not None:
                remember(self._license_reported, read, None)
            return False
        package, _, version = label.rpartition("@")
        self.metrics.rule_denials.labels(LICENSE, "enforce").inc()
        self.metrics.events.record("denied", label, f"the download was refused: {reason}")
        log.warning("tarball_license_refused", upstream=source, package=package,
                    version=version, rule=LICENSE, reason=reason, sent=sent)
        remember(self.findings.licenses, label, reason)
        reader.refusal = (LICENSE, reason)
        return True

    def _would_deny(self, label: str, reason: str, source: str,
                    rule: str = INSTALL_SCRIPTS) -> None:
        """What a rule reading the bytes in report mode would have refused, as the packument
        rules say it (`gate.packuments.fill`): a line, the metric under `mode="report"`, the
        status page."""
        package, _, version = label.rpartition("@")
        self.metrics.rule_denials.labels(rule, "report").inc()
        self.metrics.events.record("would-deny", label, f"{rule}: {reason}")
        log.info("version_would_deny", package=package, version=version, rule=rule,
                 reason=reason, upstream=source, where="tarball")

    async def _read(self, request: web.Request, spool: Spool, deadline: asyncio.Timeout,
                    label: str, source: str) -> tuple[web.StreamResponse, Verified | None]:
        """One reader of a spool, from its first byte to its last, at the client's pace."""
        self.spools.join(spool)
        if spool.withheld:
            # nothing leaves before the verdict, not even the status line (`HOLD_AT_MOST`)
            try:
                while not spool.done:
                    await spool.changed()
            except BaseException:
                self.spools.leave(spool)
                raise
            if spool.failure == "denied" and spool.refusal is not None:
                self.spools.leave(spool)
                rule, reason = spool.refusal
                raise Withheld(reason, rule)
        response = web.StreamResponse(headers={"Content-Type": OCTETS})
        response.content_length = spool.size
        floor = self.floor(request)
        try:
            await response.prepare(request)
            # the request timeout stops at the first byte; the download's own bounds the rest
            deadline.reschedule(None)
            sent = 0
            while True:
                try:
                    chunk = spool.read(sent, CHUNK)
                except OSError as error:  # the spool's file could not be read back
                    log.warning("tarball_spool_unreadable", package=label.rpartition("@")[0],
                                detail=error.strerror or type(error).__name__, sent=sent)
                    return _cut(request, response, "aborted"), None
                if chunk:
                    if not await _write(response, floor, chunk, label, sent):
                        return response, None
                    sent += len(chunk)
                    continue
                if spool.outcome is SpoolOutcome.FAILED:
                    return _cut(request, response, spool.failure), None
                if spool.outcome is SpoolOutcome.COMPLETE and sent == spool.filled:
                    break
                await spool.changed()
            await response.write_eof()
        finally:
            floor.stop()
            self.spools.leave(spool)
        package, _, version = label.rpartition("@")
        log.info("tarball_served", upstream=source, package=package, version=version,
                 bytes=sent, head=False, spooled=True)
        return response, spool.verified

    # -- one request's own download ----------------------------------------------------------

    async def _stream(self, request: web.Request, size: int | None,
                      chunks: AsyncIterator[bytes], deadline: asyncio.Timeout,
                      reader: _Reading | None, *, source: str, name: PackageName,
                      version: str) -> tuple[web.StreamResponse, Verified | None]:
        """Relay `chunks` as they arrive (constant memory), the last chunk held back until the
        verdict. An upstream that breaks mid-body, or bytes that are refused, close the
        connection (`_cut`); a client that stops reading is cut by the listener's bounds,
        and the write here then fails as a disconnect."""
        response = web.StreamResponse(headers={"Content-Type": OCTETS})
        if size is not None:
            response.content_length = size
        await response.prepare(request)
        deadline.reschedule(None)
        label = f"{name.full}@{version}"
        if request.method == "HEAD":
            log.info("tarball_served", upstream=source, package=name.full, version=version,
                     bytes=0, head=True)
            return response, None
        floor = self.floor(request)
        try:
            sent = 0
            held: bytes | None = None
            async for read in _guarded(chunks, source, name, version):
                if read is None:
                    return _cut(request, response, "aborted"), None
                chunk: bytes | None = read
                if reader is not None:
                    await reader.feed(read)
                    # Holding one chunk back means the digest (and the scan) is known before
                    # the final bytes leave; it costs no copy and delays only the last 64 KiB.
                    chunk, held = held, read
                if chunk is None:
                    continue
                if not await _write(response, floor, chunk, label, sent):
                    return response, None
                sent += len(chunk)
            verdict, verified = await self._verdict(reader, source=source, name=name,
                                                    version=version, sent=sent,
                                                    withheld=len(held or b""))
            if verdict is not None:
                return _cut(request, response, verdict), None
            if held is not None:
                if not await _write(response, floor, held, label, sent):
                    return response, None
                sent += len(held)
            await response.write_eof()
        finally:
            floor.stop()
            if reader is not None:
                reader.close()
        log.info("tarball_served", upstream=source, package=name.full, version=version,
                 bytes=sent, head=False)
        return response, verified

    async def close(self) -> None:
        """At application cleanup, once the drain is over: stop the downloads still running
        (their readers were cut at the drain timeout), then drop every spool."""
        for task in list(self._fills):
            task.cancel()
        if self._fills:
            await asyncio.gather(*list(self._fills), return_exceptions=True)
        self.spools.close()


async def _guarded(chunks: AsyncIterator[bytes], source: str, name: PackageName,
                   version: str) -> AsyncIterator[bytes | None]:
    """The chunks, then None in place of an upstream failure (logged)."""
    sent = 0
    try:
        async for chunk in chunks:
            sent += len(chunk)
            yield chunk
    except (aiohttp.ClientError, TimeoutError, OSError) as error:
        log.warning("tarball_stream_failed", upstream=source, package=name.full,
                    version=version, sent=sent, detail=type(error).__name__)
        yield None


async def _write(response: web.StreamResponse, floor: SendFloor, chunk: bytes, label: str,
                 sent: int) -> bool:
    """Send one chunk; False (logged, outcome set) when the client has gone."""
    try:
        await floor.write(response, chunk)
    except (ConnectionError, aiohttp.ClientConnectionResetError):
        package, _, version = label.rpartition("@")
        log.info("tarball_client_gone", package=package, version=version, sent=sent,
                 min_rate=floor.cut)
        response[OUTCOME] = "client_gone"
        return False
    return True


def _cut(request: web.Request, response: web.StreamResponse,
         outcome: str) -> web.StreamResponse:
    """Close the connection mid-body: the client sees a failed transfer, never a short 200."""
    if request.transport is not None:
        request.transport.close()
    response[OUTCOME] = outcome
    return response


def remember(memory: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > MEMORY:
        memory.popitem(last=False)

