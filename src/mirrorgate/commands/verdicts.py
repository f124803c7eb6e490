"""What the gate says today about a package's versions: run here, or asked of a running proxy.

Both sources answer a `Verdicts` per package and neither decides anything itself, so the
operator commands judge exactly as the proxy does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import urljoin

import aiohttp
import orjson

from mirrorgate.config import GateSettings, Secret, UpstreamSettings
from mirrorgate.errors import MirrorgateError
from mirrorgate.gate import Denial
from mirrorgate.gate.assembled import Gate
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.verdicts.findings import UNSETTLED
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.rules import Rules
from mirrorgate.upstream.client import UpstreamError
from mirrorgate.upstream.clients import Upstreams
from mirrorgate.upstream.registry import open_registry

__all__ = ["GateVerdicts", "ProxyVerdicts", "VerdictSource", "Verdicts",
           "VerdictsError"]


class VerdictsError(MirrorgateError):
    """A package that could not be judged: an upstream (or the proxy) failed for it."""


@dataclass(frozen=True, slots=True)
class Verdicts:
    """One package as the gate serves it: `admitted` versions (installable), `denied` ones with
    their rule and reason, `known` False when no registry has the package. A version in
    neither map is one the registries do not have (unpublished, or never existed)."""

    name: str
    known: bool
    admitted: tuple[str, ...] = ()
    denied: dict[str, Denial] = field(default_factory=dict)
    would_deny: dict[str, Denial] = field(default_factory=dict)
    """Admitted versions a report-mode rule would deny (the first such rule's word)."""
    excepted: dict[str, str] = field(default_factory=dict)
    """Admitted versions an exception let through, with the exception described."""


class VerdictSource(Protocol):
    async def verdicts(self, name: PackageName, wanted: Collection[str]) -> Verdicts:
        """The verdicts for `name`; `wanted` are the versions the caller cares about (the
        proxy is asked about those alone). Raises `VerdictsError`."""
        ...

    async def close(self) -> None: ...


class GateVerdicts:
    """The proxy's gate, run here: `await GateVerdicts.open(upstreams, gate, rules, facts)`.

    It is the proxy's own `gate.Gate` (both upstreams, the merge, ownership, the rules with
    their advisory index, signatures and takeover history, the release verdicts), with the
    settings the proxy reads and the state store's facts as the proxies left them
    (`parts.as_the_fleet`); nothing is written to the store or remembered on disk.
    """

    def __init__(self, upstreams: UpstreamSettings, gate: GateSettings, rules: Rules,
                 facts: KeptFacts | None = None) -> None:
        self.rules = rules
        self.metrics = Metrics()
        self.upstreams = Upstreams.from_settings(upstreams, self.metrics)
        # the gate the proxy runs, on a memory of the fleet's facts that is never written
        # back: a check never changes the proxy's first-party names, nor its state store
        self.gate = Gate(settings=gate, public=self.upstreams.public,
                         private=open_registry(upstreams.private_upstream,
                                               self.upstreams.private),
                         rules=rules, metrics=self.metrics, facts=facts)
        self.source = self.gate.source

    @classmethod
    async def open(cls, upstreams: UpstreamSettings, gate: GateSettings, rules: Rules,
                   facts: KeptFacts | None = None) -> GateVerdicts:
        self = cls(upstreams, gate, rules, facts)
        await self.upstreams.start()
        return self

    async def load_advisories(self) -> str | None:
        """Load the advisory index once, as the proxy does at start; the outcome ("loaded",
        "failed"...) or None when the rules use no advisories."""
        if self.rules.advisories is None:
            return None
        return await self.rules.advisories.feed.refresh()

    async def verdicts(self, name: PackageName, wanted: Collection[str]) -> Verdicts:
        try:
            gated = await self.gate.gated(name)
        except UpstreamError as error:
            raise VerdictsError(str(error)) from None
        if gated is None:
            return Verdicts(name.full, known=False)
        denied = {version: record.denial
                  for version, record in gated.versions.items() if record.denial is not None}
        would = {version: record.reported[0]
                 for version, record in gated.versions.items() if record.reported}
        excepted = {version: "; ".join(record.excepted)
                    for version, record in gated.versions.items() if record.excepted}
        for version in wanted:  # what only the bytes tell: read and judged as a pull would
            record = gated.versions.get(version)
            if record is None or record.denial is not None:
                continue
            try:
                verdict = await self.gate.release.verdict_for(name, version,
                                                              record.integrity())
            except UpstreamError as error:
                raise VerdictsError(str(error)) from None
            if isinstance(verdict, str):
                denied[version] = Denial(UNSETTLED, verdict)
            elif verdict is not None and verdict.in_force(datetime.now(UTC)):
                assert verdict.rule is not None
                denied[version] = Denial(verdict.rule, verdict.reason or "refused",
                                         until=verdict.until)
            elif verdict is not None and verdict.reported:
                would.setdefault(version, Denial(*verdict.reported[0]))
        admitted = tuple(version for version in gated.survivors if version not in denied)
        return Verdicts(name.full, True, admitted, denied, would, excepted)

    async def close(self) -> None:
        await self.gate.close()
        await self.upstreams.close()


class ProxyVerdicts:
    """A running mirrorgate at `url` (its root, or its `/npm/` registry URL), asked with the
    client token when one is set (`MIRRORGATE_PROXY_TOKEN`), so a laptop needs no upstream
    credentials. Its packuments are already gated: a version it lists is admitted; for one it
    does not, the version document's 403 carries the rule and the reason, and a 404 says the
    registries do not have it."""

    def __init__(self, url: str, *, token: Secret | None, timeout: float,
                 max_bytes: int) -> None:
        base = url if url.endswith("/") else url + "/"
        self.registry = base if base.endswith("/npm/") else urljoin(base, "npm/")
        self.max_bytes = max_bytes
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token.reveal()}"
        self.session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=timeout))

    async def _get(self, path: str) -> tuple[int, dict[str, object] | None]:
        url = self.registry + path
        try:
            async with self.session.get(url, allow_redirects=False) as response:
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise VerdictsError(f"mirrorgate's answer for {path} is larger than "
                                            f"{self.max_bytes} bytes")
                    chunks.append(chunk)
                body, status = b"".join(chunks), response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise VerdictsError(f"mirrorgate at {self.registry} cannot be reached: "
                                f"{error or type(error).__name__}") from None
        try:
            document = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            document = None
        return status, document if isinstance(document, dict) else None

    async def verdicts(self, name: PackageName, wanted: Collection[str]) -> Verdicts:
        status, packument = await self._get(name.url_path())
        if status == 404:
            return Verdicts(name.full, known=False)
        if status != 200 or packument is None:
            raise VerdictsError(_failure(status, packument, name.full))
        versions = packument.get("versions")
        admitted = tuple(versions) if isinstance(versions, dict) else ()
        if not isinstance(versions, dict):
            raise VerdictsError(f"mirrorgate's packument for {name.full} has no versions map")
        denied: dict[str, Denial] = {}
        # what the packument does not list: ask each version document for the 403's reason
        missing = [version for version in wanted if version not in admitted]
        answers = await asyncio.gather(*(self._get(f"{name.url_path()}/{version}")
                                         for version in missing))
        for version, (code, body) in zip(missing, answers, strict=True):
            if code == 403 and body is not None and isinstance(body.get("rule"), str):
                denied[version] = Denial(str(body["rule"]), str(body.get("reason", "")))
            elif code not in (200, 404):
                raise VerdictsError(_failure(code, body, f"{name.full}@{version}"))
        return Verdicts(name.full, True, admitted, denied)

    async def close(self) -> None:
        await self.session.close()


def _failure(status: int, body: dict[str, object] | None, what: str) -> str:
    said = body.get("error") if body is not None else None
    detail = f": {said}" if isinstance(said, str) else ""
    return f"mirrorgate answered {status} for {what}{detail}"
