"""The advisory index: every npm package an OSV export names, to what affects which version.

Built once per load, off the event loop, then only read. Held packed (a sorted array of name
hashes beside compressed blocks of encoded entries), because known malware is on by default:
the npm export names about 200,000 packages, 173 MiB as objects. A lookup is a binary search
(most names have no entry, so most versions cost exactly that); the few names that have
entries are decoded on their first lookup and kept decoded.
"""

from __future__ import annotations

import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from mirrorgate.advisories.osv import Advisory, Interval, Record
from mirrorgate.npm.versions import Key, parse_version

__all__ = ["AdvisoryIndex", "Hit", "IndexBuilder", "PackageAdvisory"]


@dataclass(frozen=True, slots=True)
class PackageAdvisory:
    """One advisory as it applies to one package."""

    advisory: Advisory
    intervals: tuple[Interval, ...]
    versions: frozenset[str]

    def hit(self, version: str, key: Key | None) -> Hit | None:
        """The hit when `version` is affected; `key` is its semver key (None: not semver, so
        only an explicit listing or an "every version" interval can place it)."""
        if version in self.versions:
            return Hit(self, self._fix_after(key))
        for interval in self.intervals:
            if key is None:
                if interval.low is None and interval.high is None:
                    return Hit(self, None)
            elif interval.covers(key):
                return Hit(self, interval.fixed)
        return None

    def _fix_after(self, key: Key | None) -> str | None:
        if key is None:
            return None
        fixes = [i for i in self.intervals if i.fixed is not None and i.high is not None
                 and i.high > key]
        return min(fixes, key=lambda i: i.high or key).fixed if fixes else None

    def npm_range(self) -> str:
        """The affected versions as one npm range, for `npm audit`'s `vulnerable_versions`."""
        parts = [interval.npm_range() for interval in self.intervals]
        parts += sorted(self.versions)
        return " || ".join(parts) or "<0.0.0-0"


@dataclass(frozen=True, slots=True)
class Hit:
    """An advisory that affects a version, and the version that fixes it (None: no fix)."""

    entry: PackageAdvisory
    fixed: str | None

    @property
    def advisory(self) -> Advisory:
        return self.entry.advisory


class AdvisoryIndex:
    """Advisories by npm package name; immutable once built (`IndexBuilder.build`)."""

    __slots__ = ("_blocks", "_decoded", "_hashes", "_names", "_offsets", "records", "skipped")

    DECODED = 1024
    """Names whose answer is kept (then emptied and begun again): a packument fill asks about
    one name once a version."""

    def __init__(self, hashes: array[int], offsets: array[int], blocks: bytes, names: int,
                 records: int, skipped: int) -> None:
        self._hashes = hashes  # sorted; entry i lies in block i // BLOCK
        self._offsets = offsets  # block b is blocks[offsets[b]:offsets[b + 1]]
        self._blocks = blocks
        self._names = names
        self.records = records
        self.skipped = skipped
        self._decoded: dict[str, tuple[PackageAdvisory, ...]] = {}

    def __len__(self) -> int:
        return self._names

    @property
    def packed_bytes(self) -> int:
        """What the index holds, in bytes (the arrays and the compressed blocks)."""
        return (len(self._blocks) + self._hashes.itemsize * len(self._hashes)
                + self._offsets.itemsize * len(self._offsets))

    def _block(self, number: int) -> list[list[Any]]:
        raw = self._blocks[self._offsets[number]:self._offsets[number + 1]]
        block: list[list[Any]] = orjson.loads(zlib.decompress(raw))
        return block

    def entries(self, name: str) -> tuple[PackageAdvisory, ...]:
        decoded = self._decoded.get(name)
        if decoded is not None:
            return decoded
        hashes, wanted = self._hashes, _hash(name)
        at = bisect_left(hashes, wanted)
        found: list[PackageAdvisory] = []
        block: list[list[Any]] = []
        number = -1
        while at < len(hashes) and hashes[at] == wanted:
            if at // BLOCK != number:
                number = at // BLOCK
                block = self._block(number)
            fields = block[at % BLOCK]
            if fields[0] == name:  # a hash shared by two names: only this name's entries
                found.append(_decode(fields))
            at += 1
        result = tuple(found)
        # Kept found or not: a fill asks once a version of one name, and most names have no
        # entry. A thread gating and the event loop may both look up: each step here is one
        # dict operation (atomic under the GIL), and a lost update only costs a second decode.
        # Full, it is emptied whole rather than kept in LRU order, which two threads could
        # not keep consistent without a lock.
        if len(self._decoded) >= self.DECODED:
            self._decoded.clear()
        self._decoded[name] = result
        return result

    def by_id(self, advisory: str) -> dict[str, tuple[PackageAdvisory, ...]]:
        """The packages an advisory (by its id or an alias) names, each with its entries: a
        walk over the whole index, for an operator's question, never a request."""
        found: dict[str, list[PackageAdvisory]] = {}
        for number in range(len(self._offsets) - 1):
            for fields in self._block(number):
                if advisory == fields[1] or advisory in fields[2]:
                    found.setdefault(fields[0], []).append(_decode(fields))
        return {name: tuple(entries) for name, entries in found.items()}

    def hits(self, name: str, version: str) -> list[Hit]:
        """Every advisory affecting `name@version`."""
        entries = self.entries(name)
        if not entries:
            return []
        parsed = parse_version(version)
        key = parsed.key if parsed is not None else None
        return [hit for entry in entries if (hit := entry.hit(version, key)) is not None]

    def is_fix(self, name: str, version: str) -> bool:
        """Whether `version` is the `fixed` event of an advisory on `name`: the release that
        ends an affected interval."""
        return any(interval.fixed == version for entry in self.entries(name)
                   for interval in entry.intervals)


