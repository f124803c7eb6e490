"""The operator's waivers (`mirrorgate allow`) in force: read from the state store's facts in
memory and handed to the rules in force, where they act as `[[exception]]` entries do; and
the bytes a new one names, as the gate lists the version.

Every process of a fleet follows the store (`gate.kept.facts`), so a waiver granted or revoked on
one machine is in force on every replica within a poll (docs/serving.md#exceptions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import structlog

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.records import Gated
from mirrorgate.npm.names import PackageName
from mirrorgate.rules import LiveRules
from mirrorgate.store.waivers import UNBOUND, WAIVER, Waiver, WaiverError

__all__ = ["follow_waivers", "held_waivers", "listed_bytes"]

log = structlog.get_logger("mirrorgate.rules")


def held_waivers(facts: KeptFacts, now: datetime | None = None) -> list[Waiver]:
    """The waivers in memory that are still in force at `now` (all of them when None),
    soonest to end first."""
    found = [waiver for key in facts.keys(WAIVER)
             if (value := facts.get(WAIVER, key)) is not None
             and (waiver := Waiver.from_fact(key, value)) is not None
             and (now is None or waiver.active(now))]
    return sorted(found, key=lambda waiver: (waiver.until, waiver.subject))


def follow_waivers(facts: KeptFacts, rules: LiveRules) -> None:
    """Keep `rules` in step with the waivers in `facts`: now, and whenever the store's feed
    brings a change (the load at start-up included)."""

    def changed(kind: str) -> None:
        if kind != WAIVER:
            return
        # the ended ones are left out: they lift nothing (`RuleException.lifts` reads the
        # time), and an ended one kept would make every set look new
        waivers = held_waivers(facts, datetime.now(UTC))
        before = rules.generation
        rules.use_waivers(tuple(waiver.exception() for waiver in waivers))
        if rules.generation != before:
            log.info("waivers_in_force", waivers=[w.subject for w in waivers],
                     generation=rules.generation)
            unbound = [waiver.subject for waiver in waivers if not waiver.bound]
            if unbound:
                log.warning("waivers_unbound", waivers=unbound, consequence=UNBOUND)

    facts.listeners.append(changed)
    changed(WAIVER)


async def listed_bytes(load: Callable[[PackageName], Awaitable[Gated | None]],
                       name: PackageName, version: str) -> str:
    """The bytes the gate lists for `name@version` now (`VersionRecord.integrity`, a denied
    version's too: what is waived is usually refused), which a waiver granted for it names;
    WaiverError when it lists no such version or no digest for it. `load` may raise what
    an upstream's failure raises."""
    gated = await load(name)
    record = gated.versions.get(version) if gated is not None else None
    if record is None:
        raise WaiverError(f"no registry mirrorgate reads lists {name.full}@{version}: a waiver "
                          "names the version it admits exactly, build metadata included")
    integrity = record.integrity()
    if not integrity:
        raise WaiverError(f"{name.full}@{version} is listed with no digest mirrorgate can "
                          "verify, so no bytes can be named; give --integrity SRI")
    return integrity
