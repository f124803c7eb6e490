"""Shared test configuration: the real servers the suites use are fixtures in tests/servers/.

A server that cannot be started is a skip on a laptop and a failure in CI (CI=1), except the
Pub/Sub emulator on a machine that does not have it (it cannot be installed from the registries
these machines reach): those tests are skipped, and under CI the run's last lines say how many
and why, so a skip cannot pass unseen.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Generator

import pytest

# Nothing in the tests reaches the internet: a mirrorgate started with this process's
# environment (a command run with `{**os.environ}`) gets the known-malware feed off, as every
# harness that builds an environment of its own gives it (tests.servers.processes.OFFLINE).
os.environ.setdefault("MIRRORGATE_MALWARE_FEED", "off")

pytest_plugins = [
    "tests.servers.fixtures",
    "tests.servers.sqs_server",
    "tests.servers.pubsub_server",
    "tests.servers.otlp",
    "tests.servers.webhook",
    "tests.servers.postgres_server",
]


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped test or module gave, without pytest's `Skipped: ` prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


# wrapper + tryfirst: the outermost wrapper, so these lines come after pytest's own short
# summary, just above the final counts
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Generator[None]:
    yield
    if not os.environ.get("CI"):
        return
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons = collections.Counter(skip_reason(report) for report in skipped)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped under CI", yellow=True)
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count} skipped: {reason}", yellow=True)
