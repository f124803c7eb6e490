"""Every Prometheus metric mirrorgate exports, declared in one place.

A `Metrics` owns its own `CollectorRegistry` (not the global one), so each process, and each
test, gets a fresh set. Label values are fixed vocabularies (routes, outcomes, rule names), never
package names or URLs, so the series count stays bounded and no client input becomes a label.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mirrorgate.events import Recent
from mirrorgate.mirror import QueueStats

__all__ = ["CONTENT_TYPE", "RELEASE_CHECK_OUTCOMES", "REQUEST_BUCKETS", "Durations", "Metrics",
           "Tally"]


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""`mirrorgate_request_seconds`' buckets: a warm hit takes tens of microseconds, a cold fill
up to seconds, a tarball's transfer longer."""
RELEASE_CHECK_OUTCOMES = ("clean", "flagged", "refused", "first-version", "unchecked",
                          "unsettled")
"""`mirrorgate_release_checks{outcome}`: each series is there at 0 from the start, so an
alert's increase() sees the first refused or unchecked release."""


class Tally:
    """One counter series counted by a C-level tick, added to the series whenever the registry
    is collected (`Metrics.tally`): for the warm path, where `Counter.inc` (a lock and two
    checks in Python) cost more than the lookups it counted. `inc` is `itertools.count`'s own
    `__next__`, so counting runs no Python frame and is atomic."""

    __slots__ = ("_folded", "_series", "_ticks", "inc")

    def __init__(self, series: Counter) -> None:
        self._series = series
        self._ticks = itertools.count(1)
        self._folded = 0
        """Ticks taken by the last fold, its own included."""
        self.inc: Callable[[], object] = self._ticks.__next__

    def fold(self) -> None:
        tick = next(self._ticks)  # this fold's own tick, not a count
        pending, self._folded = tick - 1 - self._folded, tick
        if pending:
            self._series.inc(pending)


class _Folding(Collector):
    """Registered before every metric, so a scrape (and any read of the registry) folds the
    tallies into their counters before it reads them; it yields nothing itself."""

    def __init__(self) -> None:
        self.tallies: list[Tally] = []

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        for tally in self.tallies:
            tally.fold()
        return iter(())


class Durations(Collector):
    """A histogram family observed by a list increment (`series(...)` gives the observer),
    folded into `HistogramMetricFamily` at scrape: for the warm path, where
    `Histogram.observe` (a lock, a loop over the buckets in Python) cost a tenth of a hit.
    Observed on the event loop's thread only."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets: tuple[float, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = labelnames
        self._bounds = buckets
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def series(self, *labels: str) -> Callable[[float], None]:
        """The observer of one labelled series (seconds in); its series exists from now."""
        counts, total = self._series.setdefault(labels, ([0] * (len(self._bounds) + 1), [0.0]))
        bounds = self._bounds

        def observe(seconds: float) -> None:
            counts[bisect_left(bounds, seconds)] += 1  # the first bucket with le >= seconds
            total[0] += seconds

        return observe

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation,
                                       labels=self._labelnames)
        for labels, (counts, total) in list(self._series.items()):
            cumulative = list(itertools.accumulate(counts))
            buckets = [(repr(bound), count)
                       for bound, count in zip(self._bounds, cumulative, strict=False)]
            family.add_metric(list(labels), [*buckets, ("+Inf", cumulative[-1])], total[0])
        yield family


class _QueueCollector(Collector):
    """Queue figures (depth, drops, send failures) read from the backend's `stats()` at scrape
    time, not counted here: the backend's own count is the only one."""

    def __init__(self, stats: Callable[[], QueueStats], provider: str) -> None:
        self._stats = stats
        self._provider = provider

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        labels = ["provider"]
        values = [self._provider]
        if stats.depth is not None:
            depth = GaugeMetricFamily("mirrorgate_queue_depth",
                                      "jobs held locally by the queue backend", labels=labels)
            depth.add_metric(values, stats.depth)
            yield depth
        for name, doc, value in (
            ("mirrorgate_jobs_dropped", "jobs dropped because the queue or its send buffer "
             "was full", stats.dropped),
            ("mirrorgate_enqueue_failures", "job sends the queue backend failed and retried",
             stats.send_failures),
            ("mirrorgate_jobs_sent", "jobs handed to the queue backend", stats.sent),
            ("mirrorgate_queue_ack_failures", "acks and visibility changes the queue backend "
             "could not deliver", stats.ack_failures),
        ):
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            yield family


class _HeartbeatCollector(Collector):
    def __init__(self, age: Callable[[], float | None]) -> None:
        self._age = age

    def collect(self) -> Iterator[Metric]:
        age = self._age()
        if age is not None:
            yield GaugeMetricFamily("mirrorgate_worker_heartbeat_age_seconds",
                                    "seconds since the worker's last heartbeat", value=age)


