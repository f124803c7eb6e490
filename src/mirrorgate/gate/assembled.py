"""The gate of one process, assembled once: packuments (source and cache), first-party names,
withdrawals, the registry's keys, the release verdicts and the answers they make to each
request (`admission`), built by the composition root (`process`, a command's parts, a test's
rig) and handed to the proxy, the worker and the commands, which never assemble these parts
themselves. docs/architecture.md#the-gate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from mirrorgate import tracing
from mirrorgate.config import GateSettings
from mirrorgate.gate.admission import Admissions, ScanFindings
from mirrorgate.gate.cache import Cached, PackumentCache
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.kept.firstparty import FirstPartyNames
from mirrorgate.gate.kept.withdrawals import WithdrawnVersions
from mirrorgate.gate.packuments.entry import PackumentEntry
from mirrorgate.gate.packuments.fill import PackumentSource
from mirrorgate.gate.packuments.lazyhistory import LazyHistory
from mirrorgate.gate.packuments.service import Packuments
from mirrorgate.gate.records import Gated
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.metrics import Metrics, Tally
from mirrorgate.npm.names import PackageName
from mirrorgate.rules import LiveRules, Rules
from mirrorgate.store import FIRST_PARTY, WITHDRAWN
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["DROPPED_ONE_BY_ONE", "Gate"]

DROPPED_ONE_BY_ONE = 64
"""Facts changed at once past which every gated entry is dropped rather than each name's
(the load, a replica catching up after an outage): a name's one-version entries are found
by a scan of their cache."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Gate:
    """Everything that decides what is admitted, one of each per process. `release` reads the
    packuments through `gated` and drops a refused version's entry through `forget`: the loop
    between the verdicts and the fill closes here, not in an application."""

    def __init__(self, *, settings: GateSettings, public: Upstream, private: PrivateRegistry,
                 rules: Rules | LiveRules, metrics: Metrics, facts: KeptFacts | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = _utcnow, pins: int = 0) -> None:
        self.settings = settings
        self.public = public
        self.private = private
        self.rules = rules
        self.metrics = metrics
        self.now = now
        self.facts = facts if facts is not None else KeptFacts()
        self.keys = RegistryKeys(public, clock=clock, metrics=metrics)
        self.release = ReleaseJudge(
            rules=rules, public=public, metrics=metrics, packument=self.gated, now=now,
            facts=self.facts, previous_max_bytes=settings.release_previous_max_bytes,
            timeout=settings.release_timeout, forget=self.forget, one_version=self.one_version,
            history=self.history)
        self._cache_results: dict[str, Tally] = {}  # a hit per warm request: `Tally`
        # chosen once: with tracing off a cache lookup costs exactly what it did
        counted = self._count_cache_traced if tracing.enabled() else self._count_cache
        self.packuments = Packuments(
            PackumentSource(
                private=private, public=public, rules=rules, metrics=metrics, now=now,
                keys=self.keys, first_party=FirstPartyNames(self.facts),
                withdrawals=WithdrawnVersions(self.facts),
                refused=self.release.refused_versions),
            PackumentCache(ttl=settings.cache_ttl, max_entries=settings.cache_max_entries,
                           max_bytes=settings.cache_max_bytes, clock=clock, on_result=counted),
            clock, pins=pins)
        self.facts.watchers.append(self._facts_changed)
        self.findings = ScanFindings()
        """What reading a version's tarball refused, which its next pull is refused by."""
        self.admissions = Admissions(self.packuments, self.release, metrics,
                                     contact=settings.operator_contact, findings=self.findings)
        """The answer to each request kind: a packument's document, a tarball's admission."""

    @property
    def source(self) -> PackumentSource:
        return self.packuments.source

    @property
    def withdrawals(self) -> WithdrawnVersions:
        return self.packuments.source.withdrawals

    @property
    def first_party(self) -> FirstPartyNames:
        return self.packuments.source.first_party

    async def entry(self, name: PackageName) -> Cached[PackumentEntry]:
        """The cached entry of `name`, filled when missing or stale (`Packuments.entry`)."""
        return await self.packuments.entry(name)

    async def gated(self, name: PackageName) -> Gated | None:
        return (await self.packuments.entry(name)).value.gated

    async def one_version(self, name: PackageName, version: str) -> Gated | None:
        """`name@version` judged alone unless its packument is at hand
        (`Packuments.for_tarball`)."""
        return await self.packuments.for_tarball(name, version)

    async def history(self, name: PackageName) -> LazyHistory | None:
        """`name`'s releases gated one at a time for the baseline walk
        (`PackumentSource.history`)."""
        return await self.packuments.source.history(name)

    def forget(self, name: PackageName) -> None:
        """Drop `name`'s entry: the next read gates it again (a refusal, a write)."""
        self.packuments.forget(name)

    def _facts_changed(self, kind: str, keys: Sequence[str], here: bool) -> None:
        """A withdrawal or a first-party name learned or forgotten, here or by another process
        of the fleet: every entry gated without it goes (the packument's, the one-version
        entries a tarball is admitted by, fresh or kept for stale-if-error, and the records
        pinned for the worker), so each path judges by it at its next read
        (docs/state-store.md#what-the-fleet-guarantees). Waivers change the rules'
        generation, and refusals drop their names in `release`: both reach entries there."""
        if kind not in (WITHDRAWN, FIRST_PARTY):
            return
        if len(keys) > DROPPED_ONE_BY_ONE:
            self.packuments.clear()
            return
        for key in keys:
            if kind == WITHDRAWN:
                name, _, version = key.rpartition("@")
                self.packuments.drop(name, version, here=here)
            else:
                self.packuments.drop(key, here=here)

    def _count_cache(self, result: str) -> None:
        counter = self._cache_results.get(result)
        if counter is None:
            counter = self._cache_results[result] = self.metrics.tally(
                self.metrics.cache.labels(result))
        counter.inc()

    def _count_cache_traced(self, result: str) -> None:
        self._count_cache(result)
        tracing.annotate({"mirrorgate.cache": result})

    async def close(self) -> None:
        await self.keys.close()
