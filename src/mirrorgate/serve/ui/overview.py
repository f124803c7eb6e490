"""The overview (`/ui/`): one verdict first (healthy, or degraded and why), then what is
stored, then this process's figures, what was refused lately, and the rules.

The process's figures come from its own Prometheus registry, read the way `/metrics` renders
it, so the page and a scrape can never disagree; what is stored comes from `ui.stored`'s
provider. What happened in the last hour comes from the bounded in-memory ring in
`mirrorgate.events`, and the page says so. Every duration is in seconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from mirrorgate.events import CAPACITY, Event, Recent
from mirrorgate.healthz import Heartbeat
from mirrorgate.metrics import Metrics
from mirrorgate.rules import DEFAULT_RULES, ENFORCE, REPORT, LiveRules, Rules, rules_summary
from mirrorgate.rules.inforce import in_force
from mirrorgate.serve.ui.page import esc, page, table
from mirrorgate.serve.ui.stored import Stored

__all__ = ["JOB_OUTCOME_WORDS", "Samples", "overview", "process_version", "samples", "verdict"]

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


def _seconds(value: float) -> str:
    """A duration as the page shows every duration: in seconds."""
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _advisories(found: Samples) -> list[str]:
    """The advisory data's figures, when an advisory source is configured (the gauges exist
    only then)."""
    records = _one(found, "mirrorgate_advisory_records")
    if records is None:
        return []
    age = _one(found, "mirrorgate_advisory_age_seconds")
    loads = _by(found, "mirrorgate_advisory_loads_total", "outcome")
    # a feed that never loaded and has failed says so: "not loaded yet" would read as patience
    unloaded = ("could not be fetched (advisories_load_failed in the logs)"
                if loads.get("failed") and not records else "not loaded yet")
    return [_figure("advisory records", _number(records), "advisory-records",
                    "OSV records in the index in force"),
            _figure("advisory data age", _seconds(age) if age is not None else unloaded,
                    "advisory-age", "since the copy in force was made"),
            _figure("advisory loads failed", _number(loads.get("failed", 0.0)),
                    "advisory-failed", "since start; the index in force is kept")]


def _events(events: list[Event], *, empty: str) -> str:
    return table(["when", "what", "detail"],
                 ([esc(_when(e.at)), esc(e.subject), esc(e.detail)] for e in events),
                 empty=empty)


def _pulls(recent: Recent, pulls_of: str | None) -> str:
    if pulls_of is None:
        return _events(recent.latest("pulled"),
                       empty="no tarball pulled by a signed-in client since start")
    own = [e for e in recent.latest("pulled", limit=CAPACITY) if e.client == pulls_of][:20]
    return (f'<p class="note" data-key="pulls-own">Your pulls only, as {esc(pulls_of)}: '
            "who else pulled what is an operator's view (MIRRORGATE_OPERATORS).</p>"
            + _events(own, empty="you pulled no tarball since start"))


def _flat(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:  # a section with no table in the rules file (advisories): not "None"
        return "off (no table in the rules file)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def _rows(rules: Rules) -> dict[tuple[str, str], str]:
    rows: dict[tuple[str, str], str] = {}
    for section, content in rules_summary(rules).items():
        if section == "source":
            continue
        if isinstance(content, dict):
            for key, value in content.items():
                rows[(section, key)] = _flat(value)
        else:
            rows[(section, "")] = _flat(content)
    return rows


def _rules(rules: Rules) -> str:
    """The rules in force one line each, then the settings that differ from the defaults,
    then the rest folded: about 35 rows are off or at their default on most deployments."""
    defaults = _rows(DEFAULT_RULES)
    rows = _rows(rules)
    changed = [key for key, value in rows.items() if defaults.get(key) != value]
    same = [key for key in rows if key not in changed]

    def cells(keys: list[tuple[str, str]]) -> list[list[str]]:
        return [[esc(section), esc(key), esc(rows[(section, key)])] for section, key in keys]

    source = ("the default policy (no rules file)" if rules.source == "<defaults>"
              else rules.source)
    lines = "".join(f"<li>{esc(line)}</li>" for line in in_force(rules))
    return (f'<p class="meta">From {esc(source)}; the rules that can deny a version:</p>'
            f'<ul class="in-force" data-key="rules-in-force">{lines}</ul>'
            f'<h3>Settings that differ from the defaults</h3>'
            + table(["section", "setting", "value"], cells(changed),
                    empty="none: every setting is at its default", cls="rules changed")
            + f'<details><summary>The other {len(same)} settings, at their defaults</summary>'
            + table(["section", "setting", "value"], cells(same), empty="none",
                    cls="rules defaults")
            + "</details>")


def _exceptions(rules: Rules, now: datetime) -> str:
    rows = []
    for exception in rules.exceptions:
        left = (exception.until - now).total_seconds()
        shown = _seconds(left) if left > 0 else "ended: lifts nothing"
        lifts = ", ".join(sorted(exception.rules)) if exception.rules else "every policy rule"
        if exception.integrity is not None:  # a waiver: for the bytes it names alone
            lifts = (f"{lifts}, for {exception.integrity} alone" if exception.integrity
                     else "nothing: it names no bytes (kept before waivers did); grant it "
                     "again")
        rows.append([esc(exception.text), esc(_when(exception.until)),
                     f'<span data-key="exception-left">{esc(shown)}</span>',
                     f'<span data-key="exception-lifts">{esc(lifts)}</span>',
                     esc(exception.by), esc(exception.reason),
                     '<span data-key="waiver">mirrorgate allow</span>' if exception.waiver
                     else "the rules file"])
    # a waiver's row is `mirrorgate allow`'s: only the active ones are in the rules in force
    return table(["package", "until", "left", "lifts", "by", "reason", "granted with"], rows,
                 empty="none: no [[exception]] in the rules file, no waiver granted with "
                       "mirrorgate allow")


def _policies(rules: Rules, named: Mapping[str, list[str]]) -> str:
    """Each policy set (`[policy.NAME]`): the tokens-file lines judged by it and its rules in
    force; every other client is judged by the rules above."""
    if not rules.policies:
        return ('<p class="meta" data-key="policies">None: every client is judged by the rules '
                "above (a rules file's [policy.NAME] tables and a tokens-file line's "
                "policy:NAME make one).</p>")
    rows = []
    for name, policy in rules.policies.items():
        who = ", ".join(named.get(name, [])) or "no client (no tokens-file line names it)"
        lines = "".join(f"<li>{esc(line)}</li>" for line in in_force(policy))
        rows.append([f'<code data-key="policy-{esc(name)}">{esc(name)}</code>',
                     f'<span data-key="policy-clients-{esc(name)}">{esc(who)}</span>',
                     f'<ul class="in-force">{lines}</ul>'])
    return (table(["policy set", "clients and issuer lines", "rules in force"], rows,
                  empty="none", cls="policies")
            + '<p class="note">A client no policy set names is judged by the rules in force '
              "below.</p>")


def _reload(state: LiveRules | None) -> str:
    if state is None or state.problem is None:
        return ""
    return (f'<p class="error" role="alert">The rules file was changed and cannot be used: '
            f'{esc(state.problem)}. The last good rules (digest {esc(state.digest[:12])}) '
            "stay in force until it is fixed.</p>")


UPSTREAM_RECENT = timedelta(minutes=5)
"""An upstream failure this recent makes the verdict "degraded"."""
TAMPER_RECENT = timedelta(hours=1)


def verdict(found: Samples, recent: Recent, heartbeat: Heartbeat | None, now: datetime,
            state: LiveRules | None) -> list[str]:
    """Why the page says "degraded" (each a sentence), or [] for "healthy"."""
    reasons: list[str] = []
    if state is not None and state.problem is not None:
        reasons.append("the rules file was changed and cannot be used: the last good rules "
                       "stay in force")
    if heartbeat is not None and not heartbeat.fresh():
        reasons.append(f"the worker's heartbeat is {_seconds(heartbeat.age())} old (stale "
                       f"after {_seconds(heartbeat.stale_after)}): mirroring has stopped")
    dropped = _one(found, "mirrorgate_jobs_dropped_total") or 0
    if dropped:
        reasons.append(f"{dropped:.0f} mirror jobs dropped since start: the queue was full, "
                       "so those versions are not mirrored until they are pulled again")
    for upstream, event in sorted(recent.last_failures().items()):
        ago = (now - event.at).total_seconds()
        if ago <= UPSTREAM_RECENT.total_seconds():
            reasons.append(f"the {upstream} upstream failed {_seconds(ago)} ago: {event.detail}")
    tampered = [e for e in recent.latest("tampered") if now - e.at <= TAMPER_RECENT]
    if tampered:
        reasons.append(f"{len(tampered)} tampered tarballs in the last hour (latest: "
                       f"{tampered[0].subject})")
    return reasons


def _verdict(reasons: list[str]) -> str:
    if not reasons:
        return ('<section class="health healthy" role="status"><p><strong data-key="verdict">'
                "Healthy</strong>: the worker keeps up, no mirror job was dropped, no upstream "
                "failed in the last 5 minutes.</p></section>")
    items = "".join(f"<li>{esc(reason)}</li>" for reason in reasons)
    return ('<section class="health degraded" role="status"><p><strong data-key="verdict">'
            f'Degraded</strong>: {len(reasons)} reason{"s" if len(reasons) > 1 else ""}.</p>'
            f'<ul data-key="verdict-reasons">{items}</ul></section>')


def _stored(stored: Stored) -> str:
    def shown(count: int | None) -> str:
        return str(count) if count is not None else "n/a"

    kept = stored.kept_by
    unknown = "the state store is not loaded (see the verdict and /readyz)"
    return "".join([
        _figure("versions mirrored", shown(stored.mirrored), "stored-mirrored",
                f"held by {stored.where}"),
        _figure("versions refused", shown(stored.refused), "stored-refused",
                unknown if kept is None else f"asked for and denied, within the pull log's "
                f"retention: {kept}"),
        _figure("versions quarantined", shown(stored.quarantined), "stored-quarantined",
                unknown if kept is None else f"asked for and held back until a moment still "
                f"ahead (a cooldown, a quarantine): {kept}"),
        _figure("waivers in force", shown(stored.waived), "stored-waived",
                unknown if kept is None else f"granted with mirrorgate allow: {kept}"),
    ])


JOB_OUTCOME_WORDS = {"published": "mirrored"}
"""One word per concept: a job that put a version into the mirror "mirrored" it; "published"
is kept for a client's `npm publish` through mirrorgate."""


