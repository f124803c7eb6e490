"""The overview (`/ui/`): is the mirror keeping up, and what was refused lately.

Figures come from the process's own Prometheus registry, read the way `/metrics` renders it, so
the page and a scrape can never disagree. What happened in the last hour comes from the bounded
in-memory ring in `mirrorgate.events`, and the page says so.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from mirrorgate.events import CAPACITY, Event, Recent
from mirrorgate.metrics import Metrics
from mirrorgate.rules import ENFORCE, REPORT, LiveRules, Rules, rules_summary
from mirrorgate.serve.ui.page import esc, page, table

__all__ = ["Samples", "overview", "process_version", "samples"]

Samples = dict[str, list[tuple[dict[str, str], float]]]
"""Sample name -> (labels, value), as one scrape of the registry sees them."""


def samples(metrics: Metrics) -> Samples:
    """One scrape of the registry (`Metrics.registry.collect()`, as `/metrics` reads it)."""
    found: Samples = defaultdict(list)
    for family in metrics.registry.collect():
        for sample in family.samples:
            found[sample.name].append((dict(sample.labels), float(sample.value)))
    return found


def process_version() -> str:
    try:
        return version("mirrorgate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _one(found: Samples, name: str) -> float | None:
    values = found.get(name)
    return sum(value for _labels, value in values) if values else None


def _by(found: Samples, name: str, label: str, **only: str) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for labels, value in found.get(name, []):
        if all(labels.get(key) == wanted for key, wanted in only.items()):
            totals[labels.get(label, "")] += value
    return dict(totals)


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _figure(label: str, value: str, key: str, note: str = "") -> str:
    extra = f'<span class="note">{esc(note)}</span>' if note else ""
    return (f'<div class="figure" id="{esc(key)}"><span class="label">{esc(label)}</span>'
            f'<span class="value" data-key="{esc(key)}">{esc(value)}</span>{extra}</div>')


def _advisories(found: Samples) -> list[str]:
    """The advisory data's figures, when an advisory source is configured (the gauges exist
    only then)."""
    records = _one(found, "mirrorgate_advisory_records")
    if records is None:
        return []
    age = _one(found, "mirrorgate_advisory_age_seconds")
    return [_figure("advisory records", _number(records), "advisory-records",
                    "OSV records in the index in force"),
            _figure("advisory data age", f"{age / 3600:.1f} h" if age is not None
                    else "not loaded yet", "advisory-age", "since the copy in force was made")]


def _events(events: list[Event], *, empty: str) -> str:
    return table(["when", "what", "detail"],
                 ([esc(_when(e.at)), esc(e.subject), esc(e.detail)] for e in events),
                 empty=empty)


def _rules(rules: Rules) -> str:
    def flat(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if value is None:  # a section with no table in the rules file (advisories): not "None"
            return "off (no table in the rules file)"
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) or "none"
        return str(value)

    rows = []
    for section, content in rules_summary(rules).items():
        if isinstance(content, dict):
            for key, value in content.items():
                rows.append([esc(section), esc(key), esc(flat(value))])
        else:
            rows.append([esc(section), "", esc(flat(content))])
    return table(["rule", "setting", "value"], rows, empty="no rules", cls="rules")


def _exceptions(rules: Rules, now: datetime) -> str:
    rows = []
    for exception in rules.exceptions:
        left = exception.until - now
        shown = (f"{left.days} d {left.seconds // 3600} h" if left.days else
                 f"{left.seconds // 3600} h {left.seconds % 3600 // 60} min"
                 if left.total_seconds() > 0 else "ended: lifts nothing")
        rows.append([esc(exception.text), esc(_when(exception.until)),
                     f'<span data-key="exception-left">{esc(shown)}</span>',
                     esc(", ".join(sorted(exception.rules)) if exception.rules
                         else "every policy rule"),
                     esc(exception.by), esc(exception.reason)])
    return table(["package", "until", "left", "lifts", "by", "reason"], rows,
                 empty="no exceptions in the rules file")


def _reload(state: LiveRules | None) -> str:
    if state is None or state.problem is None:
        return ""
    return (f'<p class="error" role="alert">The rules file was changed and cannot be used: '
            f'{esc(state.problem)}. The last good rules (digest {esc(state.digest[:12])}) '
            "stay in force until it is fixed.</p>")


def overview(*, metrics: Metrics, rules: Rules, started: datetime, heartbeat: bool,
             now: datetime, state: LiveRules | None = None) -> web.Response:
    found = samples(metrics)
    recent: Recent = metrics.events
    jobs = _by(found, "mirrorgate_jobs_total", "outcome")
    hour = recent.outcomes_last_hour()
    outcomes = sorted(set(jobs) | set(hour))
    failures = _by(found, "mirrorgate_upstream_failures_total", "upstream")
    last = recent.last_failures()
    upstreams = sorted(set(failures) | set(last))
    age = _one(found, "mirrorgate_worker_heartbeat_age_seconds")
    figures = "".join([
        _figure("queue depth", _number(_one(found, "mirrorgate_queue_depth")), "queue-depth",
                "jobs waiting in this process's queue"),
        _figure("jobs dropped", _number(_one(found, "mirrorgate_jobs_dropped_total")),
                "jobs-dropped", "since start: the queue or its send buffer was full"),
        _figure("jobs enqueued", _number(_one(found, "mirrorgate_jobs_enqueued_total")),
                "jobs-enqueued", "since start"),
        _figure("worker heartbeat age",
                f"{age:.1f} s" if age is not None else
                ("n/a" if heartbeat else "no worker in this process"),
                "heartbeat-age", "stale after MIRRORGATE_HEARTBEAT_STALE_AFTER"),
        _figure("versions denied", _number(sum(_by(found, "mirrorgate_rule_denials_total",
                                                   "rule", mode=ENFORCE).values())),
                "versions-denied", "since start, counted once per packument fill"),
        _figure("versions a report-mode rule would deny",
                _number(sum(_by(found, "mirrorgate_rule_denials_total", "rule",
                                mode=REPORT).values())),
                "versions-would-deny", "served all the same; since start, once per fill"),
        _figure("tampered", _number(_one(found, "mirrorgate_tampered_total")), "tampered",
                "since start"),
        *_advisories(found),
    ])
    job_rows = ([esc(o), f'<span data-key="jobs-hour-{esc(o)}">{hour.get(o, 0)}</span>',
                 f'<span data-key="jobs-total-{esc(o)}">{_number(jobs.get(o, 0))}</span>']
                for o in outcomes)
    upstream_rows = ([esc(u), esc(_number(failures.get(u, 0))),
                      esc(_when(last[u].at)) if u in last else "",
                      esc(last[u].detail) if u in last else ""] for u in upstreams)
    body = f"""
