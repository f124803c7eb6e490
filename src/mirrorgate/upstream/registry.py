"""The private registry seam: the organisation's registry over HTTP, or the embedded file store.

Everything that reads or writes the private side goes through `PrivateRegistry`, one interface
with two implementations: the serve path reads packuments and tarballs and forwards a client's
publish, the worker asks what is stored and publishes what it verified, the commands audit the
bytes. What the file store cannot do (npm's changes: deprecate, unpublish, dist-tag) is a field
that says so, `takes_changes`, never a check of which implementation is at hand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.integrity import Digest
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.publish import publish_document, reason_given, says_already_exists
from mirrorgate.upstream.client import (
    ABBREVIATED,
    FILLS,
    TARBALLS,
    WORKER,
    BodyStopped,
    Pool,
    StreamedBody,
    Upstream,
    UpstreamError,
)
from mirrorgate.upstream.filestore import FileStore, StoreError

__all__ = [
    "HttpRegistry",
    "PrivateRegistry",
    "RegistryError",
    "StoreRegistry",
    "TarballBody",
    "TarballSink",
    "TargetConflict",
    "Upload",
    "WriteAnswer",
    "open_registry",
    "store_root",
]

FULL = "application/json"


class RegistryError(MirrorgateError):
    """The registry did not take a write. `reason` is a stable label (a metric label and a log
    field); `transient` says whether trying again later may succeed (connection errors,
    timeouts, 5xx, 408, 429), so no caller needs to know which registry it has."""

    def __init__(self, reason: str, detail: str, *, transient: bool) -> None:
        super().__init__(detail)
        self.reason = reason
        self.transient = transient


class TargetConflict(RegistryError):  # noqa: N818 - a security outcome, named for what it is
    """The registry already holds this version with other bytes than the ones admitted (the
    worker logs it as a security event and retires the job)."""

    def __init__(self, label: str, expected: Digest, stored: Digest | None) -> None:
        shown = stored.sri() if stored is not None else "(none)"
        super().__init__("target-conflict", f"{called(label)} already holds this version with "
                         f"{shown}, not {expected.sri()}", transient=False)
        self.expected = expected
        self.stored = stored


@dataclass(frozen=True, slots=True)
class TarballBody:
    size: int | None
    chunks: AsyncIterator[bytes]


@dataclass(frozen=True, slots=True)
class WriteAnswer:
    """A registry's answer to a write a client asked for: its status and (a bounded part of)
    its body, passed on to the client by the caller."""

    status: int
    body: bytes


TarballSink = Callable[[bytes], Awaitable[None]]


class Upload(StreamedBody, Protocol):
    """A client's publish on its way: the body as it arrives, checked chunk by chunk (its
    last chunk only once every check has passed; a failed check raises `BodyStopped`), and,
    once the body has ended, the version and manifest it publishes."""

    def chunks(self, tarball: TarballSink | None = None) -> AsyncIterator[bytes]:
        """The raw body; the tarball decoded from it goes to `tarball` as it is decoded (for a
        registry that stores the bytes itself), or nowhere."""
        ...

    def published(self) -> tuple[str, dict[str, Any]]: ...


AbstractTarball = AbstractAsyncContextManager[TarballBody | None]


class PrivateRegistry(Protocol):
    """Reads answer None for what is not there and raise `UpstreamError` for a failure (the
    serve path then falls back to public: a private registry that is down must not stop
    builds); the worker's writes raise `RegistryError`."""

    label: str
    takes_changes: bool
    """npm's deprecate, unpublish and dist-tag go through (the file store takes publishes only:
    its versions have no revisions or tags of their own)."""
    keeps_tags: bool
    """A publish's dist-tags are kept (the file store's `latest` is its highest version, and
    `put` ignores the tags: the worker reads none for it)."""

    def for_worker(self) -> PrivateRegistry:
        """The same registry as the worker uses it (its own connection pool)."""
        ...

    async def packument(self, name: PackageName, *,
                        abbreviated: bool = False) -> dict[str, Any] | None: ...

    async def stored(self, name: PackageName, version: str) -> Mapping[str, Any] | None:
        """The version's manifest as the registry lists it (with its `dist`), or None."""
        ...

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball: ...

    def tarball_url(self, name: PackageName, filename: str) -> str:
        """What a manifest published here names as its `dist.tarball`."""
        ...

    async def put(self, name: PackageName, version: str, filename: str,
                  manifest: dict[str, Any], tarball: bytes, tags: Mapping[str, str], *,
                  unnamed: int | None = None) -> bool:
        """Publish one version the worker verified: True when written, False when the registry
        already holds that version (nothing is overwritten). Raises RegistryError. `unnamed`:
        the descriptor of an unnamed file holding exactly `tarball` (the handoff's), which a
        store on its filesystem links in as the stored tarball: the bytes written once."""
        ...

    async def upload(self, name: PackageName, body: Upload) -> WriteAnswer:
        """Forward a client's publish; raises UpstreamError when the registry cannot be
        reached, and what the body's checks raise."""
        ...

    async def change(self, method: str, path: str, body: bytes) -> WriteAnswer:
        """One of npm's changes, sent as the client's npm would (only when `takes_changes`)."""
        ...


