"""Row 14 of the faults table: the worker is killed with SIGKILL in the middle of a job.

> | 14 | `kill -9` of the worker mid-publish on SQS and on Pub/Sub | the job is redelivered and
> the version ends up published exactly once |

The end-to-end suites already run this scenario (`tests/e2e/test_sidecar_sqs.py` and
`tests/e2e/test_sidecar_pubsub.py`, through `tests/e2e/sidecar.kill_a_worker_mid_job`). This
file is the thin wrapper that puts the row's case in the faults table: the same helper, the
kill mid-publish (Verdaccio has stored the version, the worker dies before it can ack), both
backends in one parametrised test, every process started through `guarded`, so the Verdaccio
token is also watched across a worker that dies without a chance to flush anything and the one
that takes its job over (row 16). The kill mid-fetch stays in the end-to-end files only: each
case waits out a 10 s visibility window, and the faults suite keeps to the row.

Publication is counted at the gate in front of Verdaccio (PUTs it stored), not inferred from
what Verdaccio lists, since Verdaccio refuses a second copy of a version whatever happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

import pytest

from tests.e2e.sidecar import (
    KillPoint,
    PublishGate,
    assert_exits_0_on_sigterm,
    assert_verdaccio_holds_once,
    gate_in_front_of,
    kill_a_worker_mid_job,
    redelivery_lines,
    registry_environment,
)
from tests.faults.conftest import GuardedFactory
from tests.faults.worker_jobs import pubsub_environment, sqs_environment
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.processes import wait_for
from tests.servers.pubsub_server import PubSubNames
from tests.servers.sqs_server import SqsServer
from tests.servers.verdaccio import Verdaccio


@pytest.fixture
def gate(verdaccio: Verdaccio) -> Iterator[PublishGate]:
    with gate_in_front_of(verdaccio) as started:
        yield started


async def queue_environment(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """A fresh queue on `backend`; Pub/Sub with a dead-letter policy, the only way it reports
    the delivery count the redelivery is recognised by."""
    if backend == "sqs":
        server: SqsServer = request.getfixturevalue("sqs_server")
        queue = await server.create_queue(visibility=10)
        return sqs_environment(server, queue.url)
    emulator: str = request.getfixturevalue("pubsub_emulator")
    make: Callable[..., Awaitable[PubSubNames]] = request.getfixturevalue("make_pubsub_names")
    names = await make(dead_letter_attempts=5, ack_deadline=10)
    return pubsub_environment(emulator, names)


@pytest.mark.parametrize("backend", ["sqs", "pubsub"])
async def test_a_worker_killed_mid_publish_is_redelivered_and_publishes_exactly_once(
    backend: str, request: pytest.FixtureRequest, guarded: GuardedFactory,
    public_registry: FixtureRegistry, verdaccio: Verdaccio, gate: PublishGate,
) -> None:
    name = f"killed-{backend}"
    env = {**registry_environment(public_registry, verdaccio, gate),
           **await queue_environment(backend, request)}

    pod, killed = kill_a_worker_mid_job(guarded, env, public_registry, gate, name,
                                        KillPoint.MID_PUBLISH)

    # the killed worker's PUT was stored: the next one finds it there, with the job's integrity
    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_total", outcome="already_present") == 1,
             timeout=30, message="the second worker to find the version already published")
    assert_verdaccio_holds_once(verdaccio, public_registry, gate, name, "1.0.0")
    assert redelivery_lines(pod.worker, name, deliveries=2), pod.worker.stderr()
    assert redelivery_lines(killed, name, deliveries=2) == []
    assert pod.worker.metric("mirrorgate_jobs_total") == 1
    assert_exits_0_on_sigterm(pod.proxy, pod.worker)
