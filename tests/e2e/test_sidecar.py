"""The sidecar shape over each cloud queue: `mirrorgate serve --no-worker` and `mirrorgate
worker` in two processes, one queue between them, on SQS (moto on loopback) and on Pub/Sub
(Google's emulator on loopback: the proxy publishes to a topic, the worker pulls from its
subscription).

A real `npm install` through the proxy ends with every tarball in Verdaccio, intact; a worker
killed with SIGKILL in the middle of a job (mid-fetch or mid-publish) leaves the job to come
back once its visibility or ack deadline lapses (`MIRROR_VISIBILITY_SECONDS=10`, the shortest
both allow), and the next worker mirrors the version exactly once. Every test runs once per
backend (`[sqs]`, `[pubsub]`, from the `queue_environment` fixture); without the emulator the
Pub/Sub runs are skipped with the reason (the `pubsub_emulator` fixture's behaviour).
"""

from __future__ import annotations

import pytest

from tests.e2e.mirroring import assert_verdaccio_holds_the_tree
from tests.e2e.sidecar import (
    KillPoint,
    PublishGate,
    assert_exits_0_on_sigterm,
    assert_health_on_its_own_listener,
    assert_verdaccio_holds_once,
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
from tests.servers.verdaccio import Verdaccio


def test_an_npm_install_through_the_proxy_is_mirrored_by_the_sidecar(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    pod = start_sidecar(mirrorgate, {**registry_environment(public_registry, verdaccio),
                                     **queue_environment})
    npm_client.write_project(tree.dependencies)

    done = npm_client.install(registry=pod.proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == tree.resolved
    assert_verdaccio_holds_the_tree(verdaccio, public_registry, tree, timeout=30)
    assert pod.proxy.metric("mirrorgate_jobs_enqueued_total") == len(tree.resolved)
    assert pod.proxy.metric("mirrorgate_jobs_sent_total", provider=queue_backend) \
        == len(tree.resolved)
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome="published")
             == len(tree.resolved), timeout=10, message="the worker to count every publish")
    assert pod.proxy.metric("mirrorgate_jobs_total") == 0  # the proxy runs no worker
    assert_health_on_its_own_listener(pod.worker, pod.proxy)
    assert_exits_0_on_sigterm(pod.proxy, pod.worker)


@pytest.mark.parametrize("at", list(KillPoint), ids=str)
def test_a_job_whose_worker_is_killed_is_redelivered_and_published_exactly_once(
    at: KillPoint, queue_backend: str, queue_environment: dict[str, str],
    public_registry: FixtureRegistry, verdaccio: Verdaccio, gate: PublishGate,
    mirrorgate: MirrorgateFactory,
) -> None:
    name = f"{queue_backend}-kill"
    env = {**registry_environment(public_registry, verdaccio, gate), **queue_environment}

    pod, killed = kill_a_worker_mid_job(mirrorgate, env, public_registry, gate, name, at)

    outcome = "published" if at is KillPoint.MID_FETCH else "already_present"
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome=outcome) == 1,
             timeout=30, message=f"the second worker to count the job {outcome}")
    assert_verdaccio_holds_once(verdaccio, public_registry, gate, name, "1.0.0")
    assert redelivery_lines(pod.worker, name, deliveries=2), pod.worker.stderr()
    assert redelivery_lines(killed, name, deliveries=2) == []
    assert pod.worker.metric("mirrorgate_jobs_total") == 1
    assert_health_on_its_own_listener(pod.worker, pod.proxy)
    assert_exits_0_on_sigterm(pod.proxy, pod.worker)
