"""Tarball digests: SRI parsing, the strongest digest, and bytes checked as they stream in.

The worker must never publish, and the serve path never complete, a public tarball whose bytes
are not the ones the admission rules saw described; this module decides what "the same bytes"
means, once, for both (`StreamVerifier`, `agreement`).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirrorgate.errors import MirrorgateError

__all__ = [
    "STRONGEST_FIRST",
    "Agreement",
    "Digest",
    "DigestMismatch",
    "SizeMismatch",
    "StreamVerifier",
    "TarballDigests",
    "TooLarge",
    "Unverifiable",
    "Verified",
    "agreement",
    "digest_of",
    "digests_from_dist",
    "dist_digests",
    "parse_integrity",
    "parse_shasum",
    "same_digest",
    "strongest",
    "strongest_of",
    "strongest_sri",
]

# The algorithms the worker can verify, strongest first. Anything else found in an SRI string
# is kept on the job (it was admitted that way) but never chosen for verification.
STRONGEST_FIRST: tuple[str, ...] = ("sha512", "sha384", "sha256", "sha1")

_HEX_SHA1 = re.compile(r"[0-9a-fA-F]{40}")
_SRI_ENTRY = re.compile(r"([A-Za-z0-9]+)-([A-Za-z0-9+/=_-]+)")


@dataclass(frozen=True, slots=True)
class Digest:
    """One integrity digest: the algorithm (lower case) and its base64 value, as SRI writes it."""

    algorithm: str
    value: str

    @property
    def verifiable(self) -> bool:
        return self.algorithm in STRONGEST_FIRST

    def raw(self) -> bytes:
        """The digest's bytes; raises ValueError when the value is not base64."""
        # what base64.b64decode(validate=True) runs, without its wrapping: the gate decodes
        # every digest of every version of every packument it fills
        return binascii.a2b_base64(self.value, strict_mode=True)

    def sri(self) -> str:
        return f"{self.algorithm}-{self.value}"


def parse_integrity(text: str) -> tuple[Digest, ...]:
    """Every well-formed entry of an SRI string ("sha512-... sha1-...?opt"), in order.

    Options after `?` are ignored. Malformed entries are skipped: an SRI string is a set of
    alternatives, and one unreadable alternative does not make the others wrong.
    """
    found: list[Digest] = []
    for token in text.split():
        entry = token.split("?", 1)[0]
        match = _SRI_ENTRY.fullmatch(entry)
        if match is None:
            continue
        digest = Digest(match.group(1).lower(), match.group(2))
        if digest.verifiable:
            try:
                digest.raw()
            except (binascii.Error, ValueError):
                continue
        if digest not in found:
            found.append(digest)
    return tuple(found)


def parse_shasum(text: str) -> Digest | None:
    """npm's `dist.shasum`: a hex sha1, returned as an SRI-style sha1 digest."""
    text = text.strip()
    if _HEX_SHA1.fullmatch(text) is None:
        return None
    return Digest("sha1", binascii.b2a_base64(bytes.fromhex(text), newline=False).decode("ascii"))


def digests_from_dist(dist: Mapping[str, Any]) -> tuple[Digest, ...]:
    """Every digest a version's `dist` carries: the SRI entries of `integrity`, then `shasum`."""
    found: list[Digest] = []
    integrity = dist.get("integrity")
    if isinstance(integrity, str):
        found.extend(parse_integrity(integrity))
    shasum = dist.get("shasum")
    if isinstance(shasum, str):
        sha1 = parse_shasum(shasum)
        if sha1 is not None and sha1 not in found:
            found.append(sha1)
    return tuple(found)


def strongest(digests: tuple[Digest, ...]) -> Digest | None:
    """The digest verification must use: the strongest known algorithm present, else None."""
    for algorithm in STRONGEST_FIRST:
        for digest in digests:
            if digest.algorithm == algorithm:
                return digest
    return None



class Unverifiable(MirrorgateError):  # noqa: N818 - an outcome the worker retires, not a bug
    """The job carries no digest this worker can compute (e.g. only md5)."""


class TooLarge(MirrorgateError):  # noqa: N818 - an outcome the worker retires, not a bug
    """The tarball is bigger than the configured cap; `size` is what was seen or declared."""

    def __init__(self, size: int, limit: int, declared: bool) -> None:
        how = "declares" if declared else "ran past"
        super().__init__(f"the tarball {how} {size} bytes; the limit is {limit} "
                         "(MIRRORGATE_MAX_TARBALL_BYTES)")
        self.size = size
        self.limit = limit


class SizeMismatch(MirrorgateError):  # noqa: N818 - tampering or corruption, logged as such
    """The bytes are not the size the job declares; `complete` is False when the download was
    stopped as soon as it ran past the declared size (then `actual` is a lower bound)."""

    def __init__(self, expected: int, actual: int, complete: bool) -> None:
        shown = str(actual) if complete else f"more than {expected}"
        super().__init__(f"the job declares {expected} bytes, the upstream sent {shown}")
        self.expected = expected
        self.actual = actual
        self.complete = complete


class DigestMismatch(MirrorgateError):  # noqa: N818 - tampering or corruption, logged as such
    """The bytes do not hash to the digest the job was admitted with."""

    def __init__(self, expected: Digest, actual: Digest) -> None:
        super().__init__(f"expected {expected.sri()}, the bytes hash to {actual.sri()}")
        self.expected = expected
        self.actual = actual


def strongest_of(digests: tuple[Digest, ...]) -> Digest:
    """The digest that decides; raises Unverifiable when none is of a known algorithm."""
    chosen = strongest(digests)
    if chosen is None:
        shown = ", ".join(d.algorithm for d in digests) or "none"
        raise Unverifiable(f"the job carries no digest this worker can verify ({shown}); "
                           f"it needs one of {', '.join(STRONGEST_FIRST)}")
    return chosen


