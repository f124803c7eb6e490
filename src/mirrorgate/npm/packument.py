"""The packument as npm's protocol has it: a version serialised, two documents merged, rendered.

Pure functions over npm documents, with no policy in them: the gate (`mirrorgate.gate`) decides
which versions survive and hands their bytes here to be put together. A version is serialised
once with its tarball URL on `PLACEHOLDER`, and `on_base` swaps the proxy's base URL in when a
form is rendered, so one gating serves every host name the proxy is reached by.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import orjson

from mirrorgate.npm.names import PackageName, tarball_filename
from mirrorgate.npm.scripts import install_scripts
from mirrorgate.npm.versions import highest

__all__ = [
    "ABBREVIATED",
    "ABBREVIATED_FIELDS",
    "FULL",
    "PLACEHOLDER",
    "Restricted",
    "manifest_on",
    "merge_head",
    "merge_tags",
    "not_a_packument",
    "on_base",
    "render",
    "serialise",
    "tags_of",
    "times_of",
    "versions_of",
]

ABBREVIATED = "application/vnd.npm.install-v1+json"
FULL = "application/json"

ABBREVIATED_FIELDS: tuple[str, ...] = (
    "name", "version", "deprecated", "dependencies", "optionalDependencies",
    "devDependencies", "bundleDependencies", "peerDependencies", "peerDependenciesMeta",
    "acceptDependencies", "bin", "directories", "dist", "engines", "os", "cpu", "libc",
    "_hasShrinkwrap", "hasInstallScript", "funding",
)
"""What npm's registry keeps in an abbreviated ("corgi") version document: what an install
reads. `hasInstallScript` is derived from `scripts` when the upstream did not set it."""

MAX_DIST_TAGS = 1_000
PLACEHOLDER = f"mirrorgate-base-{secrets.token_hex(12)}:"
"""Stands for the proxy's base URL in serialised versions; random per process, so no upstream
string can contain it."""
_PLACEHOLDER_BYTES = PLACEHOLDER.encode()
_DROPPED_HEAD = frozenset({"versions", "dist-tags", "time", "policyRestrictions",
                           "_attachments", "_rev", "_id", "name"})


def not_a_packument(name: PackageName, document: Mapping[str, Any]) -> str | None:
    """Why a JSON object a registry answered 200 for `name` is not its packument (None: it
    is). A packument names no other package and has a `versions` object, or is npm's
    unpublished tombstone (`time.unpublished`, no versions). Anything else (a rate limiter's
    `{"error": ...}`, `{}`, another package's document behind a broken cache) says nothing
    about `name`'s versions: read as its packument, it would withdraw every mirrored one."""
    named = document.get("name")
    if named is not None and named != name.full:
        return f"it is the document of {str(named)[:100]!r}, not of {name.full}"
    if isinstance(document.get("versions"), Mapping):
        return None
    times = document.get("time")
    if isinstance(times, Mapping) and isinstance(times.get("unpublished"), Mapping):
        return None
    keys = ", ".join(sorted(str(key)[:40] for key in document)[:8])
    return (f"it has no versions object and is no unpublished tombstone "
            f"(its keys: {keys or 'none'})")


def _json_text(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def on_base(serialised: bytes, base: str) -> bytes:
    """Serialised JSON with the placeholder replaced by `base` (the proxy's base URL)."""
    return serialised.replace(_PLACEHOLDER_BYTES, _json_text(base))


def manifest_on(serialised: bytes, base: str) -> dict[str, Any]:
    """A serialised version parsed, its tarball URL on `base`."""
    parsed: dict[str, Any] = orjson.loads(on_base(serialised, base))
    return parsed


def serialise(name: PackageName, version: str, manifest: Mapping[str, Any]) -> tuple[bytes,
                                                                                     bytes]:
    """The full and abbreviated JSON of one version, its tarball URL on the placeholder."""
    url = f"{PLACEHOLDER}npm/{name.tarball_path(tarball_filename(name, version))}"
    dist = manifest.get("dist")
    served_dist = {**dist, "tarball": url} if isinstance(dist, Mapping) else {"tarball": url}
    full = {**manifest, "dist": served_dist}
    abbreviated = {key: full[key] for key in ABBREVIATED_FIELDS if key in full}
    if "hasInstallScript" not in abbreviated and install_scripts(manifest):
        abbreviated["hasInstallScript"] = True
    return _compact(orjson.dumps(full)), _compact(orjson.dumps(abbreviated))


def _compact(serialised: bytes) -> bytes:
    """A copy sized to its content. orjson hands back its output with room to spare (about
    4 KiB held for a 300-byte version, ten times the text for larger ones), and the cache keeps
    two of these per version for as long as the packument is cached: uncompacted, a cache
    counting 500 MiB of versions would hold several GiB."""
    return bytes(memoryview(serialised))


# --- reading upstream documents, which are untrusted ------------------------------------------

def versions_of(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    versions = document.get("versions") if document is not None else None
    return versions if isinstance(versions, Mapping) else {}


def times_of(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    times = document.get("time") if document is not None else None
    return times if isinstance(times, Mapping) else {}


def tags_of(document: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    tags = document.get("dist-tags") if document is not None else None
    if not isinstance(tags, Mapping):
        return []
    return [(tag, version) for tag, version in list(tags.items())[:MAX_DIST_TAGS]
            if isinstance(version, str)]


# --- merging two documents --------------------------------------------------------------------

def merge_tags(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
               survivors: list[str], private_first: bool) -> dict[str, str]:
    """The first upstream naming a tag decides it (public, then private; private first for a
    first-party name); a tag on a version that did not survive is dropped, and a missing
    `latest` goes to the highest surviving stable version (else the highest prerelease)."""
    alive = set(survivors)
    decided: set[str] = set()
    tags: dict[str, str] = {}
    for source in ((private, public) if private_first else (public, private)):
        for tag, version in tags_of(source):
            if tag in decided:
                continue
            decided.add(tag)
            if version in alive:
                tags[tag] = version
    if "latest" not in tags:
        best = highest(survivors)
        if best is not None:
            tags["latest"] = best
    return tags


def merge_head(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
               private_first: bool) -> dict[str, Any]:
    """The packument's fields other than versions, tags and times: the public side's, unless
    the name is first-party or public lists no versions."""
    if private_first:
        # a first-party name's readme, description, maintainers... are its own, also with
        # merge_public: what the private document leaves out is left out, never the public
        # side's words (an impostor's readme and maintainers on the organisation's package)
        return {key: value for key, value in (private or {}).items()
                if key not in _DROPPED_HEAD}
    source = public if versions_of(public) else private
    if source is None:
        source = public or {}
    return {key: value for key, value in source.items() if key not in _DROPPED_HEAD}


# --- rendering --------------------------------------------------------------------------------

Restricted = tuple[str, Mapping[str, bytes], Mapping[str, Mapping[str, str]]]
"""npm's `policyRestrictions`: the one-line message, the withheld versions' serialised forms,
and each one's rule and reason as data (`denials`, mirrorgate's own field, so a program reads
fields instead of parsing the sentence; npm ignores it)."""


def render(name: PackageName, head: Mapping[str, Any], dist_tags: Mapping[str, str],
           time: Mapping[str, str], versions: Mapping[str, bytes], abbreviated: bool,
           base: str | None, restricted: Restricted | None = None) -> bytes:
    """The packument's bytes in one form, from serialised versions of that form, tarball URLs
    on `base` (the proxy's base URL, ending in `/`), or still on the placeholder when `base`
    is None (`on_base` then puts any base in with one pass over the bytes)."""
    survivors = {v: orjson.Fragment(serialised) for v, serialised in versions.items()}
    document: dict[str, Any]
    if abbreviated:
        document = {"name": name.full}
        modified = time.get("modified")
        if modified is not None:
            document["modified"] = modified
        document["dist-tags"] = dist_tags
        document["versions"] = survivors
    else:
        document = {"_id": name.full, "name": name.full, **head, "dist-tags": dist_tags,
                    "versions": survivors, "time": time}
    if restricted is not None:
        message, withheld, denials = restricted
        # in both forms, so that `npm install pkg@denied` fails with E403 and the reason
        document["policyRestrictions"] = {
            "message": message,
            "versions": {v: orjson.Fragment(serialised) for v, serialised in withheld.items()},
            "denials": denials,
        }
    serialised = orjson.dumps(document)
    return serialised if base is None else on_base(serialised, base)
