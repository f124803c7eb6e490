"""The proxy's parts for `prewarm` and `audit`: its gate (with the store's waivers), its queue,
and the worker side.

The gate is `check`'s (`verdicts.GateVerdicts`: the proxy's own fill, rules and upstream
clients); the worker side (a worker run here, the mirror target) is handed in by the
composition root as a `prewarm.Mirroring`, so no command imports the worker. A setting that
cannot be honoured is a `PartsError` (exit 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.commands.report import Report
from mirrorgate.commands.verdicts import GateVerdicts
from mirrorgate.config import Settings, StoreSettings
from mirrorgate.errors import MirrorgateError
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.kept.waivers import held_waivers
from mirrorgate.gate.packuments.fill import PackumentSource
from mirrorgate.mirror import MirrorQueue
from mirrorgate.rules import Rules, RulesError, load_rules
from mirrorgate.store import StoreSetupError, StoreUnavailableError, read_store
from mirrorgate.upstream.registry import PrivateRegistry

if TYPE_CHECKING:  # named in signatures only
    from mirrorgate.commands.prewarm import Mirroring

__all__ = ["MirroringFactory", "Parts", "PartsError", "as_the_fleet", "open_command_queue",
           "open_parts"]

MirroringFactory = Callable[[Settings, GateVerdicts], "Mirroring"]
"""Builds the worker side for a command from its settings and gate (`process.py` has it)."""


class PartsError(MirrorgateError):
    """A setting the command cannot honour; the text says which and what to do."""


@dataclass(frozen=True)
class Parts:
    settings: Settings
    gate: GateVerdicts
    make_mirroring: MirroringFactory | None = None

    @property
    def source(self) -> PackumentSource:
        return self.gate.source

    @property
    def private(self) -> PrivateRegistry:
        return self.gate.source.private

    def mirroring(self) -> Mirroring:
        """The worker side, as `mirrorgate serve` builds its own."""
        if self.make_mirroring is None:
            raise PartsError("this command was given no worker side to mirror with")
        return self.make_mirroring(self.settings, self.gate)


async def as_the_fleet(settings: StoreSettings, rules: Rules) -> tuple[Rules, KeptFacts]:
    """`rules` with the state store's waivers in force (`mirrorgate allow`), and the store's
    facts in memory (the withdrawals, first-party names and release verdicts the proxies
    learned), so a command judges a version as the proxy beside it does. Read once and never
    written: what the command learns stays in its memory. A store that does not answer adds
    nothing, and says so on standard error (the rules file and the upstreams still decide)."""
    facts = KeptFacts()
    try:
        await read_store(settings, facts.read)
    except (StoreUnavailableError, StoreSetupError, ImportError) as error:
        print(f"mirrorgate: warning: the state store's waivers and facts are not applied: "
              f"{error}", file=sys.stderr)
        return rules, KeptFacts()
    waivers = held_waivers(facts, datetime.now(UTC))
    if waivers:
        rules = dataclasses.replace(rules, exceptions=rules.exceptions + tuple(
            waiver.exception() for waiver in waivers))
    return rules, facts


@contextlib.asynccontextmanager
async def open_parts(settings: Settings, report: Report | None = None,
                     mirroring: MirroringFactory | None = None) -> AsyncIterator[Parts]:
    try:
        rules = load_rules(settings.rules_file, settings.malware_feed)
    except RulesError as error:
        raise PartsError(f"MIRRORGATE_RULES_FILE ({settings.rules_file}): {error}") from None
    gate = await GateVerdicts.open(settings.upstreams, settings.gate,
                                   *await as_the_fleet(settings.store, rules))
    try:
        if await gate.load_advisories() == "failed" and report is not None:
            report.note("the advisory index could not be loaded; the rules' [advisories] "
                        "unavailable setting decides, as in the proxy")
        yield Parts(settings, gate, mirroring)
    finally:
        await gate.close()


@contextlib.asynccontextmanager
async def open_command_queue(settings: Settings) -> AsyncIterator[MirrorQueue]:
    """The configured queue (`backends.open_queue`, which signs with the job key), flushed
    and closed on exit: a network backend sends in the background."""
    try:
        queue = await open_queue(settings.queue)
    except QueueUnavailableError as error:
        raise PartsError(str(error)) from None
    try:
        yield queue
    finally:
        await queue.close()