<h1>Status</h1>
<p class="meta">mirrorgate {esc(process_version())}, running since {esc(_when(started))}.
Totals are this process's, since it started, read from the same counters as
<a href="/metrics">/metrics</a>.</p>
<section class="figures">{figures}</section>
<section><h2>Mirror jobs by outcome</h2>
{table(["outcome", "last hour", "since start"], job_rows, empty="no mirror jobs yet")}
</section>
<section><h2>Upstream health</h2>
{table(["upstream", "failures since start", "last failure", "last error"], upstream_rows,
       empty="no upstream call has failed since start")}
</section>
<section><h2>Recent denials</h2>
{_events(recent.latest("denied"), empty="nothing denied since start")}
</section>
<section><h2>Recent would-be denials (report mode)</h2>
{_events(recent.latest("would-deny"), empty="no report-mode rule would have denied anything")}
</section>
<section><h2>Recent releases the release signals could not check</h2>
{_events(recent.latest("release_unchecked"), empty="every release read was checked")}
</section>
<section><h2>Recent tamper events</h2>
{_events(recent.latest("tampered"), empty="no tampered tarball since start")}
</section>
<section><h2>Recent publishes</h2>
{_events(recent.latest("published"), empty="nothing published through mirrorgate since start")}
</section>
<section><h2>Recent pulls by signed-in clients</h2>
{_events(recent.latest("pulled"), empty="no tarball pulled by a signed-in client since start")}
</section>
<section><h2>Exceptions</h2>{_exceptions(rules, now)}</section>
<section><h2>Rules in force</h2>{_reload(state)}{_rules(rules)}</section>
<p class="note">Recent events are kept in memory only, at most {CAPACITY} of each kind; a
restart empties them. The counters above are the durable record: scrape /metrics.</p>
"""
    return page("Status", body)
