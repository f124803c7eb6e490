"""The alert rules that ship with mirrorgate, checked by Prometheus's own promtool.

`promtool check rules` on deploy/prometheus/mirrorgate-alerts.yml and on the PrometheusRule's
groups; `promtool test rules` on tests/deploy/alerts_test.yml, where each alert has series that
fire it and series that must not. Beside them: the two files say the same, every alert has a
runbook section in docs/operations.md and a firing case, and the forged-job alert names exactly
the retire reasons the worker calls forged. That every metric and label the rules name exists
on a running mirrorgate's /metrics is tests/e2e/test_metrics_named.py's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from mirrorgate.worker.job import FORGED_JOB_REASONS
from tests.servers.availability import unavailable
from tests.test_docs import anchors

ROOT = Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus" / "mirrorgate-alerts.yml"
OPERATOR = ROOT / "deploy" / "prometheus" / "prometheusrule.yaml"
UNIT_TESTS = Path(__file__).parent / "alerts_test.yml"
RUNBOOK = ROOT / "docs" / "operations.md"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool is not installed (Debian's prometheus package carries it; "
                    "scripts/test installs it as root)")
    return found


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, check=False, stdin=subprocess.DEVNULL)


def alerts() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules_file_and_the_prometheus_rule(tmp_path: Path) -> None:
    operator = yaml.safe_load(OPERATOR.read_text(encoding="utf-8"))
    extracted = tmp_path / "operator-groups.yml"
    extracted.write_text(yaml.safe_dump({"groups": operator["spec"]["groups"]}),
                         encoding="utf-8")

    for path in (RULES, extracted):
        checked = run("check", "rules", path)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_promtool_unit_tests_fire_each_alert_and_hold_it_back_where_they_must() -> None:
    done = run("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_broken_rule_fails_the_unit_tests(tmp_path: Path) -> None:
    """The control: promtool's tests can fail. A heartbeat threshold moved from 120 s to an
    hour leaves a stale worker unreported, and the unit tests say so."""
    (tmp_path / "deploy" / "prometheus").mkdir(parents=True)
    (tmp_path / "tests" / "deploy").mkdir(parents=True)
    broken = RULES.read_text(encoding="utf-8").replace(
        "mirrorgate_worker_heartbeat_age_seconds > 120",
        "mirrorgate_worker_heartbeat_age_seconds > 3600")
    (tmp_path / "deploy" / "prometheus" / RULES.name).write_text(broken, encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / "tests" / "deploy" / UNIT_TESTS.name)

    done = run("test", "rules", UNIT_TESTS.name, cwd=tmp_path / "tests" / "deploy")

    assert done.returncode != 0
    assert "MirrorgateWorkerHeartbeatStale" in done.stdout + done.stderr


def test_the_prometheus_rule_carries_exactly_the_rules_file_s_groups() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    operator = yaml.safe_load(OPERATOR.read_text(encoding="utf-8"))

    assert operator["apiVersion"] == "monitoring.coreos.com/v1"
    assert operator["kind"] == "PrometheusRule"
    assert operator["spec"]["groups"] == rules["groups"]


def test_every_alert_has_a_severity_a_runbook_section_and_a_firing_case() -> None:
    sections = anchors(RUNBOOK.read_text(encoding="utf-8"))
    cases = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]
    fired = {check["alertname"] for case in cases for check in case["alert_rule_test"]
             if check["exp_alerts"]}

    for alert in alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning"), name
        runbook = alert["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in sections, f"{name}: no section {runbook}"
        assert name in fired, f"{name}: no promtool case fires it"


def test_the_forged_job_alert_names_exactly_the_reasons_the_worker_calls_forged() -> None:
    [forged] = [alert for alert in alerts() if alert["alert"] == "MirrorgateForgedJob"]
    matcher = forged["expr"].split('reason=~"', 1)[1].split('"', 1)[0]

    assert matcher.split("|") == list(FORGED_JOB_REASONS)
