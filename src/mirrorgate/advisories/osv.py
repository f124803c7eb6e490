"""One OSV record read into what the gate needs: ids, summary, severity, affected npm versions.

OSV records come from a data file the operator chose, not from a client, but they are still
read strictly: a record that is not an object, has no id, or names no npm package is skipped
(counted by the loader), never raised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cvss import CVSS3, CVSS4

from mirrorgate.npm.versions import Key, parse_version

__all__ = ["SEVERITIES", "Advisory", "Interval", "Record", "parse_record", "severity_rank"]

SEVERITIES: tuple[str, ...] = ("unknown", "low", "medium", "high", "critical")
"""Severity levels, weakest first; `unknown` is below every threshold."""
_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
_LABELS = {"low": "low", "moderate": "medium", "medium": "medium", "high": "high",
           "critical": "critical"}
_PRINTABLE = re.compile(r"[ -~]*")
SUMMARY_LIMIT = 200


def severity_rank(severity: str) -> int:
    return _RANK.get(severity, 0)


@dataclass(frozen=True, slots=True)
class Advisory:
    """What an answer needs about one advisory (shared by every package it names)."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    severity: str  # one of SEVERITIES
    malware: bool
    url: str | None
    cwe: tuple[str, ...]
    cvss_score: float | None
    cvss_vector: str | None


@dataclass(frozen=True, slots=True)
class Interval:
    """Affected versions `low <= v < high` (`<= high` when `inclusive`); None is unbounded.
    `limit`: the interval ends at a `limit` event, a bound that is not a fix."""

    low: Key | None
    high: Key | None
    inclusive: bool
    low_text: str | None
    high_text: str | None
    limit: bool = False

    def covers(self, key: Key) -> bool:
        if self.low is not None and key < self.low:
            return False
        if self.high is None:
            return True
        return key <= self.high if self.inclusive else key < self.high

    @property
    def fixed(self) -> str | None:
        """The version that fixes this interval, when it ends with a `fixed` event."""
        return None if self.inclusive or self.limit else self.high_text

    def npm_range(self) -> str:
        """This interval as an npm range (`>=1.0.0 <1.2.3`), for `npm audit`."""
        parts = []
        if self.low_text is not None:
            parts.append(f">={self.low_text}")
        if self.high_text is not None:
            parts.append(f"{'<=' if self.inclusive else '<'}{self.high_text}")
        return " ".join(parts) or "*"


@dataclass(frozen=True, slots=True)
class Record:
    """An advisory and, per npm package it affects, the intervals and explicit versions."""

    advisory: Advisory
    affected: tuple[tuple[str, tuple[Interval, ...], frozenset[str]], ...]


def _clean(text: object, limit: int = SUMMARY_LIMIT) -> str:
    """A summary a terminal prints as is: one line, printable ASCII, bounded."""
    if not isinstance(text, str):
        return ""
    line = " ".join(text.split())
    if _PRINTABLE.fullmatch(line) is None:  # escapes and other scripts, spelled out
        line = "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii")
                       for c in line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


@functools.lru_cache(maxsize=4096)
def _score(kind: str, vector: str) -> tuple[str, float] | None:
    """A vector's (severity, base score); None when the library cannot read it. Cached: the
    export repeats a few thousand vectors across its records."""
    try:
        if kind == "CVSS_V3":
            v3 = CVSS3(vector)
            level, score = str(v3.severities()[0]).lower(), float(v3.scores()[0])
        elif kind == "CVSS_V4":
            v4 = CVSS4(vector)
            level, score = str(v4.severity).lower(), float(v4.base_score)
        else:
            return None
    # the library raises its own errors, or worse, for a bad vector: the label decides then
    except Exception:
        return None
    return (level if level in _RANK else "unknown"), score


def _cvss(entries: object) -> tuple[str, float | None, str | None]:
    best: tuple[str, float | None, str | None] = ("unknown", None, None)
    if not isinstance(entries, list):
        return best
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        kind, vector = entry.get("type"), entry.get("score")
        if not isinstance(kind, str) or not isinstance(vector, str) or len(vector) > 256:
            continue
        scored = _score(kind, vector)
        if scored is None:
            continue
        level, score = scored
        if best[1] is None or score > best[1]:
            best = (level, score, vector)
    return best


def _label(record: Mapping[str, Any]) -> str:
    specific = record.get("database_specific")
    label = specific.get("severity") if isinstance(specific, Mapping) else None
    return _LABELS.get(label.strip().lower(), "unknown") if isinstance(label, str) else "unknown"