BLOCK = 32
"""Entries compressed together: a lookup that finds a name inflates one block (about 6 KB,
tens of microseconds, then the name is kept decoded); zlib over 32 entries of the export's
repetitive JSON keeps about a fifth of their bytes."""


def _hash(name: str) -> int:
    # Python's own string hash: fixed for the life of the process, which is the index's life
    return hash(name)


def _encode(name: str, advisory: Advisory, intervals: tuple[Interval, ...],
            versions: frozenset[str]) -> bytes:
    return orjson.dumps([
        name, advisory.id, advisory.aliases, advisory.summary, advisory.severity,
        advisory.malware, advisory.url, advisory.cwe, advisory.cvss_score, advisory.cvss_vector,
        [[i.low_text, i.high_text, i.inclusive, i.limit] for i in intervals], sorted(versions)])


def _key(text: str | None) -> Key | None:
    parsed = parse_version(text) if text is not None else None
    return parsed.key if parsed is not None else None


def _decode(fields: list[Any]) -> PackageAdvisory:
    (_name, ident, aliases, summary, severity, malware, url, cwe, score, vector, intervals,
     versions) = fields
    advisory = Advisory(ident, tuple(aliases), summary, severity, malware, url, tuple(cwe),
                        score, vector)
    return PackageAdvisory(
        advisory,
        tuple(Interval(_key(low), _key(high), inclusive, low, high, limit)
              for low, high, inclusive, limit in intervals),
        frozenset(versions))


class IndexBuilder:
    """Collects parsed records into an `AdvisoryIndex`, encoding each (package, advisory) as
    it comes, so a load never holds the export as objects; `malware_only` keeps `MAL-`
    records alone (the default feed: known malware, with CVE severities opt-in)."""

    def __init__(self, *, malware_only: bool = False) -> None:
        self.malware_only = malware_only
        self._hashes: array[int] = array("q")
        # one buffer, not a bytes object an entry: orjson's answer keeps the capacity of its
        # output buffer (4 KB where the entry is 200 bytes), 20 times the index while it loads
        self._blob = bytearray()
        self._ends: array[int] = array("Q")
        self._names: set[int] = set()
        self.records = 0
        self.skipped = 0

    def add(self, record: Record | None) -> None:
        if record is None:
            self.skipped += 1
            return
        if self.malware_only and not record.advisory.malware:
            return  # not counted as skipped: left out by choice, not unreadable
        self.records += 1
        for name, intervals, versions in record.affected:
            hashed = _hash(name)
            self._names.add(hashed)
            self._hashes.append(hashed)
            self._blob += _encode(name, record.advisory, intervals, versions)
            self._ends.append(len(self._blob))

    def extend(self, records: Iterable[Record | None]) -> None:
        for record in records:
            self.add(record)

    def build(self) -> AdvisoryIndex:
        count = len(self._hashes)
        order = sorted(range(count), key=self._hashes.__getitem__)
        offsets: array[int] = array("Q", [0])
        blocks = bytearray()
        blob, ends = memoryview(self._blob), self._ends
        for first in range(0, count, BLOCK):
            chosen = (blob[ends[i - 1] if i else 0:ends[i]] for i in order[first:first + BLOCK])
            blocks += zlib.compress(b"[" + b",".join(chosen) + b"]", 6)
            offsets.append(len(blocks))
        blob.release()
        index = AdvisoryIndex(array("q", (self._hashes[i] for i in order)), offsets,
                              bytes(blocks), len(self._names), self.records, self.skipped)
        self._blob, self._ends = bytearray(), array("Q")
        return index
