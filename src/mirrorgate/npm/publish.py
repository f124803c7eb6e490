"""The npm publish document: what `PUT /<name>` sends to put one version into a registry.

The worker mirrors a version by publishing it the way the npm client does, so any npm registry
(Verdaccio, Artifactory, Nexus, CodeArtifact...) can be the mirror target. Decisions:

- The version manifest is the one admitted, whole (dependencies, bin, engines, scripts...),
  `readme` aside (already gone from the job). `name`, `version` and `_id` are set from the job,
  never taken from the manifest.
- `dist` is rebuilt to describe the bytes sent: sha512 `integrity`, sha1 `shasum` (computed
  from those bytes, see `integrity.dist_digests`) and `tarball`, the target's own URL for the file;
  of the admitted `dist`, `fileCount`, `unpackedSize` and `attestations` are kept, and
  `signatures` when the integrity they sign (`name@version:integrity`) is the one rebuilt from
  the exact bytes: they then still verify against the public registry's keys, which mirrorgate
  serves at `/npm/-/npm/v1/keys`, so `npm audit signatures` through mirrorgate passes for a
  mirrored version and the provenance rule keeps its history. The legacy PGP `npm-signature` is
  dropped.
- `_attachments` carries the exact bytes in base64 with their length. The body is streamed
  (`PublishBody`): the JSON around the attachment is rendered once, and the base64 is encoded
  chunk by chunk as the request is sent, so publishing a tarball holds the tarball once, not
  the tarball, its base64 and a JSON copy of both (about 3.7 times its size).
- `dist-tags` never moves an existing `latest` backwards: the new version becomes `latest` only
  when the target has none, or when it is a release above the current one; otherwise it is
  tagged `mirrorgate` (npm registries, Verdaccio included, merge the tags a publish carries, and
  a publish without any tag leaves some registries without a way to name the version).
- Every "already exists" answer registries give is recognised in one place
  (`says_already_exists`): 409 always, 400 or 403 when the body says so.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import nodesemver
import orjson

from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.versions import is_prerelease

__all__ = [
    "NON_LATEST_TAG",
    "PublishBody",
    "choose_dist_tags",
    "publish_document",
    "says_already_exists",
    "version_manifest",
]

NON_LATEST_TAG = "mirrorgate"
"""The tag a mirrored version gets when it must not become `latest`."""

_KEPT_DIST = ("fileCount", "unpackedSize", "attestations")
_SIGNED_DIST = ("signatures",)
"""Kept only when the admitted integrity equals the rebuilt one (what they were made over)."""
_ALREADY_EXISTS = (
    "already exist",            # Artifactory, GitLab, many others
    "already present",          # Verdaccio: "this package is already present"
    "publish over",             # npm: "cannot publish over the previously published versions"
    "pre-existing version",     # npm: "cannot modify pre-existing version"
    "does not allow updating",  # Nexus: "Repository does not allow updating assets"
)


def says_already_exists(status: int, body: bytes) -> bool:
    """A registry's refusal to publish because the version is already there."""
    if status == 409:
        return True
    if status not in (400, 403):
        return False
    text = body[:4096].decode("utf-8", errors="replace").lower()
    return any(phrase in text for phrase in _ALREADY_EXISTS)


def _newer(version: str, current: str) -> bool:
    try:
        return bool(nodesemver.gt(version, current, loose=True))
    except (ValueError, TypeError):
        return False


def _parses(version: str) -> bool:
    try:
        nodesemver.make_semver(version, loose=True)
    except (ValueError, TypeError):
        return False
    return True


def choose_dist_tags(version: str, current_tags: Mapping[str, Any] | None) -> dict[str, str]:
    """The tags to publish `version` with, given the target's current `dist-tags`."""
    latest = (current_tags or {}).get("latest")
    if not isinstance(latest, str) or not latest:
        return {"latest": version}
    if latest == version:
        return {"latest": version}
    if _parses(version) and not is_prerelease(version) and _newer(version, latest):
        return {"latest": version}
    return {NON_LATEST_TAG: version}


def version_manifest(name: PackageName, version: str, admitted: Mapping[str, Any],
                     integrity: str, shasum: str, tarball_url: str,
                     published: str | None = None) -> dict[str, Any]:
    """The admitted manifest with `dist` rebuilt for the target, the identity fields set, and
    the mirror mark (`mirrormark`): a copy of a public version, published then, these bytes.
    The registry stamps its own publish moment into `time`; the mark keeps the public one."""
    manifest = {key: value for key, value in with_mark(
        admitted, MirrorMark(published, integrity)).items() if key != "readme"}
    old_dist = admitted.get("dist")
    dist: dict[str, Any] = {}
    if isinstance(old_dist, Mapping):
        dist.update((key, old_dist[key]) for key in _KEPT_DIST if key in old_dist)
        if old_dist.get("integrity") == integrity:
            dist.update((key, old_dist[key]) for key in _SIGNED_DIST if key in old_dist)
    dist.update(integrity=integrity, shasum=shasum, tarball=tarball_url)
    manifest.update(name=name.full, version=version, _id=f"{name.full}@{version}", dist=dist)
    return manifest


_PLACEHOLDER = "\u0000mirrorgate-attachment\u0000"
_RAW_CHUNK = 3 * 64 * 1024  # a multiple of 3, so each chunk's base64 has no padding inside


@dataclass(frozen=True, slots=True)
class PublishBody:
    """The JSON body of `PUT /<name>`, sent as `head`, the tarball in base64, `tail`."""

    head: bytes
    tarball: bytes
    tail: bytes

    @property
    def size(self) -> int:
        return len(self.head) + 4 * ((len(self.tarball) + 2) // 3) + len(self.tail)

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.head
        view = memoryview(self.tarball)
        for start in range(0, len(view), _RAW_CHUNK):
            yield base64.b64encode(view[start:start + _RAW_CHUNK])
        yield self.tail

    def render(self) -> bytes:
        """The whole body at once (for tests and small documents)."""
        return self.head + base64.b64encode(self.tarball) + self.tail


def publish_document(name: PackageName, version: str, manifest: Mapping[str, Any],
                     filename: str, tarball: bytes, dist_tags: Mapping[str, str]) -> PublishBody:
    """The body of `PUT /<name>`: everything but the attachment's data rendered now."""
    document: dict[str, Any] = {
        "_id": name.full,
        "name": name.full,
        "dist-tags": dict(dist_tags),
        "versions": {version: manifest},
        "_attachments": {
            filename: {
                "content_type": "application/octet-stream",
                "data": _PLACEHOLDER,
                "length": len(tarball),
            }
        },
    }
    description = manifest.get("description")
    if isinstance(description, str):
        document["description"] = description
    rendered = orjson.dumps(document)
    marker = orjson.dumps(_PLACEHOLDER)[1:-1]
    head, found, tail = rendered.partition(marker)
    if not found:
        raise ValueError("the publish document lost its attachment placeholder")
    return PublishBody(head, tarball, tail)