def _url(record: Mapping[str, Any]) -> str | None:
    references = record.get("references")
    if not isinstance(references, list):
        return None
    found: dict[str, str] = {}
    for reference in references:
        if isinstance(reference, Mapping):
            kind, url = reference.get("type"), reference.get("url")
            if isinstance(kind, str) and isinstance(url, str) and url.startswith("https://"):
                found.setdefault(kind, _clean(url, 500))
    return found.get("ADVISORY") or found.get("WEB") or next(iter(found.values()), None)


def _cwe(record: Mapping[str, Any]) -> tuple[str, ...]:
    specific = record.get("database_specific")
    ids = specific.get("cwe_ids") if isinstance(specific, Mapping) else None
    if not isinstance(ids, list):
        return ()
    return tuple(_clean(item, 32) for item in ids[:16] if isinstance(item, str))


_ORDER = {"introduced": 0, "fixed": 1, "last_affected": 1, "limit": 1}


def _intervals(ranges: object) -> tuple[Interval, ...]:
    """A range's events sorted by version and walked: `introduced` opens an interval, `fixed`
    closes it (exclusive), `last_affected` closes it (inclusive); one left open runs to every
    later version. The order is semver's (prereleases before their release), with no npm range
    rule that hides prereleases: `1.2.0-beta` inside an affected interval is affected."""
    if not isinstance(ranges, list):
        return ()
    out: list[Interval] = []
    for one in ranges:
        # npm's ecosystem order is semver; GIT ranges are not read
        if not isinstance(one, Mapping) or one.get("type") not in ("SEMVER", "ECOSYSTEM"):
            continue
        events: list[tuple[Key | None, int, str, str]] = []
        for event in one.get("events") or ():
            if not isinstance(event, Mapping) or len(event) != 1:
                continue
            (kind, text), = event.items()
            if kind not in _ORDER or not isinstance(text, str):
                continue
            if kind == "introduced" and text == "0":
                events.append((None, 0, kind, text))
                continue
            version = parse_version(text)
            if version is not None:
                events.append((version.key, _ORDER[kind], kind, version.text))
        # "0" (None) sorts first; at the same version, a close comes after an open
        events.sort(key=lambda e: ((0,) if e[0] is None else (1, e[0]), e[1]))
        low: Key | None = None
        low_text: str | None = None
        open_ = False
        for key, _order, kind, text in events:
            if kind == "introduced":
                if not open_:
                    low, low_text, open_ = key, (None if key is None else text), True
            elif open_ and kind in ("fixed", "last_affected"):
                out.append(Interval(low, key, kind == "last_affected", low_text, text))
                open_ = False
            elif open_ and kind == "limit":  # versions at or past a limit are not affected
                out.append(Interval(low, key, False, low_text, text, limit=True))
                open_ = False
        if open_:
            out.append(Interval(low, None, False, low_text, None))
    return tuple(out)


def parse_record(record: object) -> Record | None:
    """The npm part of one OSV record, or None when it has none or cannot be used."""
    if not isinstance(record, Mapping) or record.get("withdrawn"):  # withdrawn: dropped
        return None
    ident = record.get("id")
    if not isinstance(ident, str) or not ident or len(ident) > 100:
        return None
    affected: list[tuple[str, tuple[Interval, ...], frozenset[str]]] = []
    for entry in record.get("affected") or ():
        if not isinstance(entry, Mapping):
            continue
        package = entry.get("package")
        if not isinstance(package, Mapping) or package.get("ecosystem") != "npm":
            continue  # only npm's `affected[]` entries count
        name = package.get("name")
        if not isinstance(name, str) or not name or len(name) > 214:
            continue
        versions = entry.get("versions")
        explicit = frozenset(v.strip() for v in versions if isinstance(v, str)) if isinstance(
            versions, list) else frozenset()
        intervals = _intervals(entry.get("ranges"))
        if intervals or explicit:
            affected.append((name, intervals, explicit))
    if not affected:
        return None
    raw_aliases = record.get("aliases")
    aliases = tuple(a for a in raw_aliases if isinstance(a, str))[:32] if isinstance(
        raw_aliases, list) else ()
    malware = ident.startswith("MAL-") or any(a.startswith("MAL-") for a in aliases)
    # Severity: the highest of the CVSS v3/v4 vectors, scored by the `cvss` library; with no
    # usable vector, the record's own label (`database_specific.severity`, GHSA's LOW,
    # MODERATE, HIGH, CRITICAL); otherwise unknown, which no severity threshold reaches.
    severity, score, vector = _cvss(record.get("severity"))
    if severity == "unknown":
        severity = _label(record)
    if malware:
        severity = "critical"
    summary = _clean(record.get("summary")) or _clean(record.get("details"))
    advisory = Advisory(ident, aliases, summary, severity, malware, _url(record),
                        _cwe(record), score, vector)
    return Record(advisory, tuple(affected))
