"""The mark the worker writes into every version it mirrors, and how it is read back.

A private registry stamps its own publish moment into `time[version]` and forgets where a
version came from; the mark, a `_mirrorgate` object in the manifest, keeps both: a copy of a
public version, its public publish time, and the integrity it was verified against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MARK_FIELD", "MirrorMark", "read_mark", "with_mark", "without_mark"]

# Checked to survive Verdaccio 6.8 (full packuments keep unknown manifest fields; the
# abbreviated form drops them) and the file store.
MARK_FIELD = "_mirrorgate"
MARK_VERSION = 1


@dataclass(frozen=True, slots=True)
class MirrorMark:
    """What a mirrored version says about itself: copied from public, when it was published
    there (ISO 8601, as the public `time` gave it, or None when it gave none) and the
    integrity (SRI) the worker verified the bytes against."""

    published: str | None
    integrity: str


def read_mark(manifest: Mapping[str, Any]) -> MirrorMark | None:
    """The mark of a version the worker mirrored, or None for one it did not (a first-party
    version, or a mark of another shape, which is never trusted to mean "mirrored")."""
    raw = manifest.get(MARK_FIELD)
    if not isinstance(raw, Mapping) or raw.get("v") != MARK_VERSION:
        return None
    if raw.get("source") != "public":
        return None
    integrity = raw.get("integrity")
    published = raw.get("published")
    if not isinstance(integrity, str) or not integrity:
        return None
    if published is not None and not isinstance(published, str):
        return None
    return MirrorMark(published=published, integrity=integrity)


def without_mark(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest with any `_mirrorgate` field removed: a public manifest must never carry a
    mark of its own into what is served or published (an impostor could forge one)."""
    return {key: value for key, value in manifest.items() if key != MARK_FIELD}


def with_mark(manifest: Mapping[str, Any], mark: MirrorMark) -> dict[str, Any]:
    """The manifest the worker publishes: the public one (any mark in it dropped) plus its own."""
    marked = without_mark(manifest)
    body: dict[str, Any] = {"v": MARK_VERSION, "source": "public", "integrity": mark.integrity}
    if mark.published is not None:
        body["published"] = mark.published
    marked[MARK_FIELD] = body
    return marked
