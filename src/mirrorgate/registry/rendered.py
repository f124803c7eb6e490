"""What the warm path sends: a packument rendered once per (form, base URL), both codings.

A `Rendered` holds the plain and gzip'd bytes, the ETag derived from what is served (a weak
ETag over the plain bytes, shared by both codings, which are the same representation) and the
header sets of the 200 and the 304, built once so a request only picks one. An `Entry` is what
the packument cache holds per package: the gated packument (or None when no upstream knows the
package), a fingerprint of the private answer it was built from (to tell whether a revalidation
may keep it), and its renderings. gzip is level 6 with a zero mtime, so the same packument
always compresses to the same bytes.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mirrorgate.registry.packument import ABBREVIATED, FULL, Gated, render

__all__ = ["VARY", "Entry", "RenderKey", "Rendered", "build_rendered", "fingerprint"]

VARY = "Accept, Accept-Encoding"
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

    @property
    def size(self) -> int:
        return len(self.body) + len(self.gzipped) + 256


class Entry:
    __slots__ = ("fingerprint", "gated", "pending", "renderings")

    def __init__(self, gated: Gated | None, fingerprint: bytes | None) -> None:
        self.gated = gated
        self.fingerprint = fingerprint
        self.renderings: dict[RenderKey, Rendered] = {}
        self.pending: dict[RenderKey, asyncio.Task[Rendered]] = {}


def build_rendered(gated: Gated, abbreviated: bool, base: str) -> Rendered:
    body = render(gated, abbreviated, base)
    etag = 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    headers = {"Content-Type": ABBREVIATED if abbreviated else FULL, "ETag": etag,
               "Vary": VARY}
    return Rendered(
        body=body,
        gzipped=gzip.compress(body, compresslevel=6, mtime=0),
        etag=etag,
        headers=headers,
        gzip_headers={**headers, "Content-Encoding": "gzip"},
        not_modified_headers={"ETag": etag, "Vary": VARY},
    )


def fingerprint(document: Mapping[str, Any] | None) -> bytes | None:
    """A digest of an upstream answer, to tell whether it changed since the last fill."""
    if document is None:
        return None
    serialised = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(serialised, digest_size=16).digest()
