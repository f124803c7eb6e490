"""Reading mirrorgate's metrics in tests: one lookup that fails loudly on a name that is wrong.

A labelled counter has no sample before its first increment, so "absent" has to read as 0; but
then a renamed metric, label or outcome would read as 0 too and `metric(...) == 0` could never
fail. `metric_value` therefore checks every name against what `mirrorgate.metrics` declares
(`SCHEMA`, built from a fresh `Metrics`) before summing, whether the samples come from an
in-process registry or from a process's /metrics page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import get_args

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from mirrorgate.advisories.feed import LOAD_OUTCOMES
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import QueueStats
from mirrorgate.notify import OUTCOMES as NOTIFICATION_OUTCOMES
from mirrorgate.npm.paths import Route
from mirrorgate.serve.audit import AUDIT_OUTCOMES
from mirrorgate.worker.job import Outcome

__all__ = ["SCHEMA", "UnknownMetricError", "metric_value", "registry_samples", "text_samples"]

# the sample names each family type exposes (`name` + suffix)
_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
             "histogram": ("_bucket", "_count", "_sum", "_created")}

# label values that come from a closed vocabulary in the code, by (family, label); family None
# is every family with that label: a test naming another value is asking about something that
# cannot happen
_VOCABULARIES: dict[tuple[str | None, str], frozenset[str]] = {
    ("mirrorgate_jobs", "outcome"): frozenset(outcome.value for outcome in Outcome),
    ("mirrorgate_advisory_loads", "outcome"): frozenset(LOAD_OUTCOMES),
    ("mirrorgate_audit_requests", "outcome"): frozenset(AUDIT_OUTCOMES),
    ("mirrorgate_notifications", "outcome"): frozenset(NOTIFICATION_OUTCOMES),
    (None, "route"): frozenset(get_args(Route)),
}


class UnknownMetricError(AssertionError):
    """A test asked for a metric, label or label value mirrorgate does not declare."""


@dataclass(frozen=True)
class _Family:
    samples: frozenset[str]
    labels: frozenset[str]


def _schema() -> dict[str, _Family]:
    metrics = Metrics()
    # the scrape-time collectors only exist once watched; any figures will do
    metrics.watch_queue(lambda: QueueStats(depth=0), "memory")
    metrics.watch_heartbeat(lambda: 0.0)
    metrics.watch_advisories(lambda: (0, 0.0))
    metrics.watch_upstreams(lambda: [("public", "tarballs", 0)])
    metrics.watch_store(lambda: (True, 0, 0))
    schema: dict[str, _Family] = {}
    collectors = {name: collector
                  for collector, names in metrics.registry._collector_to_names.items()
                  for name in names}
    for family in metrics.registry.collect():
        # a labelled metric with no children has no sample to read its labels from, so ask the
        # prometheus object (its `_labelnames` has been there since prometheus_client 0.0.x)
        declared = getattr(collectors.get(family.name), "_labelnames", ())
        labels = set(declared) | {key for sample in family.samples for key in sample.labels}
        names = {family.name + suffix for suffix in _SUFFIXES[family.type]}
        schema.update(dict.fromkeys(names, _Family(frozenset(names), frozenset(labels))))
    return schema


SCHEMA = _schema()
"""Every sample name mirrorgate can export, with the label names its family carries."""


def _check(name: str, labels: Mapping[str, str]) -> None:
    family = SCHEMA.get(name)
    if family is None:
        raise UnknownMetricError(f"mirrorgate declares no metric {name!r}; "
                                 f"it has {sorted(SCHEMA)}")
    allowed = family.labels | ({"le"} if name.endswith("_bucket") else set())
    for key, value in labels.items():
        if key not in allowed:
            raise UnknownMetricError(f"{name} has no label {key!r}; its labels: {sorted(allowed)}")
        family_name = next((n for n, _ in _VOCABULARIES if n and name.startswith(n + "_")), None)
        vocabulary = _VOCABULARIES.get((family_name, key)) or _VOCABULARIES.get((None, key))
        if vocabulary is not None and value not in vocabulary:
            raise UnknownMetricError(f"{key}={value!r} is never set on {name}; "
                                     f"the values are {sorted(vocabulary)}")


def metric_value(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`: 0.0 when there are
    none yet, but an `UnknownMetricError` when mirrorgate could never export such a sample."""
    _check(name, labels)
    return sum((sample.value for sample in samples
                if sample.name == name
                and all(sample.labels.get(key) == value for key, value in labels.items())),
               0.0)


def registry_samples(registry: CollectorRegistry) -> list[Sample]:
    """Every sample of an in-process registry, as a scrape would show them."""
    return [sample for family in registry.collect() for sample in family.samples]


def text_samples(page: str) -> list[Sample]:
    """Every sample of a /metrics page in the Prometheus text format."""
    return [sample for family in text_string_to_metric_families(page)
            for sample in family.samples]