class _AdvisoryCollector(Collector):
    def __init__(self, state: Callable[[], tuple[int, float | None]]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        records, age = self._state()
        yield GaugeMetricFamily("mirrorgate_advisory_records",
                                "OSV records in the advisory index in force", value=records)
        if age is not None:
            yield GaugeMetricFamily("mirrorgate_advisory_age_seconds",
                                    "age of the advisory data in force", value=age)


class _InFlightCollector(Collector):
    def __init__(self, in_flight: Callable[[], list[tuple[str, str, int]]]) -> None:
        self._in_flight = in_flight

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("mirrorgate_upstream_in_flight", "upstream requests under "
                                   "way (waiting for or holding a connection), by upstream and "
                                   "pool", labels=["upstream", "pool"])
        for upstream, pool, count in self._in_flight():
            family.add_metric([upstream, pool], count)
        yield family


class _StoreCollector(Collector):
    def __init__(self, state: Callable[[], tuple[bool, int, int]]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        reachable, pending, kept = self._state()
        yield GaugeMetricFamily("mirrorgate_store_reachable", "1 while the state store answers "
                                "(and its facts are loaded), 0 while it does not",
                                value=int(reachable))
        yield GaugeMetricFamily("mirrorgate_store_pending_writes", "facts and verdicts learned "
                                "but not yet written to the state store", value=pending)
        yield GaugeMetricFamily("mirrorgate_store_pending_kept_writes", "of those, the ones "
                                "never dropped (withdrawals, first-party names, refusals, "
                                "waivers); at 100,000 what would add one is refused",
                                value=kept)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._folding = _Folding()
        r.register(self._folding)  # first: the registry collects in the order registered
        self.requests = Counter("mirrorgate_requests", "client requests by route and status",
                                ["route", "status"], registry=r)
        self.request_seconds = Durations(
            "mirrorgate_request_seconds", "time from a request's head to its answer in "
            "mirrorgate's handler, by route and path: `warm` (a packument answered from its "
            "rendering, before anything else runs) or `slow` (everything else; a tarball's "
            "includes its transfer)", ("route", "path"), REQUEST_BUCKETS)
        r.register(self.request_seconds)
        self.upstream_seconds = Histogram(
            "mirrorgate_upstream_seconds", "upstream call latency",
            ["upstream", "kind"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.upstream_failures = Counter("mirrorgate_upstream_failures",
                                         "failed upstream calls by upstream and reason",
                                         ["upstream", "reason"], registry=r)
        self.upstream_decoded = Counter(
            "mirrorgate_upstream_decoded", "tarball answers an upstream content-coded although "
            "identity was asked for, decoded to the stored bytes", ["upstream", "coding"],
            registry=r)
        self.handoffs = Counter(
            "mirrorgate_handoffs", "public tarballs verified by the proxy and handed to the "
            "worker beside it, by outcome: offered, not_offered (no spool, no room), taken, "
            "missed (the worker downloaded them)", ["outcome"], registry=r)
        self.private_skipped = Counter(
            "mirrorgate_private_skipped", "tarball requests sent straight to public because a "
            "fresh packument says the private upstream does not have the version", registry=r)
        self.cache = Counter("mirrorgate_cache", "packument cache lookups by result",
                             ["result"], registry=r)
        self.rule_denials = Counter("mirrorgate_rule_denials", "versions denied, by rule and "
                                    "mode (`report`: a report-mode rule's would-be denial, the "
                                    "version served)",
                                    ["rule", "mode"], registry=r)
        self.release_checks = Counter(
            "mirrorgate_release_checks", "versions read by the release signals at their first "
            "pull, by outcome: clean, flagged (a signal fired and was not in force), refused, "
            "first-version (nothing before it to compare), unchecked (the analysis could not "
            "finish), unsettled (no clean release to compare with within the bound)",
            ["outcome"], registry=r)
        for outcome in RELEASE_CHECK_OUTCOMES:
            self.release_checks.labels(outcome)
        self.release_signals = Counter(
            "mirrorgate_release_signals", "release signals that fired, by signal and what came "
            "of it: denied, reported, excepted, allowed", ["signal", "outcome"], registry=r)
        self.release_attestations = Counter(
            "mirrorgate_release_attestations", "attestations documents a release verdict "
            "fetched to compare a release's workflow with its baseline's, by outcome: read, "
            "unread (unreachable, refused, malformed)", ["outcome"], registry=r)
        self.refusals = Counter("mirrorgate_refusals",
                                "inputs refused for safety (bad names, off-origin URLs...)",
                                ["reason"], registry=r)
        self.client_tokens_reload_failures = Counter(
            "mirrorgate_client_tokens_reload_failures", "rewrites of the client tokens file "
            "that could not be used (the previous set stays in force)", registry=r)
        self.slow_clients = Counter("mirrorgate_slow_clients", "connections cut for a slow "
                                    "client: head_timeout, write_stall", ["reason"], registry=r)
        self.unkept_renderings = Counter(
            "mirrorgate_unkept_renderings", "packument renderings built for one request and "
            "not kept: a base URL (Host) that is neither MIRRORGATE_PUBLIC_URL nor one of the "
            "first few the process was asked for", registry=self.registry)
        self.rules_reload_failures = Counter(
            "mirrorgate_rules_reload_failures", "rewrites of the rules file that could not be "
            "used; the last good rules stayed in force", registry=r)
        self.shed = Counter("mirrorgate_shed", "requests refused with 503 because "
                            "MIRRORGATE_MAX_IN_FLIGHT was reached, by route", ["route"],
                            registry=r)
        self.enqueued = Counter("mirrorgate_jobs_enqueued", "mirror jobs enqueued by the proxy",
                                registry=r)
        self.jobs = Counter("mirrorgate_jobs", "mirror jobs by outcome: published, "
                            "already_present, tampered, retried, retired", ["outcome"],
                            registry=r)
        self.retired = Counter("mirrorgate_jobs_retired", "mirror jobs retired, by reason",
                               ["reason"], registry=r)
        self.advisory_loads = Counter("mirrorgate_advisory_loads", "advisory refreshes by "
                                      "outcome: loaded, unchanged, failed", ["outcome"],
                                      registry=r)
        self.audits = Counter("mirrorgate_audit_requests", "npm audit bulk requests answered "
                              "from the advisory index, by outcome", ["outcome"], registry=r)
        self.publishes = Counter(
            "mirrorgate_publishes", "client writes through the proxy (npm publish, unpublish, "
            "deprecate, dist-tag) by client, operation and outcome: published, changed, "
            "refused, upstream_refused", ["client", "operation", "outcome"], registry=r)
        self.tampered = Counter("mirrorgate_tampered", "tarballs whose bytes did not match "
                                "the admitted digest", registry=r)
        self.notifications = Counter(
            "mirrorgate_notifications", "security notifications by outcome: delivered, failed "
            "(refused, or every attempt failed), dropped (the queue was full, or unsent at "
            "exit), deduplicated (a repeat within the window)", ["outcome"], registry=r)
        self.notification_retries = Counter(
            "mirrorgate_notification_retries", "notification deliveries attempted again after "
            "a failure (5xx, 408, 429, no answer)", registry=r)
        self.store_failures = Counter(
            "mirrorgate_store_failures", "state store calls that failed, by operation "
            "(open, load, write, poll)", ["operation"], registry=r)
        self.store_writes_dropped = Counter(
            "mirrorgate_store_writes_dropped", "facts and verdicts dropped from the state "
            "store's write buffer while it was unreachable (the oldest first; names "
            "installed and clean verdicts only)", registry=r)
        self.store_writes_refused = Counter(
            "mirrorgate_store_writes_refused", "facts the gate must keep that could not be "
            "held for the state store (100,000 waited): the request that learned each was "
            "refused (503)", registry=r)
        self.pulls_logged = Counter(
            "mirrorgate_pulls_logged", "pull log records by outcome: written (to the state "
            "store), dropped (the buffer was full while the store was unreachable), escaped "
            "(refused as given, written with what the store cannot hold escaped; counted in "
            "written too), unwritable (refused even escaped)",
            ["outcome"], registry=r)
        self.pull_log_records = Gauge(
            "mirrorgate_pull_log_records", "records the pull log keeps (served pulls and "
            "refusal counts), as counted at its last prune", registry=r)
        self.pull_log_pruned = Counter(
            "mirrorgate_pull_log_pruned", "pull log records deleted, by reason: age (past "
            "MIRRORGATE_PULL_LOG_RETENTION), size (past MIRRORGATE_PULL_LOG_MAX_RECORDS, "
            "refusal counts first)", ["reason"], registry=r)
        self.task_restarts = Counter(
            "mirrorgate_task_restarts", "background tasks (the store's poll, the pull log's "
            "writer, the advisory feed...) started again after they died, by task "
            "(`task_restarting`)", ["task"], registry=r)
        self.exposures = Counter(
            "mirrorgate_exposures", "versions already served that became refused, by cause "
            "(withdrawn...), each reported once (`version_exposed`)", ["cause"], registry=r)
        # not Prometheus: the status page's bounded ring of recent events, kept beside the
        # counters because every place that counts a denial or a failure already holds these
        self.events = Recent()

    def tally(self, series: Counter) -> Tally:
        """A `Tally` of `series` (a counter, or one labelled child of it)."""
        tally = Tally(series)
        self._folding.tallies.append(tally)
        return tally

    def watch_queue(self, stats: Callable[[], QueueStats], provider: str) -> None:
        self.registry.register(_QueueCollector(stats, provider))

    def watch_upstreams(self, in_flight: Callable[[], list[tuple[str, str, int]]]) -> None:
        self.registry.register(_InFlightCollector(in_flight))

    def watch_heartbeat(self, age: Callable[[], float | None]) -> None:
        self.registry.register(_HeartbeatCollector(age))

    def watch_advisories(self, state: Callable[[], tuple[int, float | None]]) -> None:
        """`state()` gives (records loaded, data age in seconds or None) at scrape time."""
        self.registry.register(_AdvisoryCollector(state))

    def watch_store(self, state: Callable[[], tuple[bool, int, int]]) -> None:
        """`state()` gives (reachable, writes waiting, of which never dropped) at scrape
        time."""
        self.registry.register(_StoreCollector(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)
