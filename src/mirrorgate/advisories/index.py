"""The advisory index: every npm package an OSV export names, to what affects which version.

Built once per load, off the event loop, then only read: a lookup is one dict access by package
name (most names have no entry, so most versions cost exactly that), then a walk over that
package's few advisories.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

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
    """Advisories by npm package name; immutable once built."""

    __slots__ = ("_by_name", "_fixes", "records", "skipped")

    def __init__(self, by_name: dict[str, tuple[PackageAdvisory, ...]], records: int,
                 skipped: int) -> None:
        self._by_name = by_name
        self.records = records
        self.skipped = skipped
        fixes: dict[str, frozenset[str]] = {}
        for name, entries in by_name.items():
            found = {i.fixed for e in entries for i in e.intervals if i.fixed is not None}
            if found:
                fixes[name] = frozenset(found)
        self._fixes = fixes

    def __len__(self) -> int:
        return len(self._by_name)

    def entries(self, name: str) -> tuple[PackageAdvisory, ...]:
        return self._by_name.get(name, ())

    def by_id(self, advisory: str) -> dict[str, tuple[PackageAdvisory, ...]]:
        """The packages an advisory (by its id or an alias) names, each with its entries: a
        walk over the whole index, for an operator's question, never a request."""
        found: dict[str, tuple[PackageAdvisory, ...]] = {}
        for name, entries in self._by_name.items():
            named = tuple(e for e in entries
                          if advisory == e.advisory.id or advisory in e.advisory.aliases)
            if named:
                found[name] = named
        return found

    def hits(self, name: str, version: str) -> list[Hit]:
        """Every advisory affecting `name@version`."""
        entries = self._by_name.get(name)
        if not entries:
            return []
        parsed = parse_version(version)
        key = parsed.key if parsed is not None else None
        return [hit for entry in entries if (hit := entry.hit(version, key)) is not None]

    def is_fix(self, name: str, version: str) -> bool:
        """Whether `version` is the `fixed` event of an advisory on `name`: the release that
        ends an affected interval."""
        fixes = self._fixes.get(name)
        return fixes is not None and version in fixes


class IndexBuilder:
    """Collects parsed records into an `AdvisoryIndex`, sharing what repeats: the npm export
    holds about 200,000 records, so an advisory is one object for every package it names,
    identical interval lists (above all "every version", the shape of nearly every `MAL-`
    record) are one object, and only what a denial or `npm audit` shows is kept."""

    def __init__(self) -> None:
        self._by_name: dict[str, list[PackageAdvisory]] = {}
        self._intervals: dict[tuple[Interval, ...], tuple[Interval, ...]] = {}
        self._versions: dict[frozenset[str], frozenset[str]] = {}
        self.records = 0
        self.skipped = 0

    def add(self, record: Record | None) -> None:
        if record is None:
            self.skipped += 1
            return
        self.records += 1
        for name, intervals, versions in record.affected:
            shared = self._intervals.setdefault(intervals, intervals)
            explicit = self._versions.setdefault(versions, versions)
            self._by_name.setdefault(sys.intern(name), []).append(
                PackageAdvisory(record.advisory, shared, explicit))

    def extend(self, records: Iterable[Record | None]) -> None:
        for record in records:
            self.add(record)

    def build(self) -> AdvisoryIndex:
        return AdvisoryIndex({name: tuple(entries) for name, entries in self._by_name.items()},
                             self.records, self.skipped)
