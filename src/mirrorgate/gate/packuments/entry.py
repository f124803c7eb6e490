"""What the packument cache holds per package, and what the warm path sends from it.

`PackumentEntry` is one cache value: the gated packument, a fingerprint of the private answer,
and the renderings. `PublicAnswer` is what `mirrorgate worker`'s own cache holds instead: public's
packument as it was sent.
`Rendered` is one of those: the plain and gzip'd bytes, the ETag and the 200 and 304 header
sets, built once per (form, base URL) so a request only picks one.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from mirrorgate.gate.records import Gated
from mirrorgate.npm.lazydoc import lazy_packument
from mirrorgate.npm.packument import ABBREVIATED, FULL

__all__ = ["MAX_BASES", "VARY", "PackumentEntry", "PublicAnswer", "RenderKey", "Rendered",
           "build_rendered", "fingerprint"]

VARY = "Accept, Accept-Encoding"
MAX_BASES = 4
"""Base URLs one cached packument keeps renderings for (a deployment has one or a few names).
The oldest base's go for a new one: a client inventing `Host` values could otherwise grow one
package's entry until the cache's byte budget evicted every other package."""
RenderKey = tuple[bool, str]
"""(abbreviated, base URL)."""


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    gzipped: bytes
    etag: str
    headers: Mapping[str, str]
    gzip_headers: Mapping[str, str]
    not_modified_headers: Mapping[str, str]
    wire: dict[Any, tuple[bytes, bytes]] = field(default_factory=dict, compare=False,
                                                 repr=False)
    """What the application sending it made of it once (`serve.warm`: each answer's status
    line and headers, serialised), kept as long as the rendering is."""

    @property
    def size(self) -> int:
        # the header sets, and the heads kept in `wire` (at most five, a few hundred bytes each)
        return len(self.body) + len(self.gzipped) + 256 + 2048


@dataclass(frozen=True, slots=True)
class PublicAnswer:
    """The public upstream's packument exactly as it sent it (`body`: its bytes, None when it
    has no such package), kept for the worker's re-gate (`gate.packuments.public.CachedPublic`).
    Bytes, never a parsed document: each reader parses its own copy, so nothing one does reaches
    another."""

    body: bytes | None

    @property
    def size(self) -> int:
        return len(self.body) if self.body is not None else 0

    def document(self) -> Mapping[str, Any] | None:
        """A fresh parse (the bytes passed the upstream client's bounds and its packument
        check, `Upstream.lazy_packument_of`, when they arrived), read lazily (`npm.lazydoc`):
        a job reads one version of it."""
        if self.body is None:
            return None
        lazy = lazy_packument(self.body)
        if lazy is not None:
            return lazy
        parsed: dict[str, Any] = orjson.loads(self.body)
        return parsed


class PackumentEntry:
    __slots__ = ("fingerprint", "gated", "pending", "private_answered", "renderings", "unplaced")

    def __init__(self, gated: Gated | None, fingerprint: bytes | None, *,
                 private_answered: bool = False) -> None:
        self.gated = gated
        self.fingerprint = fingerprint
        self.private_answered = private_answered
        """The private upstream answered this fill (a packument or a 404), so a version the
        gated packument calls public-only is known not to be private."""
        self.renderings: dict[RenderKey, Rendered] = {}
        self.unplaced: dict[bool, bytes] = {}
        """Per form, the bytes with tarball URLs still on the placeholder: made once a base
        whose renderings are not kept asks, so that each such base costs one pass over the
        bytes (`npm.packument.on_base`) rather than a rendering."""
        self.pending: dict[RenderKey, asyncio.Task[Rendered]] = {}

    def keep(self, key: RenderKey, rendered: Rendered) -> int:
        """Store a rendering, dropping the oldest base's when there are more than `MAX_BASES`;
        returns the change in bytes held."""
        delta = rendered.size
        old = self.renderings.pop(key, None)
        if old is not None:
            delta -= old.size
        self.renderings[key] = rendered
        bases = list(dict.fromkeys(base for _form, base in self.renderings))
        for base in bases[:max(0, len(bases) - MAX_BASES)]:
            for form in (True, False):
                dropped = self.renderings.pop((form, base), None)
                if dropped is not None:
                    delta -= dropped.size
        return delta


def build_rendered(gated: Gated, abbreviated: bool, base: str, vary: str = VARY,
                   footer: str | None = None) -> Rendered:
    return rendered_body(gated.render(abbreviated, base, footer), abbreviated, vary)


def rendered_body(body: bytes, abbreviated: bool, vary: str = VARY, *,
                  kept: bool = True, gzipped: bool = True) -> Rendered:
    """The answer for a packument's bytes: both codings and an ETag; or, for a rendering made
    for one request and not `kept`, no ETag (nothing is revalidated against it) and only the
    coding asked for, a gzip at the fastest level (its bytes are sent once)."""
    if not kept:
        headers = {"Content-Type": ABBREVIATED if abbreviated else FULL, "Vary": vary}
        return Rendered(body=body,
                        gzipped=gzip.compress(body, compresslevel=1, mtime=0) if gzipped else b"",
                        etag="", headers=headers,
                        gzip_headers={**headers, "Content-Encoding": "gzip"},
                        not_modified_headers=headers)
    # weak, over the plain bytes: both codings are the same representation and share it
    etag = 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    headers = {"Content-Type": ABBREVIATED if abbreviated else FULL, "ETag": etag,
               "Vary": vary}
    return Rendered(
        body=body,
        # a zero mtime: the same packument always compresses to the same bytes
        gzipped=gzip.compress(body, compresslevel=6, mtime=0),
        etag=etag,
        headers=headers,
        gzip_headers={**headers, "Content-Encoding": "gzip"},
        not_modified_headers={"ETag": etag, "Vary": vary},
    )


def fingerprint(document: Mapping[str, Any] | None) -> bytes | None:
    """A digest of an upstream answer, to tell whether it changed since the last fill."""
    if document is None:
        return None
    serialised = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(serialised, digest_size=16).digest()
