"""Mirror targets: where the worker puts verified tarballs, an npm registry or a directory.

The worker asks a target three things, the same way whatever it is: is the name first-party
there, does it already hold this version with this integrity (a metadata read, so a job whose
work is done costs no download), and store these verified bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import aiohttp

from mirrorgate.integrity import (
    Agreement,
    Digest,
    DigestMismatch,
    StreamVerifier,
    TarballDigests,
    TooLarge,
    agreement,
    dist_digests,
    strongest_of,
)
from mirrorgate.mirror import MirrorJob
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name, tarball_filename
from mirrorgate.npm.ownership import first_party_versions
from mirrorgate.npm.publish import (
    NON_LATEST_TAG,
    choose_dist_tags,
    publish_document,
    says_already_exists,
    version_manifest,
)
from mirrorgate.offload import in_thread_if_large
from mirrorgate.upstream.client import ABBREVIATED, WORKER, Upstream, UpstreamError
from mirrorgate.upstream.filestore import FileStore, StoreError
from mirrorgate.upstream.private import store_root

__all__ = [
    "MirrorTarget",
    "PublishResult",
    "RegistryTarget",
    "StoreTarget",
    "TargetConflict",
    "TargetError",
    "open_target",
    "publish_digests",
]

READ_BACK_LIMIT = 256 * 1024 * 1024
"""The largest stored tarball read back when no MIRRORGATE_MAX_TARBALL_BYTES is given."""

_T = TypeVar("_T")


class PublishResult(enum.StrEnum):
    PUBLISHED = "published"
    ALREADY_PRESENT = "already_present"


class TargetError(Exception):
    """The target did not take the version. `reason` is a stable label (a metric label and a
    log field); `transient` says whether trying again later may succeed (connection errors,
    timeouts, 5xx, 408, 429), so the worker never needs to know which kind of target it has."""

    def __init__(self, reason: str, detail: str, *, transient: bool) -> None:
        super().__init__(detail)
        self.reason = reason
        self.transient = transient


_CALLED = {"private": "the private upstream", "target": "the mirror target",
           "file-store": "the file store"}


def called(label: str) -> str:
    """What a message calls a target: "the private answered 500" named no setting to check."""
    return _CALLED.get(label, f"the {label}")


class TargetConflict(TargetError):  # noqa: N818 - a security outcome, named for what it is
    """The target already holds this version with other bytes than the ones admitted (the
    worker logs it as a security event and retires the job)."""

    def __init__(self, label: str, expected: Digest, stored: Digest | None) -> None:
        shown = stored.sri() if stored is not None else "(none)"
        super().__init__("target-conflict", f"{called(label)} already holds this version with "
                         f"{shown}, not {expected.sri()}", transient=False)
        self.expected = expected
        self.stored = stored


class MirrorTarget(Protocol):
    label: str

    async def holds(self, job: MirrorJob) -> bool:
        """True when the target lists the version with the job's integrity; raises
        TargetConflict when it lists it with another, TargetError when it cannot tell."""
        ...

    async def first_party(self, job: MirrorJob) -> bool:
        """True when the target holds a version of the job's package that mirrorgate did not
        mirror (no mirror mark): the organisation's own name, never published into."""
        ...

    async def publish(self, job: MirrorJob, tarball: bytes,
                      digests: TarballDigests | None = None) -> PublishResult:
        """Store the bytes; raises TargetConflict, or TargetError naming why not. A target never
        publishes bytes it was not shown to match: without the worker's `digests` it verifies
        them itself (`publish_digests`)."""
        ...


def _verify_whole(job: MirrorJob, tarball: bytes) -> TarballDigests:
    verifier = StreamVerifier(job.artifact.digests, expected_size=job.artifact.size,
                              limit=max(len(tarball), 1))
    verifier.update(tarball)
    return dist_digests(tarball, verifier.finish(), job.artifact.digests)


async def publish_digests(job: MirrorJob, tarball: bytes,
                          digests: TarballDigests | None) -> TarballDigests:
    """The digests to publish with: the worker's, or the bytes verified here and now (raises
    integrity.DigestMismatch or SizeMismatch when they are not the admitted bytes)."""
    if digests is not None:
        return digests
    return await in_thread_if_large(len(tarball), _verify_whole, job, tarball)


def _name(job: MirrorJob) -> PackageName:
    try:
        return parse_name(job.name)
    except InvalidNameError as error:
        raise TargetError("invalid-name", f"{job.name!r}: {error}", transient=False) from None


