"""The README stays true to the code: every variable, metric and log event is documented.

An operator reads the README to configure mirrorgate, to write alerts and to match log lines,
so a variable, a metric or an event name the code has and the README lacks is a defect.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorgate.config import VARIABLES
from mirrorgate.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LOGGED = re.compile(r"log\.(?:debug|info|warning|error|critical|exception)\(\s*\"([a-z_]+)\"")


def logged_events() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "mirrorgate").rglob("*.py"):
        found.update(LOGGED.findall(path.read_text(encoding="utf-8")))
    return found


@pytest.mark.parametrize("name", [variable.name for variable in VARIABLES])
def test_every_variable_is_in_the_readme(name: str) -> None:
    assert f"`{name}`" in README


@pytest.mark.parametrize("event", sorted(logged_events()))
def test_every_log_event_is_in_the_readme(event: str) -> None:
    assert f"`{event}`" in README


def test_every_metric_is_in_the_readme() -> None:
    names = {metric.name for metric in Metrics().registry.collect()}
    names |= {"mirrorgate_queue_depth", "mirrorgate_jobs_dropped", "mirrorgate_enqueue_failures",
              "mirrorgate_jobs_sent", "mirrorgate_queue_ack_failures",
              "mirrorgate_worker_heartbeat_age_seconds", "mirrorgate_advisory_records",
              "mirrorgate_advisory_age_seconds"}
    missing = sorted(name for name in names if name not in README)
    assert missing == []
