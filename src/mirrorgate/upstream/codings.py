"""Content codings on tarball reads: the bytes as stored, whatever coding the upstream chose.

Every tarball read asks for `identity`, yet an upstream may encode anyway (Verdaccio gzips over
1 KB for a client that accepts gzip; a caching proxy or CDN may regardless). Bytes relayed or
hashed still encoded would be a corrupt install for the client and a false tamper alarm.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping

import aiohttp

from mirrorgate.errors import MirrorgateError

__all__ = ["DECODABLE", "IDENTITY", "CodingError", "UnsupportedCodingError", "coding_of", "decode"]

IDENTITY = "identity"
# the codings registries use; any other is refused by name (`coding_of`), never passed on
DECODABLE = ("gzip", "x-gzip", "deflate")
OUT_STEP = 256 * 1024
"""At most this many decoded bytes come out of one step, so one small coded chunk cannot
inflate into a large buffer (a compression bomb is then stopped by the reader's own cap)."""


class UnsupportedCodingError(MirrorgateError, ValueError):
    """The answer is in a content coding mirrorgate cannot decode (brotli, zstd, stacked)."""


class CodingError(MirrorgateError, aiohttp.ClientPayloadError):
    """A coded body that does not decode: a broken transfer, never a different tarball."""


def coding_of(headers: Mapping[str, str]) -> str | None:
    """The content coding of an answer, lower-cased, or None when it has none (identity).

    Raises UnsupportedCodingError for a coding `decode` cannot undo."""
    raw = headers.get("Content-Encoding", "")
    codings = [part.strip().lower() for part in raw.split(",") if part.strip()]
    codings = [coding for coding in codings if coding != IDENTITY]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in DECODABLE:
        raise UnsupportedCodingError(f"the answer is in content coding {raw.strip()!r}, which "
                                f"mirrorgate cannot decode (it asks for identity and decodes "
                                f"{', '.join(DECODABLE)})")
    return codings[0]


def _decompressor(coding: str, first: bytes) -> zlib._Decompress:
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    # "deflate" is meant to be zlib-wrapped (RFC 9110) but some servers send raw deflate:
    # a zlib stream starts with a header whose 16-bit value is a multiple of 31.
    wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)


async def decode(chunks: AsyncIterator[bytes], coding: str) -> AsyncIterator[bytes]:
    """The decoded bytes of a body in `coding` (one of DECODABLE), chunk by chunk.

    Concatenated gzip members are decoded one after another, as gzip(1) does. A body that is
    not valid in its coding, or ends before its coded stream does, raises CodingError."""
    decompressor: zlib._Decompress | None = None
    started = False
    try:
        async for chunk in chunks:
            pending = chunk
            while pending:
                if decompressor is None:
                    decompressor = _decompressor(coding, pending)
                    started = True
                out = decompressor.decompress(pending, OUT_STEP)
                if out:
                    yield out
                if not decompressor.eof:
                    pending = decompressor.unconsumed_tail
                    continue
                pending, decompressor = decompressor.unused_data, None
                if pending and coding not in ("gzip", "x-gzip"):
                    raise CodingError(f"the {coding}-coded body has bytes after its end")
        if decompressor is not None:
            tail = decompressor.flush()
            if tail:
                yield tail
            if not decompressor.eof:
                raise CodingError(f"the {coding}-coded body ends before its coded stream does")
        elif not started:
            raise CodingError(f"the {coding}-coded body is empty")
    except zlib.error as error:
        raise CodingError(f"the {coding}-coded body does not decode ({error})") from None