def _confirm(label: str, job: MirrorJob, stored_dist: Any) -> bool:
    """True when the stored `dist` has the job's integrity (`integrity.agreement`); raises
    TargetConflict when it has another. False when the digests cannot be compared (only weaker
    ones in common): never assumed equal, so the version is not "already there"."""
    verdict, stored = agreement(stored_dist if isinstance(stored_dist, Mapping) else None,
                                job.artifact.digests)
    if verdict is Agreement.SAME:
        return True
    if verdict is Agreement.DIFFERENT:
        raise TargetConflict(label, strongest_of(job.artifact.digests), stored)
    return False


def _listed_dist(document: Mapping[str, Any] | None, version: str) -> Any:
    """The `dist` of `version` in a packument, or None when the version is not listed."""
    if document is None:
        return None
    versions = document.get("versions")
    if not isinstance(versions, Mapping):
        return None
    manifest = versions.get(version)
    if not isinstance(manifest, Mapping):
        return None
    return manifest.get("dist") or {}


class RegistryTarget:
    """An npm registry over HTTP(S), written to with `PUT /<name>` like `npm publish` does."""

    def __init__(self, upstream: Upstream, *, max_tarball_bytes: int = READ_BACK_LIMIT) -> None:
        self.upstream = upstream
        self.label = upstream.label
        self.max_tarball_bytes = max_tarball_bytes

    async def _packument(self, name: PackageName,
                         accept: str = ABBREVIATED) -> dict[str, Any] | None:
        try:
            answer = await self.upstream.get_json(name.url_path(), accept=accept, pool=WORKER)
        except UpstreamError as error:
            raise TargetError("target-unreadable" if not error.transient else "target-failed",
                              str(error), transient=error.transient) from None
        return answer.document if answer.status == 200 else None

    async def holds(self, job: MirrorJob) -> bool:
        name = _name(job)
        stored = _listed_dist(await self._packument(name), job.version)
        return (stored is not None and _confirm(self.label, job, stored)
                and await self._bytes_agree(name, job))

    async def _bytes_agree(self, name: PackageName, job: MirrorJob) -> bool:
        """Read the stored tarball back (the bytes as stored, whatever coding the registry
        answers in) and hash it against the job's strongest digest: a registry's `dist` is
        not proof of its bytes (Verdaccio stores whatever integrity it is given). False when
        the registry lists the version but has no tarball for it; raises TargetConflict when
        the bytes are others."""
        url = self.upstream.url(name.tarball_path(tarball_filename(name, job.version)))
        verifier = StreamVerifier(job.artifact.digests, expected_size=None,
                                  limit=self.max_tarball_bytes)
        try:
            async with self.upstream.stream(url, pool=WORKER) as download:
                if download is None:
                    return False
                async for chunk in download.chunks:
                    verifier.update(chunk)
            verifier.finish()
        except UpstreamError as error:
            raise TargetError("target-failed" if error.transient else "target-unreadable",
                              str(error), transient=error.transient) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise TargetError("target-failed", f"{called(self.label)} broke off the read-back "
                              f"({type(error).__name__})", transient=True) from None
        except DigestMismatch as mismatch:
            raise TargetConflict(self.label, mismatch.expected, mismatch.actual) from None
        except TooLarge as error:
            raise TargetError("target-unreadable", f"{called(self.label)}'s stored tarball is "
                              f"over {error.limit} bytes", transient=False) from None
        return True

    async def first_party(self, job: MirrorJob) -> bool:
        # the full form: the abbreviated one drops the mirror mark
        return bool(first_party_versions(await self._packument(_name(job), "application/json")))

    async def publish(self, job: MirrorJob, tarball: bytes,
                      digests: TarballDigests | None = None) -> PublishResult:
        name = _name(job)
        digests = await publish_digests(job, tarball, digests)
        try:
            current = await self._packument(name)
        except TargetError as error:
            if error.transient:
                raise
            # the tags cannot be read: publish under the non-latest tag, never move `latest`
            tags = {NON_LATEST_TAG: job.version}
        else:
            known = current.get("dist-tags") if current is not None else None
            tags = choose_dist_tags(job.version, known if isinstance(known, Mapping) else None)
        filename = tarball_filename(name, job.version)
        manifest = version_manifest(name, job.version, job.manifest, digests.integrity,
                                    digests.shasum,
                                    self.upstream.url(name.tarball_path(filename)),
                                    job.published)
        body = publish_document(name, job.version, manifest, filename, tarball, tags)
        try:
            status, answer = await self.upstream.send_json("PUT", name.url_path(), body,
                                                          pool=WORKER)
        except UpstreamError as error:
            raise TargetError("target-failed", str(error), transient=error.transient) from None
        if 200 <= status < 300:
            return PublishResult.PUBLISHED
        if says_already_exists(status, answer):
            return await self._already_there(name, job)
        said = " ".join(answer[:300].decode("utf-8", errors="replace").split())[:200]
        if status >= 500 or status in (408, 429):
            raise TargetError("target-failed", f"{called(self.label)} answered {status}: {said}",
                              transient=True)
        # 401/403 is the credential, not the job: say which setting (seen by hand: a wrong
        # token read "the private refused the publish with 401", naming nothing to fix; a
        # JWT that expired after Verdaccio's expiresIn retires every job the same way)
        hint = ("; check MIRRORGATE_PRIVATE_TOKEN: missing, expired, or without publish "
                "rights on that registry" if status in (401, 403) else "")
        raise TargetError("target-refused", f"{called(self.label)} refused the publish "
                          f"with {status}: {said}{hint}", transient=False)

    async def _already_there(self, name: PackageName, job: MirrorJob) -> PublishResult:
        stored = _listed_dist(await self._packument(name), job.version)
        if stored is None:
            # e.g. a registry that answers before its index shows the version: look again later
            raise TargetError("target-unconfirmed", f"{called(self.label)} says the version exists "
                              "but does not list it", transient=True)
        if _confirm(self.label, job, stored):
            if not await self._bytes_agree(name, job):
                raise TargetError("target-unconfirmed", f"{called(self.label)} lists the version "
                                  "but serves no tarball for it", transient=True)
            return PublishResult.ALREADY_PRESENT
        raise TargetError("target-integrity-unknown", f"{called(self.label)} holds the version "
                          "without a digest as strong as the job's to compare",
                          transient=False)