def strongest_sri(digests: tuple[Digest, ...]) -> str:
    """The bytes `digests` name, as one text: the strongest digest's SRI, "" when none is of
    a known algorithm. What a release verdict and a waiver are bound to: other bytes under the
    same version name another text (a weaker digest alone too, so dropping the strong one
    from `dist` never passes for the same bytes)."""
    chosen = strongest(digests)
    return chosen.sri() if chosen is not None else ""


def digest_of(algorithm: str, data: bytes) -> Digest:
    return Digest(algorithm, base64.b64encode(hashlib.new(algorithm, data).digest()).decode())


def same_digest(a: Digest, b: Digest) -> bool:
    """Equal algorithm and equal bytes (the base64 spelling may differ in padding)."""
    if a.algorithm != b.algorithm:
        return False
    try:
        return hmac.compare_digest(a.raw(), b.raw())
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Verified:
    """Bytes that matched: the digest that decided, and how many bytes there were."""

    digest: Digest
    size: int


class StreamVerifier:
    """Feed it the chunks of one download; `finish()` says whether they are the admitted bytes.

    One digest decides, the strongest given (`strongest_of`), and only it is computed: one pass
    of one hash, fed the chunks as they arrive, no copies. A weaker digest that matches never
    rescues a stronger one that does not.

    Size is checked against `limit` (MIRRORGATE_MAX_TARBALL_BYTES in the worker; the serve path
    relays without one) before a byte is read when the upstream declares a Content-Length, and
    on every chunk, so a lying or absent Content-Length cannot make the worker hold more; and
    against `expected_size`, when the job declares one, as soon as the bytes run past it and
    again at the end.

    `declared_length()` and `update()` raise `TooLarge` or `SizeMismatch` as soon as the bytes
    cannot be right, so the caller stops downloading; `finish()` raises `SizeMismatch` or
    `DigestMismatch`, or returns `Verified`.
    """

    __slots__ = ("_hash", "expected", "expected_size", "limit", "size")

    def __init__(self, digests: tuple[Digest, ...], *, expected_size: int | None,
                 limit: int | None) -> None:
        expected = strongest_of(digests)
        self.expected = expected
        self.expected_size = expected_size
        self.limit = limit
        self.size = 0
        self._hash = hashlib.new(expected.algorithm)

    def declared_length(self, length: int | None) -> None:
        """Check the upstream's Content-Length before reading the body."""
        if length is None:
            return
        if self.limit is not None and length > self.limit:
            raise TooLarge(length, self.limit, declared=True)
        if self.expected_size is not None and length != self.expected_size:
            raise SizeMismatch(self.expected_size, length, complete=True)

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.limit is not None and self.size > self.limit:
            raise TooLarge(self.size, self.limit, declared=False)
        if self.expected_size is not None and self.size > self.expected_size:
            raise SizeMismatch(self.expected_size, self.size, complete=False)
        self._hash.update(chunk)

    def finish(self) -> Verified:
        if self.expected_size is not None and self.size != self.expected_size:
            raise SizeMismatch(self.expected_size, self.size, complete=True)
        actual = Digest(self.expected.algorithm,
                        base64.b64encode(self._hash.digest()).decode("ascii"))
        if not same_digest(actual, self.expected):
            raise DigestMismatch(self.expected, actual)
        return Verified(actual, self.size)


@dataclass(frozen=True, slots=True)
class TarballDigests:
    """What a registry's `dist` says about bytes: the sha512 SRI and the hex sha1 shasum."""

    integrity: str
    shasum: str


def dist_digests(tarball: bytes, verified: Verified,
                 job_digests: tuple[Digest, ...]) -> TarballDigests:
    """The sha512 integrity and sha1 shasum of verified bytes (the verified hash reused where it
    is one of them), for the publish document's `dist`; raises DigestMismatch when a sha512 or
    sha1 the job carries disagrees with them (the job's metadata contradicts itself, and bytes
    that contradict any admitted digest are never published).

    CPU-bound for large tarballs: call it in a thread.
    """
    computed: dict[str, Digest] = {verified.digest.algorithm: verified.digest}
    for algorithm in ("sha512", "sha1"):
        if algorithm not in computed:
            computed[algorithm] = digest_of(algorithm, tarball)
    for wanted in job_digests:
        have = computed.get(wanted.algorithm)
        if have is not None and not same_digest(have, wanted):
            raise DigestMismatch(wanted, have)
    return TarballDigests(integrity=computed["sha512"].sri(),
                          shasum=computed["sha1"].raw().hex())


class Agreement(enum.Enum):
    """How a stored version's `dist` compares with a job's digests."""

    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


def agreement(stored_dist: Mapping[str, Any] | None,
              job_digests: tuple[Digest, ...]) -> tuple[Agreement, Digest | None]:
    """Compare by the strongest algorithm both carry; also return the stored digest used.

    SAME needs that algorithm to be the job's strongest; a match on a weaker one is UNKNOWN.
    """
    if not isinstance(stored_dist, Mapping):
        return Agreement.UNKNOWN, None
    stored = digests_from_dist(stored_dist)
    wanted = strongest(job_digests)
    for algorithm in STRONGEST_FIRST:
        mine = [d for d in job_digests if d.algorithm == algorithm]
        theirs = [d for d in stored if d.algorithm == algorithm]
        if not mine or not theirs:
            continue
        if not any(same_digest(m, t) for m in mine for t in theirs):
            return Agreement.DIFFERENT, theirs[0]
        if wanted is not None and algorithm == wanted.algorithm:
            return Agreement.SAME, theirs[0]
        return Agreement.UNKNOWN, theirs[0]
    return Agreement.UNKNOWN, None
