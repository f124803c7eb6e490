"""The operator's waivers (`mirrorgate allow`) in force: read from the state store's facts in
memory and handed to the rules in force, where they act as `[[exception]]` entries do.

Every process of a fleet follows the store (`gate.facts`), so a waiver granted or revoked on
one machine is in force on every replica within a poll (docs/serving.md#exceptions).
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from mirrorgate.gate.facts import KeptFacts
from mirrorgate.rules import LiveRules
from mirrorgate.store.waivers import WAIVER, Waiver

__all__ = ["follow_waivers", "held_waivers"]

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

    facts.listeners.append(changed)
    changed(WAIVER)
