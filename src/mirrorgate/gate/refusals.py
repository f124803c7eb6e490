"""What the gate says when it refuses a request: the status, the rule, the reason, the evidence,
the way through and the alert it raises, as a `Refusal` an application renders (serve: a JSON
error). Every refusal of a version, from the packument's rules, from the bytes or from the
release signals, is written here, so npm, pnpm, yarn and bun read one text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mirrorgate.events import Alert
from mirrorgate.gate.kept.facts import UnrecordedError
from mirrorgate.gate.records import VersionRecord
from mirrorgate.npm.names import PackageName
from mirrorgate.rules.license import LICENSE, LICENSE_UNKNOWN
from mirrorgate.rules.policy import UnknownPolicyError
from mirrorgate.rules.release import ReleaseVerdict
from mirrorgate.rules.wayout import exception_how, exception_who, installable_from, instead
from mirrorgate.upstream.client import UpstreamError

__all__ = ["DEFAULT_RETRY_AFTER", "PREWARM", "Refusal", "by_rule", "denied", "not_found",
           "not_mirrored", "release_refusal", "release_unchecked", "unknown_policy", "unrecorded",
           "upstream_failed"]

DEFAULT_RETRY_AFTER = "30"
"""Seconds a 503 asks the client to wait when the upstream did not say."""
PREWARM = "mirrorgate prewarm LOCKFILE"
"""The command that mirrors a project's locked versions while the public upstream is up."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused: the status, the sentence a person acts on (`message`), and for
    programs the `reason` and `fields` (`rule`, `package`, `version`, `evidence`, the way
    through: `nearest_admitted`, `installable_at`, `until`); the status line's text (`brief_`:
    for a client that prints the body after it, npm); the alert a security team is told."""

    status: int
    message: str
    reason: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    status_text: str | None = None
    brief_status_text: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    alert: Alert | None = None
    record: VersionRecord | None = None
    """The version refused, where the gate knew it (what the pull log names)."""

    @property
    def rule(self) -> str | None:
        rule = self.fields.get("rule")
        return rule if isinstance(rule, str) else None

    @property
    def ends(self) -> float | None:
        """When the refusal said it ends (a cooldown's, a quarantine's moment), as a time."""
        said = self.fields.get("installable_at") or self.fields.get("until")
        try:
            return datetime.fromisoformat(said).timestamp() if isinstance(said, str) else None
        except ValueError:
            return None


def not_found(message: str, **fields: Any) -> Refusal:
    return Refusal(404, message, reason="not found", fields=fields)


def _failure_reason(error: UpstreamError) -> str:
    """A short, stable sentence for the failure's kind (the `reason` field)."""
    label = error.label
    if error.kind == "status":
        if error.status in (429, 503):
            return f"the {label} upstream asked to retry later ({error.status})"
        return f"the {label} upstream answered {error.status}"
    return {
        "unreachable": f"the {label} upstream is unreachable",
        "timeout": f"the {label} upstream did not answer in time",
        "too-large": f"the {label} upstream's document is larger than mirrorgate reads",
        "invalid": f"the {label} upstream's document is not a usable JSON object",
        "refused": f"the {label} upstream's URL is not on its origin",
    }.get(error.kind, f"the {label} upstream failed")


def upstream_failed(error: UpstreamError, name: PackageName) -> Refusal:
    """502, 503 (with Retry-After) or 504, saying which upstream failed and how."""
    status = error.client_status
    headers = {"Retry-After": error.retry_after or DEFAULT_RETRY_AFTER} if status == 503 else {}
    return Refusal(status, f"the {error.label} upstream failed for {name.full}: {error}",
                   reason=_failure_reason(error), headers=headers,
                   fields={"upstream": error.label, "kind": error.kind})


def not_mirrored(error: UpstreamError, name: PackageName, version: str | None = None) -> Refusal:
    """`upstream_failed` for what the private side does not hold while the public upstream
    fails: the version (or, with None, the package) is not mirrored, and the command that
    mirrors a project before the upstream goes away. A client's own cache serves what it
    holds without asking, so such a version was never pulled through mirrorgate."""
    refused = upstream_failed(error, name)
    if error.label != "public":
        return refused
    what = f"{name.full}@{version}" if version is not None else name.full
    return dataclasses.replace(
        refused, message=f"{what} is not mirrored, and {refused.message}; to mirror a project "
        f"before the public upstream goes away, run {PREWARM}",
        fields={"mirrored": False, **refused.fields})


