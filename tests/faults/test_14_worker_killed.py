"""Row 14 of the faults table: the worker is killed with SIGKILL in the middle of a job.

> | 14 | `kill -9` of the worker mid-publish on SQS and on Pub/Sub | the job is redelivered and
> the version ends up published exactly once |

The end-to-end suite already runs this scenario (`tests/e2e/test_sidecar.py`, through
`tests/e2e/sidecar.kill_a_worker_mid_job`). This file is the thin wrapper that puts the row's
case in the faults table: the same helper and fixtures, the kill mid-publish (Verdaccio has
stored the version, the worker dies before it can ack), one test run on each backend
(`queue_environment`), every process started through `guarded`, so the Verdaccio token is
also watched across a worker that dies without a chance to flush anything and the one that
takes its job over (row 16). The kill mid-fetch stays in the end-to-end suite only: each
case waits out a 10 s visibility window, and the faults suite keeps to the row.

Publication is counted at the gate in front of Verdaccio (PUTs it stored), not inferred from
what Verdaccio lists, since Verdaccio refuses a second copy of a version whatever happens.
"""

from __future__ import annotations

from tests.e2e.sidecar import (
    KillPoint,
    PublishGate,
    assert_exits_0_on_sigterm,
    assert_verdaccio_holds_once,
    kill_a_worker_mid_job,
    redelivery_lines,
    registry_environment,
)
from tests.faults.guarded import GuardedFactory
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.processes import wait_for
from tests.servers.verdaccio import Verdaccio


def test_a_worker_killed_mid_publish_is_redelivered_and_publishes_exactly_once(
    queue_backend: str, queue_environment: dict[str, str], guarded: GuardedFactory,
    public_registry: FixtureRegistry, verdaccio: Verdaccio, gate: PublishGate,
) -> None:
    name = f"killed-{queue_backend}"
    env = {**registry_environment(public_registry, verdaccio, gate), **queue_environment}

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