def _versions(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    versions = document.get("versions") if document is not None else None
    return versions if isinstance(versions, Mapping) else {}


class HttpRegistry:
    """An npm registry (Verdaccio, Artifactory, Nexus, CodeArtifact...) through the process's
    `Upstream` client for it, which adds mirrorgate's token and never leaves its origin."""

    takes_changes = True
    keeps_tags = True

    def __init__(self, upstream: Upstream, *, reads: Pool = FILLS,
                 downloads: Pool = TARBALLS) -> None:
        self.upstream = upstream
        self.label = upstream.label
        self._reads = reads
        self._downloads = downloads

    def for_worker(self) -> HttpRegistry:
        # the worker reads on its own pool: its reads never queue behind clients' fills
        return HttpRegistry(self.upstream, reads=WORKER, downloads=WORKER)

    async def packument(self, name: PackageName, *,
                        abbreviated: bool = False) -> dict[str, Any] | None:
        # the full form by default: the abbreviated one drops the mirror mark, and without it
        # every mirrored version would read as first-party
        answer = await self.upstream.get_json(name.url_path(), pool=self._reads,
                                              accept=ABBREVIATED if abbreviated else FULL)
        return answer.document if answer.status == 200 else None

    async def stored(self, name: PackageName, version: str) -> Mapping[str, Any] | None:
        manifest = _versions(await self.packument(name, abbreviated=True)).get(version)
        return manifest if isinstance(manifest, Mapping) else None

    def tarball_url(self, name: PackageName, filename: str) -> str:
        # the npm-standard path (`name/-/file.tgz`), which Verdaccio, Artifactory, Nexus and
        # CodeArtifact all serve: a private hit costs one request and no packument read
        return self.upstream.url(name.tarball_path(filename))

    @asynccontextmanager
    async def _tarball(self, name: PackageName,
                       filename: str) -> AsyncIterator[TarballBody | None]:
        url = self.tarball_url(name, filename)
        async with self.upstream.stream(url, pool=self._downloads) as answer:
            yield None if answer is None else TarballBody(answer.size, answer.chunks)

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball:
        return self._tarball(name, filename)

    async def put(self, name: PackageName, version: str, filename: str,
                  manifest: dict[str, Any], tarball: bytes, tags: Mapping[str, str], *,
                  unnamed: int | None = None) -> bool:
        body = publish_document(name, version, manifest, filename, tarball, tags)
        try:
            status, answer = await self.upstream.send_json("PUT", name.url_path(), body,
                                                          pool=WORKER)
        except UpstreamError as error:
            raise RegistryError("target-failed", str(error), transient=error.transient) from None
        if 200 <= status < 300:
            return True
        if says_already_exists(status, answer):
            return False
        said = reason_given(answer, 200)
        what = called(self.label)
        if status >= 500 or status in (408, 429):
            raise RegistryError("target-failed", f"{what} answered {status}: {said}",
                                transient=True)
        # 401/403 is the credential, not the job: say which setting to check
        hint = ("; check MIRRORGATE_PRIVATE_TOKEN: missing, expired, or without publish "
                "rights on that registry" if status in (401, 403) else "")
        raise RegistryError("target-refused", f"{what} refused the publish with {status}: "
                            f"{said}{hint}", transient=False)

    async def upload(self, name: PackageName, body: Upload) -> WriteAnswer:
        status, answer = await self.upstream.send_json("PUT", name.url_path(), body,
                                                      pool=TARBALLS)
        return WriteAnswer(status, answer)

    async def change(self, method: str, path: str, body: bytes) -> WriteAnswer:
        status, answer = await self.upstream.send_json(method, path, body, pool=TARBALLS)
        return WriteAnswer(status, answer)


class StoreRegistry:
    """The embedded directory store (`file:///path`): a private registry in a folder, so a
    fresh machine proxies, gates and mirrors with no other server."""

    label = "file-store"
    takes_changes = False
    keeps_tags = False

    def __init__(self, store: FileStore) -> None:
        self.store = store

    def for_worker(self) -> StoreRegistry:
        return self

    @staticmethod
    def _failed(error: OSError | StoreError) -> UpstreamError:
        return UpstreamError("private", "unreachable", str(error))

    async def packument(self, name: PackageName, *,
                        abbreviated: bool = False) -> dict[str, Any] | None:
        try:
            return await self.store.packument(name)
        except (StoreError, OSError) as error:
            raise self._failed(error) from None

    async def stored(self, name: PackageName, version: str) -> Mapping[str, Any] | None:
        try:
            return await self.store.manifest(name, version)
        except StoreError:
            return None  # a version the store cannot hold is not in it

    def tarball_url(self, name: PackageName, filename: str) -> str:
        return filename  # the serve path rewrites it; the store serves it by name

    @asynccontextmanager
    async def _tarball(self, name: PackageName,
                       filename: str) -> AsyncIterator[TarballBody | None]:
        try:
            stored = await self.store.open_tarball(name, filename)
        except StoreError:
            stored = None
        if stored is None:
            yield None
            return
        try:
            yield TarballBody(stored.size, stored.chunks())
        finally:
            stored.close()  # read to its end or not

    def tarball(self, name: PackageName, filename: str) -> AbstractTarball:
        return self._tarball(name, filename)

    async def put(self, name: PackageName, version: str, filename: str,
                  manifest: dict[str, Any], tarball: bytes, tags: Mapping[str, str], *,
                  unnamed: int | None = None) -> bool:
        # the store keeps no tags: `latest` is its highest version
        try:
            self.store.check(name, version, filename)
        except StoreError as error:
            raise RegistryError("target-refused", str(error), transient=False) from None
        try:
            return await self.store.put(name, version, filename, manifest, tarball,
                                        unnamed=unnamed)
        except StoreError as error:
            raise RegistryError("target-failed", str(error), transient=True) from None

    async def upload(self, name: PackageName, body: Upload) -> WriteAnswer:
        """The tarball is written into the store as it is decoded, and lands (with its
        manifest) only once every check has passed."""
        try:
            async with self.store.incoming(name) as received:
                async for _chunk in body.chunks(received.write):
                    pass
                version, manifest = body.published()
                stored = await self.store.commit(name, version, f"{name.bare}-{version}.tgz",
                                                 manifest, received)
        except BodyStopped as stopped:  # a check refused the body, as `send_json` re-raises it
            raise stopped.reason from None
        except (StoreError, OSError) as error:
            raise self._failed(error) from None
        if not stored:
            return WriteAnswer(409, orjson.dumps({"error": f"{name.full}@{version} is already "
                                                  "published; a version is published once "
                                                  "(bump the version)"}))
        return WriteAnswer(201, orjson.dumps({"ok": f"{name.full}@{version} published",
                                              "success": True}))

    async def change(self, method: str, path: str, body: bytes) -> WriteAnswer:
        raise RegistryError("unsupported", "the file store takes publishes only",
                            transient=False)


_CALLED = {"private": "the private upstream", "target": "the mirror target",
           "file-store": "the file store"}


def called(label: str) -> str:
    """What a message calls a registry, so that it names the setting to check."""
    return _CALLED.get(label, f"the {label}")


def store_root(url: str) -> Path:
    return Path(urlsplit(url).path)


def open_registry(url: str, upstream: Upstream | None) -> PrivateRegistry:
    """The registry a configured URL names: `file:///path` the embedded `FileStore`,
    `http(s)://` an npm registry through the process's `Upstream` for it."""
    if url.startswith("file://"):
        return StoreRegistry(FileStore(store_root(url)))
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the registry {url!r} is neither file:// nor http(s)://")
    if upstream is None:
        raise ValueError(f"the registry {url} needs an Upstream client")
    return HttpRegistry(upstream)
