"""Which denials raise a security alert, and the alert kinds anyone can raise."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mirrorgate.events import ALERT_KINDS, Alert, Recent
from mirrorgate.gate import Denial
from mirrorgate.gate.alerts import denial_alert

UNTIL = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("denial", "kind"), [
    (Denial("advisory-malware", "MAL-2026-1"), "malware"),
    (Denial("publisher-change", "published by `mallory`"), "takeover"),
    (Denial("provenance-continuity", "no provenance", UNTIL), "quarantine"),
])
def test_malware_and_takeover_denials_raise_their_alert(denial: Denial, kind: str) -> None:
    alert = denial_alert("evil", "1.0.0", denial, "tarball")
    assert alert is not None
    assert (alert.kind, alert.subject, alert.package, alert.version) == (
        kind, "evil@1.0.0", "evil", "1.0.0")
    assert alert.data["rule"] == denial.rule
    assert "a client asked for its tarball" in alert.text


@pytest.mark.parametrize("rule", ["minimum-age", "deny-list", "install-scripts",
                                  "advisory-severity", "registry-signature"])
def test_the_other_denials_are_policy_doing_its_job_and_raise_none(rule: str) -> None:
    assert denial_alert("x", "1.0.0", Denial(rule, "because"), "packument") is None


def test_the_same_version_is_the_same_alert_wherever_it_was_judged() -> None:
    malware = Denial("advisory-malware", "MAL-2026-1")
    keys = {alert.repeat_key for where in ("packument", "tarball", "worker")
            if (alert := denial_alert("evil", "1.0.0", malware, where)) is not None}
    assert keys == {("malware", "evil@1.0.0")}


def test_alerts_go_nowhere_until_a_sink_is_set_and_never_touch_the_ring() -> None:
    recent = Recent()
    recent.alert(Alert("tampered", "a@1.0.0", "bytes"))  # no sink yet: dropped silently
    seen: list[Alert] = []
    recent.send_alerts_to(seen.append)
    recent.alert(Alert("tampered", "a@1.0.0", "bytes"))

    assert len(seen) == 1
    assert recent.latest("tampered") == []


def test_a_withdrawn_mirrored_version_has_its_call_ready_for_the_gate() -> None:
    recent = Recent()
    seen: list[Alert] = []
    recent.send_alerts_to(seen.append)

    recent.withdrawn("left-pad", "1.3.0", "unpublished from the public registry",
                     replaced_by="0.0.1-security")

    [alert] = seen
    assert (alert.kind, alert.subject) == ("withdrawn", "left-pad@1.3.0")
    assert alert.data == {"reason": "unpublished from the public registry",
                          "replaced_by": "0.0.1-security"}
    assert "withdrawn" in ALERT_KINDS
