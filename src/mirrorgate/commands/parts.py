"""The proxy's parts for `prewarm` and `audit`: its gate, queue, worker and mirror target.

The gate is `check`'s (`verdicts.GateVerdicts`: the proxy's own fill, rules and upstream
clients); this adds what mirroring needs, built from the same settings as `mirrorgate serve`
builds them. A setting that cannot be honoured is a `PartsError` (exit 2).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.commands.report import Report
from mirrorgate.commands.verdicts import GateVerdicts
from mirrorgate.config import Settings
from mirrorgate.gate.fill import PackumentSource
from mirrorgate.healthz import Heartbeat
from mirrorgate.mirror import MirrorQueue
from mirrorgate.rules import RulesError, load_rules
from mirrorgate.upstream.registry import PrivateRegistry
from mirrorgate.worker.job import WorkerDeps
from mirrorgate.worker.target import MirrorTarget, open_target

__all__ = ["Parts", "PartsError", "open_command_queue", "open_parts"]


class PartsError(Exception):
    """A setting the command cannot honour; the text says which and what to do."""


@dataclass(frozen=True)
class Parts:
    settings: Settings
    gate: GateVerdicts

    @property
    def source(self) -> PackumentSource:
        return self.gate.source

    @property
    def private(self) -> PrivateRegistry:
        return self.gate.source.private

    def target(self) -> MirrorTarget:
        """Where the worker publishes (`MIRRORGATE_MIRROR_TARGET`)."""
        return open_target(self.settings.mirror_target, self.gate.upstreams.target,
                           max_tarball_bytes=self.settings.max_tarball_bytes)

    def worker(self, queue: MirrorQueue) -> WorkerDeps:
        """A worker's parts, as `mirrorgate serve` gives its in-process worker."""
        return WorkerDeps(settings=self.settings, queue=queue,
                          public=self.gate.upstreams.public, target=self.target(),
                          metrics=self.gate.metrics,
                          heartbeat=Heartbeat(self.settings.heartbeat_stale_after),
                          rules=self.gate.rules)


@contextlib.asynccontextmanager
async def open_parts(settings: Settings, report: Report | None = None) -> AsyncIterator[Parts]:
    try:
        rules = load_rules(settings.rules_file)
    except RulesError as error:
        raise PartsError(f"MIRRORGATE_RULES_FILE ({settings.rules_file}): {error}") from None
    gate = await GateVerdicts.open(settings, rules)
    try:
        if await gate.load_advisories() == "failed" and report is not None:
            report.note("the advisory index could not be loaded; the rules' [advisories] "
                        "unavailable setting decides, as in the proxy")
        yield Parts(settings, gate)
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
