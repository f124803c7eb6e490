"""The alerts the worker raises for people, one builder per verdict (`events.Alert`).

Each is a security line the worker already logs; these say it in the one line a chat shows
and the fields a program reads, so `worker.job` keeps to the job's steps and outcomes.
"""

from __future__ import annotations

from typing import Any

from mirrorgate.events import Alert
from mirrorgate.gate import Denial
from mirrorgate.gate.alerts import ALERTING_RULES, denial_alert
from mirrorgate.logs import loggable_url
from mirrorgate.mirror import MirrorJob, QueueMessage
from mirrorgate.moments import moment
from mirrorgate.worker.regate import JobRefused

__all__ = ["conflicting", "hiding_scripts", "refused", "tampered", "unvouched"]


def unvouched(message: QueueMessage) -> Alert:
    """A message no job key vouches for; keyed by the reason, so a flood of unsigned messages
    is one notification."""
    return Alert("forged-job", f"a queue message ({message.refusal})",
                 f"the worker refused a queue message that no job key vouches for "
                 f"({message.refusal}): someone without the key can send to the queue",
                 data={"reason": message.refusal, "detail": message.problem,
                       "message_id": message.message_id}, key=message.refusal)


def refused(job: MirrorJob, refusal: JobRefused, message_id: str) -> Alert:
    """A denied version's own alert (malware, a takeover signal) when the rules name one,
    else a forged or stale job."""
    rule = refusal.fields.get("rule")
    if refusal.reason == "denied" and isinstance(rule, str) and rule in ALERTING_RULES:
        denial = Denial(rule, str(refusal), moment(refusal.fields.get("until")))
        alert = denial_alert(job.name, job.version, denial, "worker")
        if alert is not None:
            return alert
    return Alert("forged-job", job.label,
                 f"the worker refused a queue job for {job.label} that is not what the public "
                 f"registry publishes and the rules admit ({refusal.reason}): {refusal}",
                 job.name, job.version,
                 {"reason": refusal.reason, "message_id": message_id, **{
                     key: value for key, value in refusal.fields.items()
                     if isinstance(value, str | int | list | None)}})


def tampered(job: MirrorJob, what: str, **data: Any) -> Alert:
    """Downloaded bytes that are not `what` (the digest, the declared size) was admitted."""
    return Alert("tampered", job.label,
                 f"the public upstream's tarball for {job.label} did not match {what} it was "
                 "admitted with; the worker published nothing", job.name, job.version,
                 {"where": "worker", "url": loggable_url(job.artifact.tarball_url), **data})


def conflicting(job: MirrorJob, target: str, expected: str, stored: str | None) -> Alert:
    """The mirror target already holds the version with other bytes."""
    return Alert("tampered", job.label,
                 f"the mirror target ({target}) holds {job.label} with bytes other than the "
                 "admitted ones; nothing was published", job.name, job.version,
                 {"where": "target", "expected": expected, "stored": stored})


def hiding_scripts(job: MirrorJob, detail: str) -> Alert:
    """Manifest confusion, caught before the publish."""
    return Alert("install-scripts", job.label,
                 f"the tarball of {job.label} runs code at install that its manifest did not "
                 f"show; the worker published nothing: {detail}", job.name, job.version,
                 {"where": "worker", "rule": "install-scripts", "reason": detail})
