"""OSV fixture records written by the tests: one builder per shape the advisory gate reads.

Each builder returns a plain OSV document (what osv.dev's npm export holds, one per file);
`write_zip` and `write_directory` lay a list of them out as the export or as a directory of
JSON files. Scores are real vectors, so the `cvss` library does the scoring as in production.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

__all__ = ["CVSS3_HIGH", "CVSS3_MEDIUM", "CVSS4_CRITICAL", "fixture_records", "malware",
           "record", "semver_range", "write_directory", "write_zip", "zip_bytes"]

CVSS3_HIGH = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N"  # 7.5
CVSS3_MEDIUM = "CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:U/C:L/I:L/A:N"  # 4.6
CVSS4_CRITICAL = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"  # 9.3


def semver_range(*events: tuple[str, str], kind: str = "SEMVER") -> dict[str, Any]:
    return {"type": kind, "events": [{event: version} for event, version in events]}


def record(ident: str, name: str, *, ranges: Iterable[Mapping[str, Any]] = (),
           versions: Iterable[str] = (), summary: str | None = None,
           vectors: Mapping[str, str] | None = None, label: str | None = None,
           aliases: Iterable[str] = (), withdrawn: str | None = None,
           ecosystem: str = "npm", cwe: Iterable[str] = ()) -> dict[str, Any]:
    """One OSV record affecting `name`; `vectors` maps CVSS_V3 / CVSS_V4 to a vector."""
    document: dict[str, Any] = {
        "schema_version": "1.6.0",
        "id": ident,
        "modified": "2026-11-01T00:00:00Z",
        "published": "2026-10-01T00:00:00Z",
        "aliases": list(aliases),
        "summary": summary if summary is not None else f"{ident} in {name}",
        "details": "Long details that the index does not keep.",
        "affected": [{
            "package": {"ecosystem": ecosystem, "name": name},
            "ranges": list(ranges),
            "versions": list(versions),
        }],
        "references": [{"type": "ADVISORY", "url": f"https://example.com/advisories/{ident}"}],
        "database_specific": {"cwe_ids": list(cwe)},
    }
    if vectors:
        document["severity"] = [{"type": kind, "score": vector}
                                for kind, vector in vectors.items()]
    if label is not None:
        document["database_specific"]["severity"] = label
    if withdrawn is not None:
        document["withdrawn"] = withdrawn
    return document


def malware(ident: str, name: str, versions: Iterable[str] = ()) -> dict[str, Any]:
    """A `MAL-` record: every version when `versions` is empty, else those listed."""
    listed = list(versions)
    ranges = [] if listed else [semver_range(("introduced", "0"))]
    return record(ident, name, ranges=ranges, versions=listed,
                  summary=f"Malicious code in {name} (npm)")


def fixture_records() -> list[dict[str, Any]]:
    """The shapes the gate must read, one package each (names are `adv-*` fixtures)."""
    return [
        malware("MAL-2026-1001", "adv-evil"),
        malware("MAL-2026-1002", "@adv/typo", ["2.0.1"]),
        record("GHSA-v3hi-0000-0001", "adv-high", summary="Prototype pollution in adv-high",
               ranges=[semver_range(("introduced", "0"), ("fixed", "1.2.0"))],
               vectors={"CVSS_V3": CVSS3_HIGH}, label="MODERATE", cwe=["CWE-1321"],
               aliases=["CVE-2026-0001"]),
        record("GHSA-v4cr-0000-0002", "adv-crit", summary="Remote code execution in adv-crit",
               ranges=[semver_range(("introduced", "2.0.0"), ("last_affected", "2.3.1"))],
               vectors={"CVSS_V4": CVSS4_CRITICAL}),
        record("GHSA-labl-0000-0003", "adv-moderate", summary="Regular expression DoS",
               ranges=[semver_range(("introduced", "1.0.0"), ("fixed", "1.0.5"),
                                    ("introduced", "2.0.0-0"), ("fixed", "2.1.0"))],
               label="MODERATE"),
        record("GHSA-list-0000-0004", "adv-listed", summary="Listed versions only",
               versions=["3.0.0", "3.0.1"], label="HIGH"),
        record("GHSA-gone-0000-0005", "adv-withdrawn", summary="Withdrawn advisory",
               ranges=[semver_range(("introduced", "0"))], label="CRITICAL",
               withdrawn="2026-10-02T00:00:00Z"),
        record("GHSA-scop-0000-0006", "@adv/scoped", summary="Path traversal in @adv/scoped",
               ranges=[semver_range(("introduced", "1.0.0"), ("fixed", "1.4.0"))],
               vectors={"CVSS_V3": CVSS3_HIGH}),
        record("PYSEC-2026-7", "adv-high", ecosystem="PyPI", label="CRITICAL",
               ranges=[semver_range(("introduced", "0"))]),
    ]


def _bytes(document: Mapping[str, Any]) -> bytes:
    return orjson.dumps(document)


def zip_bytes(records: Iterable[Mapping[str, Any]]) -> bytes:
    """The export as the bytes of a zip, one `<id>.json` member per record."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for document in records:
            archive.writestr(f"{document['id']}.json", _bytes(document))
    return buffer.getvalue()


def write_zip(path: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    path.write_bytes(zip_bytes(records))
    return path


def write_directory(root: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for document in records:
        (root / f"{document['id']}.json").write_bytes(_bytes(document))
    return root
