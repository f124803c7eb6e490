"""Which denials a security team is told about, as the alert each one raises.

Most denials are policy doing its job (too young, not on the allow list) and stay in the logs
and counters. A known-malware advisory and an account-takeover signal are different: someone
published something hostile, and a person should look. The serve path (a packument fill, a
tarball asked for) and the worker (a job for such a version) raise the same alert, so repeats
within the notifier's window are one notification.
"""

from __future__ import annotations

from mirrorgate.events import Alert
from mirrorgate.gate.records import Denial
from mirrorgate.moments import stamp
from mirrorgate.rules import ADVISORY_MALWARE, PROVENANCE_CONTINUITY, PUBLISHER_CHANGE

__all__ = ["ALERTING_RULES", "WHERE", "denial_alert"]

ALERTING_RULES = {ADVISORY_MALWARE: "malware", PROVENANCE_CONTINUITY: "takeover",
                  PUBLISHER_CHANGE: "takeover"}
"""Rule to alert kind; a takeover signal in quarantine mode raises `quarantine` instead."""
WHERE = {"packument": "withheld from its packument",
         "tarball": "a client asked for its tarball",
         "worker": "a queued mirror job named it"}


def denial_alert(package: str, version: str, denial: Denial, where: str) -> Alert | None:
    """The alert `denial` raises, or None for a rule that raises none. `where` is a key of
    `WHERE`: how the version came to be judged."""
    kind = ALERTING_RULES.get(denial.rule)
    if kind is None:
        return None
    label = f"{package}@{version}"
    seen = WHERE.get(where, where)
    if kind == "malware":
        text = f"{label} is known malware and was denied ({seen}): {denial.reason}"
    elif denial.until is not None:
        kind = "quarantine"
        text = (f"{label} is quarantined until {stamp(denial.until)} by the {denial.rule} "
                f"rule, a sign of an account takeover ({seen}): {denial.reason}")
    else:
        text = (f"{label} was denied by the {denial.rule} rule, a sign of an account takeover "
                f"({seen}): {denial.reason}")
    data = {"rule": denial.rule, "reason": denial.reason, "where": where,
            "until": stamp(denial.until) if denial.until is not None else None}
    return Alert(kind, label, text, package, version, data)
