"""The metrics and labels a PromQL expression names, read well enough to check them.

Not a PromQL parser: it finds every `mirrorgate_*` selector with its label matchers, and the
label names of `by (...)`/`without (...)` clauses. Prometheus itself evaluates every
expression in tests/e2e/test_metrics_named.py, so a mistake here cannot hide a broken query;
this says which family and label each one relies on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ALERTS", "DASHBOARD", "Matcher", "Query", "Selector", "alert_queries",
           "dashboard_queries", "grouping", "selectors"]

ROOT = Path(__file__).parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "mirrorgate-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "mirrorgate.json"

_NAME = re.compile(r"\bmirrorgate_[A-Za-z0-9_]+")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*\.?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def literals(self) -> list[str]:
        """The values a positive matcher names (`a|b` alternations of plain words), else []."""
        if self.op not in ("=", "=~"):
            return []
        parts = self.value.split("|") if self.op == "=~" else [self.value]
        return [part for part in parts if re.fullmatch(r"[A-Za-z0-9_.-]+", part)]


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...]


@dataclass(frozen=True)
class Query:
    """One expression and where it comes from (an alert, a dashboard panel), with the labels
    its output is read by (a legend's `{{label}}`, an annotation's `$labels.label`)."""

    origin: str
    expr: str
    shown_labels: tuple[str, ...] = ()


def selectors(expr: str) -> list[Selector]:
    found: list[Selector] = []
    for match in _NAME.finditer(expr):
        rest = expr[match.end():].lstrip()
        matchers: list[Matcher] = []
        if rest.startswith("{"):
            body = rest[1:rest.index("}")]
            for label, op, value in _MATCHER.findall(body):
                matchers.append(Matcher(label, op, value))
        found.append(Selector(match.group(0), tuple(matchers)))
    return found


def grouping(expr: str) -> set[str]:
    return {label.strip() for clause in _GROUPING.findall(expr)
            for label in clause.split(",") if label.strip()}


def alert_queries() -> list[Query]:
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    queries: list[Query] = []
    for group in document["groups"]:
        for rule in group["rules"]:
            shown = {label for text in rule.get("annotations", {}).values()
                     for label in _TEMPLATE_LABEL.findall(text)}
            queries.append(Query(f"alert {rule['alert']}", rule["expr"], tuple(sorted(shown))))
    return queries


def dashboard_queries(document: dict[str, Any] | None = None) -> list[Query]:
    if document is None:
        document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries: list[Query] = []
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            queries.append(Query(f"panel {panel['title']!r} {target['refId']}", target["expr"],
                                 tuple(_LEGEND.findall(target.get("legendFormat", "")))))
    for variable in document["templating"]["list"]:
        definition = variable.get("definition")
        if definition:
            queries.append(Query(f"variable {variable['name']}", definition))
    return queries
