"""The tests' metric lookup: absent samples read as 0, but a name mirrorgate does not declare
fails, so a `metric(...) == 0` check cannot stay green after a rename."""

from __future__ import annotations

import pytest

from mirrorgate.metrics import Metrics
from tests.metric_samples import UnknownMetricError, metric_value, registry_samples, text_samples


def test_a_declared_counter_reads_zero_before_its_first_increment_then_counts() -> None:
    metrics = Metrics()
    assert metric_value(registry_samples(metrics.registry), "mirrorgate_jobs_total",
                        outcome="published") == 0
    metrics.jobs.labels("published").inc()
    metrics.jobs.labels("retried").inc(2)
    samples = registry_samples(metrics.registry)
    assert metric_value(samples, "mirrorgate_jobs_total", outcome="published") == 1
    assert metric_value(samples, "mirrorgate_jobs_total") == 3  # a label left out sums over it


def test_a_scraped_page_reads_the_same_as_the_registry() -> None:
    metrics = Metrics()
    metrics.requests.labels("tarball", "200").inc()
    samples = text_samples(metrics.render().decode())
    assert metric_value(samples, "mirrorgate_requests_total", route="tarball") == 1


@pytest.mark.parametrize(("name", "labels", "complaint"), [
    ("mirrorgate_jobs_publish_total", {}, "declares no metric 'mirrorgate_jobs_publish_total'"),
    ("mirrorgate_jobs", {}, "declares no metric 'mirrorgate_jobs'"),  # the family, not a sample
    ("mirrorgate_jobs_total", {"result": "published"}, "has no label 'result'"),
    ("mirrorgate_jobs_total", {"outcome": "publishd"}, "outcome='publishd' is never set"),
    ("mirrorgate_requests_total", {"route": "tarballs"}, "route='tarballs' is never set"),
    ("mirrorgate_tampered_total", {"outcome": "tampered"}, "has no label 'outcome'"),
])
def test_a_metric_label_or_value_that_does_not_exist_fails_instead_of_reading_zero(
    name: str, labels: dict[str, str], complaint: str,
) -> None:
    with pytest.raises(UnknownMetricError, match=complaint.replace("(", r"\(")):
        metric_value(registry_samples(Metrics().registry), name, **labels)


def test_the_scrape_time_queue_and_heartbeat_metrics_are_known() -> None:
    assert metric_value([], "mirrorgate_jobs_dropped_total", provider="sqs") == 0
    assert metric_value([], "mirrorgate_queue_depth", provider="pubsub") == 0
    assert metric_value([], "mirrorgate_worker_heartbeat_age_seconds") == 0
