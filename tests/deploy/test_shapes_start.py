"""Each shape's containers, run as the real `mirrorgate` command with their manifest's
environment, answer the probes the manifest asks and stop cleanly on SIGTERM.

The static checks in test_manifests.py read the code; these start it. What a test cannot take
from the manifest is swapped, and only that: the listeners move to free loopback ports (tests
never bind 0.0.0.0), the upstreams point at closed loopback ports (nothing here reaches the
internet; no request is made to them anyway), and the cloud queue is a real one on loopback
(moto's SQS server, Google's Pub/Sub emulator) with its endpoint and dummy credentials; the
fleet shapes' state store is a real PostgreSQL on loopback, its URL in the Secret's file.
Everything else (the command, the rules file from the ConfigMap, the token file from the
Secret's mount, the cache and drain settings) is the manifest's.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.deploy.drift import container_environ
from tests.deploy.kube import MANIFEST_DIR, Container, load_manifest, workloads
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess
from tests.servers.pubsub_server import PubSubNames
from tests.servers.sqs_server import SQS_CREDENTIALS, SQS_REGION, SqsServer

SWAPPED = ("MIRRORGATE_LISTEN", "MIRRORGATE_WORKER_LISTEN")
UPSTREAMS = {"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
             "MIRRORGATE_PRIVATE_UPSTREAM": "http://127.0.0.1:7/"}


def containers(manifest_file: str) -> list[Container]:
    manifest = load_manifest(MANIFEST_DIR / manifest_file)
    return [c for workload in workloads(manifest) for c in workload.containers]


def environment(container: Container, scratch: Path,
                overrides: Mapping[str, str]) -> dict[str, str]:
    environ, problems = container_environ(container, scratch / container.name)
    assert problems == []
    for name in SWAPPED:
        environ.pop(name, None)
    environ.update(UPSTREAMS)
    environ.update(overrides)
    return environ


async def database_secret(server: PostgresServer, scratch: Path) -> dict[str, str]:
    """The mirrorgate-database Secret's file, holding a fresh database's URL."""
    path = scratch / "database-secret" / "url"
    path.parent.mkdir(parents=True)
    path.write_text(await server.new_database() + "\n")
    return {"MIRRORGATE_DATABASE_URL_FILE": str(path)}


def probe_paths(container: Container) -> list[str]:
    return [str(container.spec[probe]["httpGet"]["path"])
            for probe in ("livenessProbe", "readinessProbe")]


@pytest.fixture
def started() -> Iterator[list[MirrorgateProcess]]:
    """The processes a test starts; any still running at the end is killed by its pid."""
    processes: list[MirrorgateProcess] = []
    yield processes
    for process in processes:
        if process.process is not None and process.returncode is None:
            process.kill()


def run_pod(pod: list[Container], scratch: Path, overrides: Mapping[str, str],
            started: list[MirrorgateProcess]) -> None:
    """Start the pod's containers together, as the kubelet does, probe them, stop them."""
    for container in pod:
        command = shlex.join(str(arg) for arg in container.spec["args"])
        process = MirrorgateProcess(command, environment(container, scratch, overrides),
                                    workdir=scratch / f"{container.name}-run")
        started.append(process)
        process.start(ready=False)
    for container, process in zip(pod, started, strict=True):
        process.wait_ready()
        for path in probe_paths(container):
            reply = process.get(path)
            assert reply.status == 200, f"{container.where}: {path} answered {reply.status}"
        [event] = process.events("started")
        assert event["queue"] == container.setting("MIRROR_QUEUE_PROVIDER")
    for process in started:
        process.signal(signal.SIGTERM)
    for process in started:
        assert process.wait(timeout=20) == 0, process.stderr()


def test_the_single_pod_answers_its_probes_and_stops_cleanly(
        tmp_path: Path, started: list[MirrorgateProcess]) -> None:
    run_pod(containers("single.yaml"), tmp_path, {}, started)


async def test_the_sqs_sidecar_pod_answers_its_probes_and_stops_cleanly(
        tmp_path: Path, sqs_server: SqsServer, postgres_server: PostgresServer,
        started: list[MirrorgateProcess]) -> None:
    queue = await sqs_server.create_queue(visibility=60)
    overrides = {
        **await database_secret(postgres_server, tmp_path),
        "MIRROR_SQS_QUEUE_URL": queue.url,
        "AWS_REGION": SQS_REGION,
        "AWS_ENDPOINT_URL_SQS": sqs_server.endpoint,
        "AWS_ACCESS_KEY_ID": SQS_CREDENTIALS[0],
        "AWS_SECRET_ACCESS_KEY": SQS_CREDENTIALS[1],
    }
    run_pod(containers("sidecar-sqs.yaml"), tmp_path, overrides, started)


async def test_the_pubsub_sidecar_pod_answers_its_probes_and_stops_cleanly(
        tmp_path: Path, pubsub_emulator: str,
        make_pubsub_names: Callable[..., Awaitable[PubSubNames]],
        postgres_server: PostgresServer, started: list[MirrorgateProcess]) -> None:
    names = await make_pubsub_names(dead_letter_attempts=5, ack_deadline=60)
    overrides = {
        **await database_secret(postgres_server, tmp_path),
        "MIRROR_PUBSUB_TOPIC": names.topic,
        "MIRROR_PUBSUB_SUBSCRIPTION": names.subscription,
        "PUBSUB_EMULATOR_HOST": pubsub_emulator,
    }
    run_pod(containers("sidecar-pubsub.yaml"), tmp_path, overrides, started)
