"""The npm publish document: what `PUT /<name>` sends to put one version into a registry.

The worker mirrors a version by publishing it the way the npm client does, so any npm registry
(Verdaccio, Artifactory, Nexus, CodeArtifact...) can be the mirror target.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pybase64

from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.versions import is_prerelease, newer

__all__ = [
    "NON_LATEST_TAG",
    "PublishBody",
    "choose_dist_tags",
    "publish_document",
    "reason_given",
    "says_already_exists",
    "version_manifest",
]

NON_LATEST_TAG = "mirrorgate"
"""The tag a mirrored version gets when it must not become `latest`."""

# Of the admitted `dist` these survive the rebuild; the legacy PGP `npm-signature` is dropped.
_KEPT_DIST = ("fileCount", "unpackedSize", "attestations")
_SIGNED_DIST = ("signatures",)
"""Kept only when the admitted integrity equals the rebuilt one (they sign
`name@version:integrity`): they then still verify against the public registry's keys, which
mirrorgate serves at `/npm/-/npm/v1/keys`, so `npm audit signatures` passes for a mirrored
version and the provenance rule keeps its history."""
_ALREADY_EXISTS = (
    "already exist",            # Artifactory, GitLab, many others
    "already present",          # Verdaccio: "this package is already present"
    "publish over",             # npm: "cannot publish over the previously published versions"
    "pre-existing version",     # npm: "cannot modify pre-existing version"
    "does not allow updating",  # Nexus: "Repository does not allow updating assets"
)


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def reason_given(body: bytes, limit: int = 300) -> str:
    """The reason a registry gave for refusing a write, as one line of text: its JSON `error`
    (or `message`, `reason`), else the title of an HTML error page (a gateway's 502 page),
    else its text with any markup dropped. Never HTML: it goes into a JSON `error` a client
    prints."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    text = None
    if isinstance(document, dict):
        text = next((document[key] for key in ("error", "message", "reason")
                     if isinstance(document.get(key), str)), None)
    if text is None:
        title = _TITLE.search(body[:64 * 1024])
        raw = title.group(1) if title is not None else body[:4096]
        text = _TAG.sub(" ", raw.decode("utf-8", "replace"))
    line = " ".join(text.split())
    return (line[:limit - 3] + "..." if len(line) > limit else line) or "no reason given"


def says_already_exists(status: int, body: bytes) -> bool:
    """A registry's refusal to publish because the version is already there: 409 always, 400
    or 403 when the body says so. Every registry's wording is recognised here, nowhere else."""
    if status == 409:
        return True
    if status not in (400, 403):
        return False
    text = body[:4096].decode("utf-8", errors="replace").lower()
    return any(phrase in text for phrase in _ALREADY_EXISTS)


def choose_dist_tags(version: str, current_tags: Mapping[str, Any] | None) -> dict[str, str]:
    """The tags to publish `version` with, given the target's current `dist-tags`.

    An existing `latest` never moves backwards: the version becomes `latest` only when the
    target has none or it is a release above the current one; otherwise it is tagged
    NON_LATEST_TAG (registries merge the tags a publish carries, and a publish with no tag
    leaves some of them no way to name the version)."""
    latest = (current_tags or {}).get("latest")
    if not isinstance(latest, str) or not latest:
        return {"latest": version}
    if latest == version:
        return {"latest": version}
    if not is_prerelease(version) and newer(version, latest):
        return {"latest": version}
    return {NON_LATEST_TAG: version}


def version_manifest(name: PackageName, version: str, admitted: Mapping[str, Any],
                     integrity: str, shasum: str, tarball_url: str,
                     published: str | None = None) -> dict[str, Any]:
    """The admitted manifest with `dist` rebuilt for the target, the identity fields set, and
    the mirror mark (`mirrormark`): a copy of a public version, published then, these bytes.
    The registry stamps its own publish moment into `time`; the mark keeps the public one.

    The manifest is kept whole (dependencies, bin, engines, scripts...) but for `readme`;
    `name`, `version` and `_id` come from the job, never from the manifest. `dist` describes
    the bytes sent: `integrity` (sha512) and `shasum` (sha1) computed from them (see
    `integrity.dist_digests`), and `tarball`, the target's own URL for the file."""
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
    """The JSON body of `PUT /<name>`, sent as `head`, the tarball in base64, `tail`.

    The JSON around `_attachments` is rendered once and the base64 encoded chunk by chunk as
    the request is sent, so a publish holds the tarball once, not the tarball, its base64 and a
    JSON copy of both (about 3.7 times its size). Encoded by pybase64's SIMD coder: the
    standard library's costs 1.4 to 2.0 ms of CPU a MB, more than hashing the tarball."""

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
            yield pybase64.b64encode(view[start:start + _RAW_CHUNK])
        yield self.tail

    def render(self) -> bytes:
        """The whole body at once (for tests and small documents)."""
        return self.head + pybase64.b64encode(self.tarball) + self.tail


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
