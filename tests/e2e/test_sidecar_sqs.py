"""The sidecar shape over SQS (moto on loopback): `mirrorgate serve --no-worker` and `mirrorgate
worker` in two processes, one queue between them.

A real `npm install` through the proxy ends with every tarball in Verdaccio, intact; a worker
killed with SIGKILL in the middle of a job (mid-fetch or mid-publish) leaves the job to come
back once its visibility lapses (`MIRROR_VISIBILITY_SECONDS=10`, the shortest allowed), and the
next worker mirrors the version exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.mirroring import assert_verdaccio_holds_the_tree
from tests.e2e.sidecar import (
    KillPoint,
    PublishGate,
    assert_exits_0_on_sigterm,
    assert_health_on_its_own_listener,
    assert_verdaccio_holds_once,
    gate_in_front_of,
    kill_a_worker_mid_job,
    redelivery_lines,
    registry_environment,
    start_sidecar,
)
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import standard_tree
from tests.servers.processes import wait_for
from tests.servers.sqs_server import SQS_CREDENTIALS, SQS_REGION, SqsServer
from tests.servers.verdaccio import Verdaccio


@pytest.fixture
def gate(verdaccio: Verdaccio) -> Iterator[PublishGate]:
    with gate_in_front_of(verdaccio) as started:
        yield started


def sqs_environment(server: SqsServer, queue_url: str) -> dict[str, str]:
    return {"MIRROR_QUEUE_PROVIDER": "sqs",
            "MIRROR_SQS_QUEUE_URL": queue_url,
            "AWS_REGION": SQS_REGION,
            "AWS_ENDPOINT_URL_SQS": server.endpoint,
            "AWS_ACCESS_KEY_ID": SQS_CREDENTIALS[0],
            "AWS_SECRET_ACCESS_KEY": SQS_CREDENTIALS[1]}


async def test_an_npm_install_through_the_proxy_is_mirrored_by_the_sqs_sidecar(
    sqs_server: SqsServer, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    npm_client: NpmClient, mirrorgate: MirrorgateFactory,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    queue = await sqs_server.create_queue(visibility=10)
    pod = start_sidecar(mirrorgate, {**registry_environment(public_registry, verdaccio),
                                     **sqs_environment(sqs_server, queue.url)})
    npm_client.write_project(tree.dependencies)

    done = npm_client.install(registry=pod.proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == tree.resolved
    assert_verdaccio_holds_the_tree(verdaccio, public_registry, tree, timeout=30)
    assert pod.proxy.metric("mirrorgate_jobs_enqueued_total") == len(tree.resolved)
    assert pod.proxy.metric("mirrorgate_jobs_sent_total", provider="sqs") == len(tree.resolved)
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome="published")
             == len(tree.resolved), timeout=10, message="the worker to count every publish")
    assert pod.proxy.metric("mirrorgate_jobs_total") == 0  # the proxy runs no worker
    assert_health_on_its_own_listener(pod.worker, pod.proxy)
    assert_exits_0_on_sigterm(pod.proxy, pod.worker)


@pytest.mark.parametrize("at", list(KillPoint), ids=str)
async def test_a_job_whose_worker_is_killed_is_redelivered_and_published_exactly_once(
    at: KillPoint, sqs_server: SqsServer, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, gate: PublishGate, mirrorgate: MirrorgateFactory,
) -> None:
    queue = await sqs_server.create_queue(visibility=10)
    env = {**registry_environment(public_registry, verdaccio, gate),
           **sqs_environment(sqs_server, queue.url)}

    pod, killed = kill_a_worker_mid_job(mirrorgate, env, public_registry, gate, "sqs-kill", at)

    outcome = "published" if at is KillPoint.MID_FETCH else "already_present"
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome=outcome) == 1,
             timeout=30, message=f"the second worker to count the job {outcome}")
    assert_verdaccio_holds_once(verdaccio, public_registry, gate, "sqs-kill", "1.0.0")
    assert redelivery_lines(pod.worker, "sqs-kill", deliveries=2), pod.worker.stderr()
    assert redelivery_lines(killed, "sqs-kill", deliveries=2) == []
    assert pod.worker.metric("mirrorgate_jobs_total") == 1
    assert_health_on_its_own_listener(pod.worker, pod.proxy)
    assert_exits_0_on_sigterm(pod.proxy, pod.worker)
