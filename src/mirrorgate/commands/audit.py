"""`mirrorgate audit`: what was mirrored, checked read-only against its bytes and today's rules.

A mirrored version (one carrying the worker's mark, `npm.ownership`) is `tampered` when its
stored bytes are not those the mark says were verified, `missing_tarball` without them, and
`refused` when the proxy's gate denies it today, `withdrawn` when the public registry no longer
lists it (a takedown: the gate denies it, `public-withdrawn`); first-party versions are not
its business.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from mirrorgate.gate.packuments.fill import PackumentSource
from mirrorgate.gate.packuments.merge import PUBLIC_WITHDRAWN
from mirrorgate.integrity import (
    DigestMismatch,
    StreamVerifier,
    TooLarge,
    Unverifiable,
    parse_integrity,
)
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name, tarball_filename
from mirrorgate.npm.ownership import mirrored_mark
from mirrorgate.upstream.client import FILLS, Upstream, UpstreamError
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["FINDINGS", "NAMES_AT_ONCE", "Finding", "Result", "audit", "denial_finding",
           "search_names"]

log = structlog.get_logger("mirrorgate.audit")

NAMES_AT_ONCE = 4
"""Names audited at the same time: each reads two packuments and every mirrored tarball."""
SEARCH_PAGE = 250
"""Verdaccio's search answers at most this many objects per page."""


class Finding(enum.StrEnum):
    OK = "ok"
    TAMPERED = "tampered"
    MISSING_TARBALL = "missing_tarball"
    REFUSED = "refused"
    WITHDRAWN = "withdrawn"
    """Mirrored, and the public registry no longer has it: the proxy no longer serves it."""
    FAILED = "failed"
    """Nothing could be checked (a registry that did not answer, a name that is not one)."""


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    version: str
    finding: Finding
    detail: str = ""
    digests: tuple[str, str] | None = None
    """For `tampered`: the integrity admitted and the one the stored bytes have (SRI)."""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


async def audit(names: Iterable[str], *, source: PackumentSource, private: PrivateRegistry,
                max_tarball_bytes: int,
                progress: Callable[[str, list[Result]], None] | None = None) -> list[Result]:
    """Every mirrored version of `names` checked; one result per finding, `ok` for a clean
    version (a version both tampered and refused has two results). `progress` hears each
    name once its versions are checked."""
    results: list[Result] = []
    slots = asyncio.Semaphore(NAMES_AT_ONCE)

    async def one(name: str) -> None:
        async with slots:
            found = await _audit_name(name, source, private, max_tarball_bytes)
            results.extend(found)
            if progress is not None:
                progress(name, found)

    await asyncio.gather(*(one(name) for name in dict.fromkeys(names)))
    return results


async def _audit_name(name: str, source: PackumentSource, private: PrivateRegistry,
                      limit: int) -> list[Result]:
    try:
        package = parse_name(name)
    except InvalidNameError as error:
        return [Result(name, "", Finding.FAILED, f"not a package name: {error}")]
    try:
        entry = (await source.load(package, None)).value
    except UpstreamError as error:
        return [Result(name, "", Finding.FAILED, str(error))]
    except Exception as error:  # a packument too large to gate, a store failure: said
        return [Result(name, "", Finding.FAILED, f"{type(error).__name__}: {error}")]
    gated = entry.gated
    if gated is None:
        return []
    # the fill fell back to public alone: a name whose private side was not read is never
    # reported clean (nothing here writes or deletes, on either side)
    if not entry.private_answered and not gated.first_party:
        return [Result(name, "", Finding.FAILED, "the private registry did not answer for "
                       "this name; its mirrored versions were not checked")]
    results: list[Result] = []
    for version, record in gated.versions.items():
        if not record.private:
            continue
        mark = mirrored_mark(record.manifest(None))
        if mark is None:
            continue  # first-party: not something mirrorgate mirrored
        found: list[Result] = []
        if record.denial is not None:
            found.append(Result(name, version, denial_finding(record.denial.rule),
                                f"{record.denial.rule}: {record.denial.reason}"))
        found.extend(await _check_bytes(package, version, mark.integrity, private, limit))
        results.extend(found or [Result(name, version, Finding.OK)])
    return results


def denial_finding(rule: str) -> Finding:
    """A denied mirrored version's finding: a takedown is told apart from a rule's denial."""
    return Finding.WITHDRAWN if rule == PUBLIC_WITHDRAWN else Finding.REFUSED


async def _check_bytes(name: PackageName, version: str, integrity: str,
                       private: PrivateRegistry, limit: int) -> list[Result]:
    """The stored tarball hashed against the integrity the mark names."""
    label = (name.full, version)
    try:
        verifier = StreamVerifier(parse_integrity(integrity), expected_size=None, limit=limit)
    except Unverifiable as error:
        return [Result(*label, Finding.FAILED, f"the mark's integrity: {error}")]
    try:
        async with private.tarball(name, tarball_filename(name, version)) as body:
            if body is None:
                return [Result(*label, Finding.MISSING_TARBALL, "the version is listed; its "
                               "tarball is not there")]
            async for chunk in body.chunks:
                verifier.update(chunk)
        verifier.finish()
    except DigestMismatch as mismatch:
        log.critical("audit_tampered", security=True, package=name.full, version=version,
                     expected=mismatch.expected.sri(), actual=mismatch.actual.sri())
        return [Result(*label, Finding.TAMPERED, "the stored bytes are not the ones admitted",
                       (mismatch.expected.sri(), mismatch.actual.sri()))]
    except TooLarge as error:
        return [Result(*label, Finding.FAILED, f"the tarball is larger than "
                       f"MIRRORGATE_MAX_TARBALL_BYTES ({error.limit}); not checked")]
    except (UpstreamError, OSError, aiohttp.ClientError, TimeoutError) as error:
        return [Result(*label, Finding.FAILED, f"the tarball could not be read: {error}")]
    return []


async def search_names(registry: Upstream) -> AsyncIterator[str]:
    """Every package name a registry's search lists (Verdaccio: `/-/v1/search` with an empty
    text lists everything it stores), page by page."""
    start = 0
    while True:
        answer = await registry.get_json(f"-/v1/search?text=&size={SEARCH_PAGE}&from={start}",
                                         pool=FILLS)
        objects: Any = (answer.document or {}).get("objects")
        if not isinstance(objects, list) or not objects:
            return
        for item in objects:
            package = item.get("package") if isinstance(item, dict) else None
            if isinstance(package, dict) and isinstance(package.get("name"), str):
                yield package["name"]
        if len(objects) < SEARCH_PAGE:
            return
        start += len(objects)


FINDINGS = frozenset({Finding.TAMPERED, Finding.MISSING_TARBALL, Finding.REFUSED,
                      Finding.WITHDRAWN, Finding.FAILED})
"""Findings that make the command exit 1."""
