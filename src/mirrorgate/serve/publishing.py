"""Writes through the proxy: `npm publish`, `unpublish`, `deprecate` and `dist-tag`, forwarded to
the private upstream with mirrorgate's own credential, for clients whose tokens-file line says
`publish`, and only for names `[publish].names` covers and the public registry does not have
(unless first-party already, or in `[private] merge_public`): no shadowing in either direction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import structlog
from aiohttp import web

from mirrorgate.access.tokens import Client
from mirrorgate.config import ServeSettings
from mirrorgate.events import Alert
from mirrorgate.gate.kept.facts import UnrecordedError
from mirrorgate.gate.kept.firstparty import FirstPartyNames
from mirrorgate.gate.refusals import upstream_failed
from mirrorgate.logs import MASK
from mirrorgate.metrics import Metrics
from mirrorgate.npm.changes import changed_packument
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.ownership import first_party_versions
from mirrorgate.npm.paths import WriteTarget
from mirrorgate.npm.publish import reason_given, says_already_exists
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.npm.upload import (
    FORGED_MARK,
    Published,
    UploadError,
    UploadScan,
    checked_publish,
)
from mirrorgate.npm.versions import same_version
from mirrorgate.rules import LiveRules, Rules, live
from mirrorgate.serve.access import CLIENT
from mirrorgate.serve.refusals import Refused, json_response
from mirrorgate.upstream.client import BodyStopped, Upstream, UpstreamError
from mirrorgate.upstream.registry import PrivateRegistry, TarballSink

__all__ = ["PublishRoute"]

log = structlog.get_logger("mirrorgate.serve")

CHUNK = 64 * 1024
_SMALL_BODY = 4096
"""Bytes a dist-tag body may hold (a JSON string naming a version)."""


@dataclass(frozen=True, slots=True)
class _Write:
    """One authorised write: who, to what."""

    client: Client
    target: WriteTarget

    @property
    def name(self) -> PackageName:
        return self.target.name


class _ClientBody:
    """The client's body forwarded as it arrives (`registry.Upload`): `head` (already read and
    scanned), then the rest, each chunk scanned, the last one sent only once `check` has
    passed. A failed check raises `BodyStopped`, so the registry never sees the body's end.
    The tarball the scan decodes is read as it comes (`contents`: its own package.json, where
    its entries land), off the event loop, for `check` to hold against the document."""

    def __init__(self, head: bytes, rest: AsyncIterator[bytes], scan: UploadScan,
                 check: Callable[[ScriptScan], Published], size: int | None) -> None:
        self._head = head
        self._rest = rest
        self._scan = scan
        self._check = check
        self.size = size
        self.checked: Published | None = None
        self.contents = ScriptScan()

    async def chunks(self, tarball: TarballSink | None = None) -> AsyncIterator[bytes]:
        held = self._head
        try:
            await self._decoded(tarball)
            async for chunk in self._rest:
                self._scan.feed(chunk)
                await self._decoded(tarball)
                yield held
                held = chunk
            self.checked = self._check(self.contents)
        except UploadError as error:
            raise BodyStopped(_bad_document(error)) from None
        except Refused as refused:
            raise BodyStopped(refused) from None
        yield held

    async def _decoded(self, tarball: TarballSink | None) -> None:
        # the tarball decoded so far goes to a registry that stores it itself, else nowhere
        decoded = self._scan.drain_tarball()
        if decoded:
            await asyncio.to_thread(self.contents.feed, decoded)  # inflating: never on the loop
        if tarball is not None and decoded:
            await tarball(decoded)

    def published(self) -> tuple[str, dict[str, Any]]:
        if self.checked is None:
            raise UploadError("the publish document was not read to its end")
        version = self.checked.version
        manifest: dict[str, Any] = self._scan.finish().document["versions"][version]
        return version, manifest


def _versions(document: dict[str, Any] | None) -> frozenset[str]:
    versions = document.get("versions") if document is not None else None
    return frozenset(versions) if isinstance(versions, dict) else frozenset()


def _exists(name: PackageName, version: str) -> Refused:
    # for a merge_public name, a public version counts: the private copy would shadow it
    return Refused(409, f"{name.full}@{version} is already published; a version is published "
                   "once (bump the version)", reason="version exists", package=name.full,
                   version=version)


def _bad_document(error: UploadError) -> Refused:
    return Refused(400, f"mirrorgate refused the publish document: {error}",
                   reason="bad publish document")


class PublishRoute:
    """The write routes under `/npm/` and `GET ?write=true`, sharing the checks."""

    def __init__(self, *, settings: ServeSettings, rules: Rules | LiveRules,
                 private: PrivateRegistry, public: Upstream, first_party: FirstPartyNames,
                 forget: Callable[[PackageName], None], metrics: Metrics) -> None:
        self.settings = settings
        self._rules = live(rules)
        self.private = private
        self.public = public
        self.first_party = first_party
        self.forget = forget
        self.metrics = metrics

    @property
    def rules(self) -> Rules:
        return self._rules.current

    # --- who and what ----------------------------------------------------------------------

    def _client(self, request: web.Request, name: PackageName) -> Client:
        client: Client | None = request.get(CLIENT)
        if client is None:
            raise Refused(403, "publishing through mirrorgate needs client tokens: the operator "
                          "sets MIRRORGATE_CLIENT_TOKENS_FILE and gives the publishing client's "
                          "line a `publish:NAMES` grant", reason="no client tokens")
        if not client.publish:
            raise Refused(403, f"the client {client.name} may not publish: its line in the "
                          "tokens file grants no `publish:NAMES` (ask the operator)",
                          reason="not a publisher", package=name.full)
        if not self.rules.publishable.covers_name(name.full):
            raise Refused(403, f"{name.full} may not be published through mirrorgate: "
                          "[publish] names in the rules file does not cover it",
                          reason="not a publishable name", package=name.full)
        if not client.may_write(name.full):
            # a team's token writes the team's names only: one leaked CI token must not reach
            # every package `[publish] names` covers
            raise Refused(403, f"the client {client.name} may not write {name.full}: its line "
                          f"in the tokens file grants publish:{','.join(client.publish.texts())}"
                          " (ask the operator to add the name)", reason="not its name",
                          package=name.full)
        return client

    def _takes_changes(self, name: PackageName) -> None:
        """Refuse a change (deprecate, unpublish, dist-tag) the private registry cannot take."""
        if not self.private.takes_changes:
            raise Refused(501, "mirrorgate's private upstream is its embedded file store, which "
                          "takes publishes but no deprecate, unpublish or dist-tag; set "
                          "MIRRORGATE_PRIVATE_UPSTREAM to the organisation's registry for those",
                          reason="file store takes publishes only", package=name.full)

    async def _private_document(self, name: PackageName) -> dict[str, Any] | None:
        try:
            return await self.private.packument(name)
        except UpstreamError as error:
            raise Refused.of(upstream_failed(error, name)) from None

    async def _check_owner(self, name: PackageName,
                           private: dict[str, Any] | None) -> frozenset[str]:
        """Refuse a name the public registry has, unless it is first-party already (the
        rules own it, or the private side holds a version mirrorgate did not mirror) or
        merge_public names it; for a merge_public name, the public versions a publish must
        not shadow. Fails closed: public unreachable is a 503, not a yes."""
        full = name.full
        merged = self.rules.merge_public.covers_name(full)
        if not merged and (self.rules.private_alone(full) or first_party_versions(private)):
            return frozenset()
        try:
            # a 200 that is not its packument (a rate limiter's `{}`) tells nothing: 503
            answer = self.public.packument_of(name, await self.public.get_json(
                name.url_path()))
        except UpstreamError as error:
            raise Refused(503, f"mirrorgate cannot tell whether {full} exists on the public "
                          f"registry ({error}), so it does not publish it; try again",
                          reason="public upstream unavailable", package=full,
                          headers={"Retry-After": "30"}) from None
        if answer.status == 200 and not merged:
            raise Refused(403, f"{full} exists on the public registry and is not first-party: "
                          "publishing it here would shadow the public package; list it in "
                          "[private] merge_public if the organisation means to",
                          reason="exists publicly", package=full)
        return _versions(answer.document)

    # --- dispatch --------------------------------------------------------------------------

    async def write(self, request: web.Request, target: WriteTarget) -> web.StreamResponse:
        operation = self._operation(request, target)
        try:
            client = self._client(request, target.name)
            return await self._write(request, _Write(client, target))
        except Refused as refused:
            self._refused(request, target.name, operation, refused)
            raise

    def _refused(self, request: web.Request, name: PackageName, operation: str,
                 refused: Refused) -> None:
        """The log line and the count of a refused write (every refusal, whoever asked)."""
        who: Client | None = request.get(CLIENT)
        outcome = "upstream_refused" if refused.reason == "upstream refused" else "refused"
        self.metrics.publishes.labels(who.name if who else "", operation, outcome).inc()
        log.info("publish_refused", client=who.name if who else None, package=name.full,
                 operation=operation, status=refused.status, reason=refused.reason,
                 version=refused.fields.get("version"))

    @staticmethod
    def _operation(request: web.Request, target: WriteTarget) -> str:
        if target.route == "dist-tag":
            return "dist-tag-add" if request.method == "PUT" else "dist-tag-rm"
        return target.route

    async def _write(self, request: web.Request, write: _Write) -> web.StreamResponse:
        # `parse_write_target` gave each route its method: publish and change are PUTs,
        # unpublish and remove-tarball DELETEs, dist-tag either
        name, route = write.name, write.target.route
        if route != "publish":
            self._takes_changes(name)
        declared = self._declared(request) if route == "publish" else None  # before any read
        private = await self._private_document(name)
        public_versions = await self._check_owner(name, private)
        if route == "publish":
            taken = _versions(private) | public_versions
            return await self._put_package(request, write, private, taken, declared)
        if route == "change":
            return await self._change(request, write, private)
        if route == "dist-tag":
            return await self._dist_tag(request, write, private)
        return await self._delete(write, private)

    # --- publish ---------------------------------------------------------------------------

    def _declared(self, request: web.Request) -> int | None:
        declared = request.content_length
        if declared is not None and declared > self.settings.max_publish_bytes:
            raise self._too_large(declared)
        return declared

    def _too_large(self, size: int) -> Refused:
        self.metrics.refusals.labels("publish_too_large").inc()
        return Refused(413, f"the publish body is {size} bytes or more; mirrorgate takes at "
                       f"most {self.settings.max_publish_bytes} "
                       "(MIRRORGATE_MAX_PUBLISH_BYTES)", reason="too large")

    async def _body(self, request: web.Request) -> AsyncIterator[bytes]:
        """The client's body, chunk by chunk, refused (413) the moment it crosses the bound;
        a client that stops sending for MIRRORGATE_REQUEST_TIMEOUT is cut off (408)."""
        seen, limit = 0, self.settings.max_publish_bytes
        stall = self.settings.request_timeout
        while True:
            try:
                async with asyncio.timeout(stall):
                    chunk = await request.content.read(CHUNK)
            except TimeoutError:
                raise Refused(408, f"the client sent nothing for {stall:g} s "
                              "(MIRRORGATE_REQUEST_TIMEOUT)", reason="body stalled") from None
            if not chunk:
                return
            seen += len(chunk)
            if seen > limit:
                raise self._too_large(seen)
            yield chunk

    async def _put_package(self, request: web.Request, write: _Write,
                           private: dict[str, Any] | None, taken: frozenset[str],
                           declared: int | None) -> web.StreamResponse:
        """PUT /name: a publish (the body carries a tarball) or npm deprecate's change.

        A publish is streamed: the body goes to the private upstream as it arrives, scanned on
        the way (`npm.upload`), its last chunk held back until every check has passed. A failed
        check abandons the upstream request mid-body (`BodyStopped`), so the registry never
        receives a complete document and the body is never held twice.
        MIRRORGATE_MAX_PUBLISH_BYTES is enforced on the declared length before reading and on
        the bytes while reading.
        """
        scan = UploadScan(max_skeleton=self.settings.max_metadata_bytes, keep_tarball=True)
        chunks = self._body(request)
        head = bytearray()
        async for chunk in chunks:
            self._feed(scan, chunk)
            head += chunk
            if scan.attachment_seen:
                break
        if not scan.attachment_seen:
            self._takes_changes(write.name)
            # the whole body is read and holds no tarball: npm deprecate's edited packument
            # (what `_attachments` it has is dropped: the change is rebuilt from the private
            # side's own packument)
            try:
                document = scan.finish().document
            except UploadError as error:
                raise _bad_document(error) from None
            return await self._forward_change(write, private, document, write.name.url_path())
        return await self._publish(write, taken, _PendingBody(bytes(head), chunks, declared),
                                   scan)

    @staticmethod
    def _feed(scan: UploadScan, chunk: bytes) -> None:
        try:
            scan.feed(chunk)
        except UploadError as error:
            raise _bad_document(error) from None

    def _new_version(self, write: _Write, taken: frozenset[str], scan: UploadScan,
                     contents: ScriptScan) -> Published:
        """The checked publish (its document, then its tarball against it), refused (409)
        when its version exists already."""
        name = write.name
        try:
            published = checked_publish(name, scan.finish(), contents)
        except UploadError as error:
            if error.reason == FORGED_MARK:
                # a build claiming to be a mirrored public copy: it would turn the
                # organisation's name into one public versions merge into
                label = f"{name.full}@{error.version}"
                self.metrics.events.alert(Alert(
                    "forged-mark", label, f"the client {write.client.name} tried to publish "
                    f"{label} carrying the mirror mark mirrorgate writes on versions it "
                    "mirrored from public; the publish was refused", name.full, error.version,
                    {"client": write.client.name}))
            raise
        # semver equality, not string equality: `1.1.0+shadow` is public's `1.1.0`
        if any(same_version(published.version, version) for version in taken):
            raise _exists(name, published.version)
        return published

    async def _publish(self, write: _Write, taken: frozenset[str], pending: _PendingBody,
                       scan: UploadScan) -> web.StreamResponse:
        name = write.name
        body = _ClientBody(pending.head, pending.rest, scan,
                           lambda contents: self._new_version(write, taken, scan, contents),
                           pending.size)
        try:
            answer = await self.private.upload(name, body)
        except UpstreamError as error:
            raise Refused.of(upstream_failed(error, name)) from None
        version = body.checked.version if body.checked is not None else None
        self._upstream_refusal(answer.status, answer.body, write, version)
        self._published(write, version, scan)
        return self._answer(answer.status, answer.body)

    def _published(self, write: _Write, version: str | None, scan: UploadScan) -> None:
        name = write.name
        self._changed(name)
        self._count(write.client, "publish", "published")
        self.metrics.events.record("published", f"{name.full}@{version}",
                                   f"by {write.client.who}")
        log.info("package_published", client=write.client.name, package=name.full,
                 version=version, bytes=scan.attachment_bytes)

    # --- changes, deletions, tags ----------------------------------------------------------

    async def _read_json(self, request: web.Request, limit: int) -> Any:
        if request.content_length is not None and request.content_length > limit:
            raise Refused(413, f"the body is larger than {limit} bytes", reason="too large")
        data = bytearray()
        async for chunk in self._body(request):
            data += chunk
            if len(data) > limit:
                raise Refused(413, f"the body is larger than {limit} bytes", reason="too large")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise Refused(400, "the body is not JSON", reason="bad body") from None

    async def _change(self, request: web.Request, write: _Write,
                      private: dict[str, Any] | None) -> web.StreamResponse:
        """PUT /name/-rev/R: npm unpublish's (or deprecate's) edited packument, rebuilt from the
        private packument (`npm.changes`), never forwarded as sent."""
        document = await self._read_json(request, self.settings.max_metadata_bytes)
        if not isinstance(document, dict):
            raise Refused(400, "the change is not a packument (a JSON object)", reason="bad body")
        path = f"{write.name.url_path()}/-rev/{quote(write.target.revision, safe='')}"
        return await self._forward_change(write, private, document, path)

    @staticmethod
    def _stored(name: PackageName, private: dict[str, Any] | None) -> dict[str, Any]:
        """The private packument a change works on; 404 when there is none."""
        if private is None:
            raise Refused(404, f"{name.full} is not on the private upstream", reason="not found",
                          package=name.full)
        return private

    async def _forward_change(self, write: _Write, private: dict[str, Any] | None,
                              document: dict[str, Any], path: str) -> web.StreamResponse:
        current = self._stored(write.name, private)
        try:
            changed = changed_packument(current, document)
        except UploadError as error:
            raise Refused(400, f"mirrorgate refused the change: {error}",
                          reason="bad change") from None
        removed = sorted(set(current.get("versions") or {}) - set(changed["versions"]))
        deprecated = sorted(version for version, manifest in changed["versions"].items()
                            if isinstance(manifest, dict) and manifest.get("deprecated"))
        response = await self._forward(write, "PUT", path, orjson.dumps(changed), "change")
        log.info("package_changed", client=write.client.name, package=write.name.full,
                 removed=removed, deprecated=deprecated)
        return response

    async def _delete(self, write: _Write, private: dict[str, Any] | None) -> web.StreamResponse:
        name, target = write.name, write.target
        self._stored(name, private)
        revision = quote(target.revision, safe="")
        if target.route == "unpublish":
            response = await self._forward(write, "DELETE", f"{name.url_path()}/-rev/{revision}",
                                           b"", "unpublish")
            # the whole package removed on purpose by a publisher: the one hand-over of a name
            # mirrorgate takes as meant. Otherwise a private 404 for a name remembered
            # first-party is an outage, never a reason to serve public (`gate.packuments.fill`).
            self.first_party.forget(name.full)
            log.info("package_unpublished", client=write.client.name, package=name.full)
            return response
        filename = quote(target.detail, safe="")
        response = await self._forward(write, "DELETE", f"{name.url_path()}/-/{filename}/-rev/"
                                       f"{revision}", b"", "remove-tarball")
        log.info("tarball_removed", client=write.client.name, package=name.full,
                 file=target.detail)
        return response

    async def _dist_tag(self, request: web.Request, write: _Write,
                        private: dict[str, Any] | None) -> web.StreamResponse:
        name, tag = write.name, write.target.detail
        path = f"-/package/{name.url_path()}/dist-tags/{quote(tag, safe='')}"
        versions = self._stored(name, private).get("versions")
        if request.method == "DELETE":
            response = await self._forward(write, "DELETE", path, b"", "dist-tag-rm")
            log.info("dist_tag_removed", client=write.client.name, package=name.full, tag=tag)
            return response
        version = await self._read_json(request, _SMALL_BODY)
        if not isinstance(version, str) or not isinstance(versions, dict) \
                or version not in versions:
            raise Refused(404, f"{name.full} has no version {str(version)[:100]!r} on the "
                          "private upstream to tag", reason="version not found",
                          package=name.full)
        response = await self._forward(write, "PUT", path, orjson.dumps(version), "dist-tag-add",
                                       version)
        log.info("dist_tag_added", client=write.client.name, package=name.full, tag=tag,
                 version=version)
        return response

    async def _forward(self, write: _Write, method: str, path: str, body: bytes,
                       operation: str, version: str | None = None) -> web.Response:
        """Send one change to the private upstream; its refusal is passed on (`Refused`)."""
        try:
            answer = await self.private.change(method, path, body)
        except UpstreamError as error:
            raise Refused.of(upstream_failed(error, write.name)) from None
        self._upstream_refusal(answer.status, answer.body, write, version)
        self._changed(write.name)
        self._count(write.client, operation, "changed")
        self.metrics.events.record("published", write.name.full,
                                   f"{operation} by {write.client.who}")
        return self._answer(answer.status, answer.body)

    # --- GET ?write=true -------------------------------------------------------------------

    async def write_packument(self, request: web.Request, name: PackageName,
                              base: str) -> web.Response:
        """The private packument as it is stored (`_rev` and all), which npm reads before a
        change; tarball URLs point at the proxy, where npm unpublish sends its DELETE."""
        try:
            return await self._write_packument(request, name, base)
        except Refused as refused:
            self._refused(request, name, "read-for-change", refused)
            raise

    async def _write_packument(self, request: web.Request, name: PackageName,
                               base: str) -> web.Response:
        self._client(request, name)
        self._takes_changes(name)
        private = self._stored(name, await self._private_document(name))
        await self._check_owner(name, private)
        private.pop("_attachments", None)  # npm's changes never need them
        versions = private.get("versions")
        if isinstance(versions, dict):
            for manifest in versions.values():
                dist = manifest.get("dist") if isinstance(manifest, dict) else None
                if isinstance(dist, dict) and isinstance(dist.get("tarball"), str):
                    filename = dist["tarball"].rsplit("/", 1)[-1]
                    dist["tarball"] = f"{base}npm/{name.tarball_path(filename)}"
        return json_response(200, private, {"Cache-Control": "no-store"})

    # --- outcomes --------------------------------------------------------------------------

    def _upstream_refusal(self, status: int, answer: bytes, write: _Write,
                          version: str | None) -> None:
        if 200 <= status < 300:
            return
        said = reason_given(answer, 500)
        # The registry's words go to the client: a gateway that quotes the request's headers
        # back would hand mirrorgate's own credential to whoever may publish. The log scrubber
        # never sees this text, so the secrets are masked here.
        for secret in self.settings.secrets:
            said = said.replace(secret.reveal(), MASK)
        if says_already_exists(status, answer):
            raise Refused(409, f"the private upstream already has {write.name.full}"
                          f"{'@' + version if version else ''}: {said}",
                          reason="upstream refused", upstream="private", upstream_status=status,
                          package=write.name.full, version=version)
        raise Refused(status if 400 <= status < 600 else 502,
                      f"the private upstream refused this write ({status}): {said}",
                      reason="upstream refused", upstream="private", upstream_status=status,
                      package=write.name.full, version=version)

    def _changed(self, name: PackageName) -> None:
        """A published or changed name is first-party at once, and its cached packument is
        dropped, so the next read is built from the private side alone."""
        # the write went through: with no room to keep the name for the store, its next fill
        # learns it from the private side (refused 503 until the store takes what waits)
        with contextlib.suppress(UnrecordedError):
            self.first_party.remember(name.full)
        self.forget(name)

    def _count(self, client: Client, operation: str, outcome: str) -> None:
        # the package and version go in the log line and the status page's events, never a
        # label: the series count stays bounded
        self.metrics.publishes.labels(client.name, operation, outcome).inc()

    @staticmethod
    def _answer(status: int, answer: bytes) -> web.Response:
        try:
            document = orjson.loads(answer) if answer else {}
        except orjson.JSONDecodeError:
            document = {}
        if not isinstance(document, dict):
            document = {}
        return json_response(status, document or {"ok": True})


@dataclass(frozen=True, slots=True)
class _PendingBody:
    head: bytes
    rest: AsyncIterator[bytes]
    size: int | None