def overview(*, metrics: Metrics, rules: Rules, started: datetime, heartbeat: Heartbeat | None,
             now: datetime, stored: Stored, state: LiveRules | None = None,
             registry_url: str = "", worker_beside: bool = False,
             waiver_forms: str = "", pulls_of: str | None = None,
             policy_clients: Mapping[str, list[str]] | None = None) -> web.Response:
    """The overview; the recent pulls are every client's, or only `pulls_of`'s (a client that
    is not an operator, `ui.readers`)."""
    found = samples(metrics)
    recent: Recent = metrics.events
    jobs = _by(found, "mirrorgate_jobs_total", "outcome")
    hour = recent.outcomes_last_hour()
    # the series start at 0 (for the alerts' increase()): an outcome shows once it happened
    outcomes = sorted({outcome for outcome, count in jobs.items() if count} | set(hour))
    failures = _by(found, "mirrorgate_upstream_failures_total", "upstream")
    last = recent.last_failures()
    upstreams = sorted(set(failures) | set(last))
    uptime = (now - started).total_seconds()
    enqueued = _one(found, "mirrorgate_jobs_enqueued_total") or 0.0
    denied = sum(_by(found, "mirrorgate_rule_denials_total", "rule", mode=ENFORCE).values())

    def rate(count: float) -> str:  # this process's rate, beside the stored counts
        return f"{count * 60 / max(uptime, 60):.1f} a minute"

    if heartbeat is not None:
        beat = _figure("worker heartbeat age", _seconds(heartbeat.age()), "heartbeat-age",
                       f"stale after {_seconds(heartbeat.stale_after)}")
    else:
        beat = _figure("worker heartbeat age", "no worker in this process", "heartbeat-age",
                       "a separate `mirrorgate worker` mirrors" if not worker_beside else "")
    figures = "".join([
        _figure("queue depth", _number(_one(found, "mirrorgate_queue_depth")), "queue-depth",
                "jobs waiting in this process's queue"),
        _figure("jobs enqueued", _number(enqueued), "jobs-enqueued",
                f"since start: {rate(enqueued)}"),
        _figure("jobs dropped", _number(_one(found, "mirrorgate_jobs_dropped_total")),
                "jobs-dropped", "since start: the queue or its send buffer was full"),
        beat,
        _figure("versions denied", _number(denied), "versions-denied",
                f"since start, once per packument fill: {rate(denied)}"),
        _figure("versions a report-mode rule would deny",
                _number(sum(_by(found, "mirrorgate_rule_denials_total", "rule",
                                mode=REPORT).values())),
                "versions-would-deny", "served all the same; since start, once per fill"),
        _figure("tampered", _number(_one(found, "mirrorgate_tampered_total")), "tampered",
                "since start"),
        *_advisories(found),
    ])
    job_rows = ([esc(JOB_OUTCOME_WORDS.get(o, o)),
                 f'<span data-key="jobs-hour-{esc(o)}">{hour.get(o, 0)}</span>',
                 f'<span data-key="jobs-total-{esc(o)}">{_number(jobs.get(o, 0))}</span>']
                for o in outcomes)
    upstream_rows = ([esc(u), esc(_number(failures.get(u, 0))),
                      esc(_when(last[u].at)) if u in last else "",
                      esc(last[u].detail) if u in last else ""] for u in upstreams)
    registry = (f' Registry URL for clients: <code data-key="registry-url">{esc(registry_url)}'
                "</code>." if registry_url else "")
    body = f"""
<h1>Status</h1>
{_verdict(verdict(found, recent, heartbeat, now, state))}
<p class="meta">mirrorgate {esc(process_version())}, running since {esc(_when(started))}
({esc(_seconds(uptime))}).{registry}</p>
<section><h2>Stored</h2>
<p class="note">What survives a restart, from where it is kept.</p>
<div class="figures">{_stored(stored)}</div></section>
<section><h2>This process, since it started</h2>
<p class="note">Read from the same counters as <a href="/metrics">/metrics</a>; a restart
starts them at zero.</p>
<div class="figures">{figures}</div></section>
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
<section><h2>Recent publishes through mirrorgate</h2>
{_events(recent.latest("published"), empty="nothing published through mirrorgate since start")}
</section>
<section><h2>Recent pulls by signed-in clients</h2>
{_pulls(recent, pulls_of)}
</section>
<section><h2>Exceptions and waivers</h2>{_exceptions(rules, now)}{waiver_forms}</section>
<section><h2>Policy sets</h2>{_policies(rules, policy_clients or {})}</section>
<section><h2>Rules in force</h2>{_reload(state)}{_rules(rules)}</section>
<p class="note">Recent events are kept in memory only, at most {CAPACITY} of each kind; a
restart empties them. The counters above are the durable record: scrape /metrics.</p>
"""
    return page("Status", body)