def denied(name: PackageName, record: VersionRecord, admitted: Iterable[str] = (),
           contact: str | None = None, alert: Alert | None = None) -> Refusal:
    """The 403 for a version the gate denied (`by_rule`)."""
    denial = record.denial
    if denial is None:
        raise ValueError(f"{name.full}@{record.version} was admitted, not denied")
    licensed = denial.rule in (LICENSE, LICENSE_UNKNOWN)
    refusal = by_rule(name, record.version, denial.rule, denial.reason, admitted, contact,
                      denial.until, (record.license or "no license") if licensed else None)
    return dataclasses.replace(refusal, alert=alert) if alert is not None else refusal


def by_rule(name: PackageName, version: str, rule: str, reason: str,
            admitted: Iterable[str] = (), contact: str | None = None,
            until_moment: datetime | None = None, detail: str | None = None) -> Refusal:
    """The 403 for `version` refused by `rule`: which rule and why, then the way through (when
    a timed denial ends, the nearest admitted version among `admitted`, how to get an
    exception: `rules.wayout`). Every refusal of a version, from the packument's rules or from
    the bytes, reads the same in every client. `detail` is said beside the rule in the status
    line too (the license a license rule refused), which pnpm and yarn 4 print alone."""
    label = f"{name.full}@{version}"
    until = installable_from(until_moment)
    use = instead(version, admitted)
    nearest = f"nearest admitted: {use}" if use is not None else "no version of it is admitted"
    message = "; ".join(part for part in (
        f"mirrorgate denied {label} by its {rule} rule: {reason}", until,
        nearest, exception_how(name.full, version, contact)) if part)
    # The status line carries the verdict and the way through too: pnpm and yarn 4 print the
    # status text of a failed tarball fetch, not the body (npm prints the body's `error`).
    named = f"{rule} rule: {detail}" if detail else f"{rule} rule"
    line = "; ".join(part for part in (
        f"Forbidden: mirrorgate denied {label} ({named})", until,
        f"nearest admitted {use}" if use is not None else "", exception_who(contact)) if part)
    return Refusal(403, message, reason=reason, fields={
        "rule": rule, "package": name.full, "version": version, "nearest_admitted": use,
        "installable_at": until_moment.isoformat() if until_moment else None},
        status_text=line,
        brief_status_text=f"Forbidden: mirrorgate denied {label} ({rule} rule)")


def release_refusal(name: PackageName, version: str, verdict: ReleaseVerdict,
                    contact: str | None) -> Refusal:
    """The 403 with the evidence for a version a release signal refuses (the verdict, made
    again under the rules in force, is in force)."""
    assert verdict.rule is not None
    assert verdict.reason is not None
    label = f"{name.full}@{version}"
    evidence = [detail for found in verdict.fired if found.signal == verdict.rule
                for detail in found.details]
    until = installable_from(verdict.until)
    return Refusal(403, f"mirrorgate denied {label} by its {verdict.rule} release signal: "
                   f"{verdict.reason}{'; ' + until if until else ''}; "
                   f"{exception_how(name.full, version, contact)}",
                   reason=verdict.reason, fields={
                       "rule": verdict.rule, "package": name.full, "version": version,
                       "evidence": evidence[:50], "compared_with": verdict.compared_with,
                       "until": verdict.until.isoformat() if verdict.until else None},
                   status_text=f"Forbidden: mirrorgate denied {label} ({verdict.rule} "
                               "release signal)")


def release_unchecked(name: PackageName, version: str, reason: str) -> Refusal:
    """The 403 for bytes the release signals refused as they streamed with no verdict kept."""
    label = f"{name.full}@{version}"
    return Refusal(403, f"mirrorgate denied {label}: {reason}", reason=reason,
                   fields={"rule": "release-unchecked", "package": name.full,
                           "version": version},
                   status_text=f"Forbidden: mirrorgate denied {label} (release signals)")


def unknown_policy(error: UnknownPolicyError) -> Refusal:
    """A client whose policy set the rules in force lack: refused, never judged by other
    rules (the two files are checked against each other at every reload, so this is a moment
    between two reloads)."""
    return Refusal(503, f"mirrorgate cannot judge this client's packages now: {error}",
                   reason="unknown policy", headers={"Retry-After": "5"})


def unrecorded(name: PackageName, error: UnrecordedError) -> Refusal:
    """What a fill learned cannot be kept for the state store (its buffer of facts that must
    not be lost is full): 503, never an answer that forgets it at a restart."""
    return Refusal(503, str(error), reason="the state store takes no writes",
                   headers={"Retry-After": str(error.retry_after)}, fields={"package": name.full})
