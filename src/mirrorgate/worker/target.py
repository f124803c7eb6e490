"""The mirror target: where the worker puts verified tarballs, over the private registry seam.

The worker asks the target three things, the same way whatever registry it is: is the name
first-party there, does it already hold this version with these bytes (a metadata read and a
read-back, so a job whose work is done costs no download), and store these verified bytes.
The first two are answered from one read of the name's packument (`Held`).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from mirrorgate.integrity import (
    Agreement,
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
from mirrorgate.npm.publish import NON_LATEST_TAG, choose_dist_tags, version_manifest
from mirrorgate.offload import in_thread_if_large
from mirrorgate.upstream.client import Upstream, UpstreamError
from mirrorgate.upstream.registry import (
    PrivateRegistry,
    RegistryError,
    TargetConflict,
    called,
    open_registry,
)

__all__ = ["Held", "MirrorTarget", "PublishResult", "open_target", "publish_digests"]

READ_BACK_LIMIT = 256 * 1024 * 1024
"""The largest stored tarball read back when no MIRRORGATE_MAX_TARBALL_BYTES is given."""

_T = TypeVar("_T")


class PublishResult(enum.StrEnum):
    PUBLISHED = "published"
    ALREADY_PRESENT = "already_present"


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
        raise RegistryError("invalid-name", f"{job.name!r}: {error}", transient=False) from None


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


@dataclass(frozen=True, slots=True)
class Held:
    """What the target holds of a job's name, read once per job (`MirrorTarget.held`): its
    full packument, the form that keeps the mirror marks."""

    document: Mapping[str, Any] | None

    @property
    def first_party(self) -> bool:
        """The target holds a version of the name mirrorgate did not mirror (no mirror mark):
        the organisation's own name, never published into."""
        return bool(first_party_versions(self.document))

    def stored(self, version: str) -> Mapping[str, Any] | None:
        """The version's manifest as the target lists it (with its `dist`), or None."""
        versions = self.document.get("versions") if self.document is not None else None
        manifest = versions.get(version) if isinstance(versions, Mapping) else None
        return manifest if isinstance(manifest, Mapping) else None