class StoreTarget:
    """The embedded directory store (`file:///path`)."""

    label = "file-store"

    def __init__(self, store: FileStore) -> None:
        self.store = store

    async def _stored(self, name: PackageName, version: str) -> dict[str, Any] | None:
        try:
            return await self.store.manifest(name, version)
        except StoreError as error:
            raise TargetError("target-refused", str(error), transient=False) from None

    async def holds(self, job: MirrorJob) -> bool:
        stored = await self._stored(_name(job), job.version)
        return stored is not None and _confirm(self.label, job, stored.get("dist") or {})

    async def first_party(self, job: MirrorJob) -> bool:
        try:
            document = await self.store.packument(_name(job))
        except StoreError as error:
            raise TargetError("target-refused", str(error), transient=False) from None
        return bool(first_party_versions(document))

    async def publish(self, job: MirrorJob, tarball: bytes,
                      digests: TarballDigests | None = None) -> PublishResult:
        name = _name(job)
        if await self._stored(name, job.version) is not None:  # also refuses a bad version
            return await self._already_there(name, job)
        filename = tarball_filename(name, job.version)
        try:
            self.store.tarball_path(name, filename)
        except StoreError as error:
            raise TargetError("target-refused", str(error), transient=False) from None
        digests = await publish_digests(job, tarball, digests)
        manifest = version_manifest(name, job.version, job.manifest, digests.integrity,
                                    digests.shasum, filename, job.published)
        try:
            written = await self.store.put(name, job.version, filename, manifest, tarball)
        except StoreError as error:
            raise TargetError("target-failed", str(error), transient=True) from None
        if written:
            return PublishResult.PUBLISHED
        return await self._already_there(name, job)  # written by someone else meanwhile

    async def _already_there(self, name: PackageName, job: MirrorJob) -> PublishResult:
        stored = await self._stored(name, job.version)
        if stored is None:
            raise TargetError("target-unconfirmed", "the file store says the version exists "
                              "but cannot read it back", transient=True)
        if _confirm(self.label, job, stored.get("dist") or {}):
            return PublishResult.ALREADY_PRESENT
        raise TargetError("target-integrity-unknown", "the file store holds the version "
                          "without a digest as strong as the job's to compare", transient=False)


def open_target(url: str, upstream: Upstream | None, *,
                max_tarball_bytes: int = READ_BACK_LIMIT) -> MirrorTarget:
    """The target a configured URL names: `file:///path` the embedded `FileStore` (the
    directory the serve path reads as its private upstream), `http(s)://` an npm registry
    through the process's `Upstream` for it, which adds the bearer token and refuses to leave
    its origin."""
    if url.startswith("file://"):
        return StoreTarget(FileStore(store_root(url)))
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the mirror target {url!r} is neither file:// nor http(s)://")
    if upstream is None:
        raise ValueError(f"the mirror target {url} is a registry; it needs an Upstream client")
    return RegistryTarget(upstream, max_tarball_bytes=max_tarball_bytes)
