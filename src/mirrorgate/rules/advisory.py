"""The advisory rules: the `[advisories]` table compiled, and its check of one version.

The check is pure and cheap: one read of the feed's state and one dict lookup by package name,
nothing more for the (vast) majority of names no advisory mentions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirrorgate.advisories import AdvisoryFeed, FeedState, Hit, severity_rank
from mirrorgate.npm.versions import highest

__all__ = ["ADVISORY_MALWARE", "ADVISORY_SEVERITY", "ADVISORY_UNAVAILABLE", "SHOWN_ADVISORIES",
           "AdvisoryRules", "check", "counted", "fast_lane", "known_malware", "state_token"]

# rule names (metric labels, 403 bodies)
ADVISORY_MALWARE = "advisory-malware"  # a `MAL-` record affects the version
ADVISORY_SEVERITY = "advisory-severity"  # an advisory at or above the chosen severity does
# there is no index, or it is older than `max_age`, and `unavailable = "deny"`
ADVISORY_UNAVAILABLE = "advisory-unavailable"
SHOWN_ADVISORIES = 5
"""Advisories named one by one in a denial; more are counted."""


@dataclass(frozen=True)
class AdvisoryRules:
    """The `[advisories]` table as compiled; `feed` holds the index in force."""

    source: str
    refresh: timedelta
    refresh_text: str
    malware_deny: bool
    severity: str  # "low" | "medium" | "high" | "critical" | "none"
    unavailable_deny: bool
    max_age: timedelta
    max_age_text: str
    ignore: frozenset[str]
    fast_lane: bool
    feed: AdvisoryFeed = field(compare=False, repr=False)
    by_default: bool = False
    """The known-malware feed the rules use when the rules file names no source
    (`known_malware`), rather than an `[advisories]` table."""

    @property
    def threshold(self) -> int | None:
        """The lowest severity rank denied; None when severity = "none"."""
        return None if self.severity == "none" else severity_rank(self.severity)

    def available(self, now: datetime, state: FeedState | None = None) -> bool:
        """Whether there is an index no older than `max_age` (in `state`, else the feed's)."""
        state = state if state is not None else self.feed.state
        return (state.index is not None and state.as_of is not None
                and now - state.as_of <= self.max_age)


def known_malware(source: str) -> AdvisoryRules:
    """The advisory rules in force without an `[advisories]` table: `MAL-` records alone
    (from MIRRORGATE_MALWARE_FEED), denied; CVE severities are the operator's choice, so they
    stay off. The cooldown exists to give the world a day to notice a malicious release;
    this is what the world noticed reaching the gate without a rules file. Unavailable, the
    gate admits as before (and says so): a feed that cannot be fetched must not stop builds."""
    refresh, max_age = timedelta(hours=1), timedelta(days=3)
    return AdvisoryRules(
        source=source, refresh=refresh, refresh_text="1h", malware_deny=True, severity="none",
        unavailable_deny=False, max_age=max_age, max_age_text="3d", ignore=frozenset(),
        fast_lane=False, feed=AdvisoryFeed(source, refresh, malware_only=True),
        by_default=True)


def counted(rules: AdvisoryRules, hit: Hit) -> str | None:
    """The rule that denies for this hit, or None when the rules let it pass."""
    advisory = hit.advisory
    if advisory.id in rules.ignore or any(a in rules.ignore for a in advisory.aliases):
        return None
    if advisory.malware:
        return ADVISORY_MALWARE if rules.malware_deny else None
    threshold = rules.threshold
    if threshold is not None and severity_rank(advisory.severity) >= threshold:
        return ADVISORY_SEVERITY
    return None


def _sentence(hit: Hit) -> str:
    advisory = hit.advisory
    kind = "malware" if advisory.malware else f"{advisory.severity} severity"
    summary = f"{advisory.summary}; " if advisory.summary else ""
    fix = f"fixed in {hit.fixed}" if hit.fixed is not None else "no fixed version"
    return f"{advisory.id} ({summary}{kind}; {fix})"


def _upgrade(hits: list[Hit]) -> str:
    fixes = [hit.fixed for hit in hits]
    if not fixes or any(fix is None for fix in fixes):
        return "no version fixes every one of them: choose another package or version"
    best = highest([fix for fix in fixes if fix is not None])
    return f"upgrade to {best} or later"


def check(rules: AdvisoryRules, name: str, version: str, label: str,
          now: datetime) -> tuple[str, str] | None:
    """(rule, reason) when the advisories deny `name@version`, else None. `label` is the
    version as a reason prints it."""
    # one read of the feed: a gating in a thread may overlap a swap on the event loop
    state = rules.feed.state
    index = state.index
    if rules.unavailable_deny and not rules.available(now, state):
        why = ("no advisory data has been loaded yet" if index is None or state.as_of is None
               else f"the advisory data is {_days(now - state.as_of)} old, older than max_age "
               f"{rules.max_age_text}")
        return ADVISORY_UNAVAILABLE, (f"{label} cannot be checked against known advisories: "
                                      f"{why}, and the rules deny when it is unavailable")
    if index is None:
        return None
    # with `unavailable = "admit"` a stale index is still applied: old knowledge of a bad
    # version is better than none
    hits = index.hits(name, version)
    if not hits:
        return None
    denying = [(rule, hit) for hit in hits if (rule := counted(rules, hit)) is not None]
    if not denying:
        return None
    rule = ADVISORY_MALWARE if any(r == ADVISORY_MALWARE for r, _ in denying) else (
        ADVISORY_SEVERITY)
    shown = [hit for _, hit in denying]
    listed = "; ".join(_sentence(hit) for hit in shown[:SHOWN_ADVISORIES])
    if len(shown) > SHOWN_ADVISORIES:
        listed += f"; and {len(shown) - SHOWN_ADVISORIES} more"
    what = "is malware according to" if rule == ADVISORY_MALWARE else "is affected by"
    return rule, f"{label} {what} {listed}; {_upgrade(shown)}"


def fast_lane(rules: AdvisoryRules, name: str, version: str) -> bool:
    """Whether `name@version` fixes an advisory affecting the versions below it, so the
    minimum-age rule lets it through at once (a security fix is not quarantined)."""
    index = rules.feed.index
    return rules.fast_lane and index is not None and index.is_fix(name, version)


def state_token(rules: AdvisoryRules | None, now: datetime) -> tuple[int, bool] | None:
    """What a cached gating depends on: the index generation and whether it is available."""
    if rules is None:
        return None
    state = rules.feed.state
    return state.generation, rules.available(now, state)


def _days(age: timedelta) -> str:
    hours = int(age.total_seconds() // 3600)
    return f"{hours // 24} days" if hours >= 48 else f"{hours} hours"