class MirrorTarget:
    """The registry the worker publishes into (`MIRRORGATE_MIRROR_TARGET`, by default the
    private upstream), whichever implementation of the seam it is. Every method raises
    `RegistryError` (or `TargetConflict`) naming why, and whether a retry may succeed."""

    def __init__(self, registry: PrivateRegistry, *,
                 max_tarball_bytes: int = READ_BACK_LIMIT) -> None:
        self.registry = registry.for_worker()
        self.label = registry.label
        self.max_tarball_bytes = max_tarball_bytes

    async def _read(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except UpstreamError as error:
            raise RegistryError("target-failed" if error.transient else "target-unreadable",
                                str(error), transient=error.transient) from None

    async def held(self, job: MirrorJob) -> Held:
        """The target's packument of the job's name, read once for `first_party` and
        `holds` (a job used to read it twice, and the version's manifest besides)."""
        return Held(await self._read(self.registry.packument(_name(job))))

    async def holds(self, job: MirrorJob, held: Held | None = None) -> bool:
        """True when the target lists the version with the job's integrity and serves those
        bytes; raises TargetConflict when it holds other ones. `held`: the name's packument
        the job read already; else the version is asked for alone."""
        name = _name(job)
        stored = (held.stored(job.version) if held is not None
                  else await self._read(self.registry.stored(name, job.version)))
        return (stored is not None and _confirm(self.label, job, stored.get("dist") or {})
                and await self._bytes_agree(name, job))

    async def _bytes_agree(self, name: PackageName, job: MirrorJob) -> bool:
        """Read the stored tarball back (the bytes as stored, whatever coding the registry
        answers in) and hash it against the job's strongest digest: a registry's `dist` is
        not proof of its bytes (Verdaccio stores whatever integrity it is given). False when
        the registry lists the version but has no tarball for it; raises TargetConflict when
        the bytes are others."""
        verifier = StreamVerifier(job.artifact.digests, expected_size=None,
                                  limit=self.max_tarball_bytes)
        try:
            async with self.registry.tarball(name, tarball_filename(name, job.version)) as body:
                if body is None:
                    return False
                async for chunk in body.chunks:
                    verifier.update(chunk)
            verifier.finish()
        except UpstreamError as error:
            raise RegistryError("target-failed" if error.transient else "target-unreadable",
                                str(error), transient=error.transient) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise RegistryError("target-failed", f"{called(self.label)} broke off the "
                                f"read-back ({type(error).__name__})", transient=True) from None
        except DigestMismatch as mismatch:
            raise TargetConflict(self.label, mismatch.expected, mismatch.actual) from None
        except TooLarge as error:
            raise RegistryError("target-unreadable", f"{called(self.label)}'s stored tarball "
                                f"is over {error.limit} bytes", transient=False) from None
        return True

    async def publish(self, job: MirrorJob, tarball: bytes,
                      digests: TarballDigests | None = None, *,
                      unnamed: int | None = None) -> PublishResult:
        """Store the bytes, never ones not shown to match: without the worker's `digests`
        they are verified here (`publish_digests`). `unnamed`: the descriptor of an unnamed
        file holding these very bytes, which a file store may link in instead of writing
        them (`PrivateRegistry.put`)."""
        name = _name(job)
        digests = await publish_digests(job, tarball, digests)
        tags = await self._tags(name, job)
        filename = tarball_filename(name, job.version)
        manifest = version_manifest(name, job.version, job.manifest, digests.integrity,
                                    digests.shasum, self.registry.tarball_url(name, filename),
                                    job.published)
        if await self.registry.put(name, job.version, filename, manifest, tarball, tags,
                                   unnamed=unnamed):
            return PublishResult.PUBLISHED
        return await self._already_there(name, job)

    async def _tags(self, name: PackageName, job: MirrorJob) -> dict[str, str]:
        """The dist-tags to publish with. A registry that keeps tags is asked for them just
        before the put, not at the job's start: a download later, another worker may have
        moved `latest`, and a stale read could move it backwards. The file store keeps none
        (its `latest` is its highest version): nothing to read."""
        if not self.registry.keeps_tags:
            return choose_dist_tags(job.version, None)
        try:
            current = await self._read(self.registry.packument(name, abbreviated=True))
        except RegistryError as error:
            if error.transient:
                raise
            # the tags cannot be read: publish under the non-latest tag, never move `latest`
            return {NON_LATEST_TAG: job.version}
        known = current.get("dist-tags") if current is not None else None
        return choose_dist_tags(job.version, known if isinstance(known, Mapping) else None)

    async def _already_there(self, name: PackageName, job: MirrorJob) -> PublishResult:
        stored = await self._read(self.registry.stored(name, job.version))
        if stored is None:
            # e.g. a registry that answers before its index shows the version: look again later
            raise RegistryError("target-unconfirmed", f"{called(self.label)} says the version "
                                "exists but does not list it", transient=True)
        if _confirm(self.label, job, stored.get("dist") or {}):
            if not await self._bytes_agree(name, job):
                raise RegistryError("target-unconfirmed", f"{called(self.label)} lists the "
                                    "version but serves no tarball for it", transient=True)
            return PublishResult.ALREADY_PRESENT
        raise RegistryError("target-integrity-unknown", f"{called(self.label)} holds the "
                            "version without a digest as strong as the job's to compare",
                            transient=False)


def open_target(url: str, upstream: Upstream | None, *,
                max_tarball_bytes: int = READ_BACK_LIMIT) -> MirrorTarget:
    """The target a configured URL names (`upstream.registry.open_registry`)."""
    return MirrorTarget(open_registry(url, upstream), max_tarball_bytes=max_tarball_bytes)
