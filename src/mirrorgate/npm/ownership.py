"""Which private versions mirrorgate mirrored, and so which names the organisation owns.

A name is first-party when the private upstream holds a version of it mirrorgate did not mirror
from public: it is served from the private side alone (dependency confusion is a public impostor
version merged into it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorgate.integrity import digests_from_dist, parse_integrity, strongest
from mirrorgate.npm.mirrormark import MirrorMark, read_mark

__all__ = ["first_party_versions", "mirrored_mark"]


def mirrored_mark(manifest: Mapping[str, Any]) -> MirrorMark | None:
    """The mark of a version the worker mirrored, or None for a first-party version.

    Recognised by the mark alone, checked against the version's own `dist`: the strongest
    digest the mark names must be one the stored `dist` carries. Comparing with public's bytes
    is deliberately not required: ownership must not change while the public upstream is down
    or answers something else, and an owned name is never asked of public at all. The check
    against `dist` stops a mark copied onto other bytes (a manifest reused for a first-party
    build) from making that build count as mirrored.
    """
    mark = read_mark(manifest)
    if mark is None:
        return None
    claimed = strongest(parse_integrity(mark.integrity))
    dist = manifest.get("dist")
    if claimed is None or not isinstance(dist, Mapping):
        return None
    return mark if claimed in digests_from_dist(dist) else None


def first_party_versions(document: Mapping[str, Any] | None) -> list[str]:
    """The versions of a private packument mirrorgate did not mirror (a bad manifest counts:
    a version whose origin cannot be shown is the organisation's). `document` is the full
    packument: the abbreviated form drops the mark."""
    if document is None:
        return []
    versions = document.get("versions")
    if not isinstance(versions, Mapping):
        return []
    return [version for version, manifest in versions.items()
            if not isinstance(manifest, Mapping) or mirrored_mark(manifest) is None]
