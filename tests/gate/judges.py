"""A release judge for the gate's unit tests: no network (public on a dead port), a clock and
a packument given, the facts in memory unless given."""

from __future__ import annotations

from datetime import datetime

from mirrorgate.gate import Gated
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.rules import LiveRules, Rules
from mirrorgate.upstream.client import Upstream

BOUND = 1 << 20
"""The byte bound a baseline is read to (`previous_max_bytes`)."""


def release_judge(rules: Rules | LiveRules, now: datetime, *, facts: KeptFacts | None = None,
                  packument: Gated | None = None) -> ReleaseJudge:
    metrics = Metrics()
    public = Upstream("public", "http://127.0.0.1:9/", timeout=1.0, max_metadata_bytes=BOUND,
                      metrics=metrics)

    async def fill(_name: PackageName) -> Gated | None:
        return packument
    return ReleaseJudge(rules=rules, public=public, metrics=metrics, packument=fill,
                        now=lambda: now, facts=facts if facts is not None else KeptFacts(),
                        previous_max_bytes=BOUND, timeout=1.0)
