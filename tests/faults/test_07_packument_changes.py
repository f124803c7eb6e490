"""Row 7 of the faults table: the packument changes between enqueue and processing.

> | 7 | the packument changes between enqueue and processing (a new digest for the same
> version) | the worker verifies against the digest captured at enqueue; the substituted bytes
> are never published |

The sidecar shape over SQS: `mirrorgate serve --no-worker` serves a version and enqueues its
job; only then is the public package swapped, and only then does `mirrorgate worker` start, so
the change falls exactly between enqueue and processing. Two swaps:

- a new integrity and new bytes (what a re-published or hijacked version looks like): the
  worker refuses them against the digest in the job, although the packument now vouches for
  them, and Verdaccio stays empty;
- a new integrity over the original bytes: the worker publishes the original bytes with the
  original integrity, because the job, not today's packument, says what was admitted.

The worker never reads the public packument at all: its only public request is the tarball.
"""

from __future__ import annotations

from tests.e2e.sidecar import PublishGate, enqueue_one, registry_environment
from tests.faults.conftest import GuardedFactory
from tests.faults.worker_jobs import logged
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import (
    FixturePackage,
    make_package,
    make_version,
    tarball_filename,
    tarball_path,
)
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.sqs_server import SqsServer, sqs_environment
from tests.servers.verdaccio import Verdaccio


def substitute(name: str) -> FixturePackage:
    """The same version number over other bytes (a longer file), with their own digests."""
    return make_package(name, [make_version(name, "1.0.0", files={
        "index.js": b"module.exports = function () { /* not what was admitted */ };\n"})])


async def enqueue_then_start_worker(
    guarded: GuardedFactory, public: FixtureRegistry, verdaccio: Verdaccio, gate: PublishGate,
    sqs_server: SqsServer, name: str, swap: FixturePackage,
) -> MirrorgateProcess:
    """The proxy enqueues `name`@1.0.0 as first served; the public package becomes `swap`; the
    worker starts only then."""
    queue = await sqs_server.create_queue(visibility=10)
    env = {**registry_environment(public, verdaccio, gate),
           **sqs_environment(sqs_server, queue.url)}
    proxy = guarded("serve --no-worker", env)
    enqueue_one(proxy, public, name, "1.0.0")
    public.add(swap)
    public.clear_requests()
    return guarded("worker", env)


async def test_new_bytes_under_a_new_digest_are_refused_against_the_digest_captured_at_enqueue(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    gate: PublishGate, sqs_server: SqsServer,
) -> None:
    original = make_package("shifty", ["1.0.0"])
    public_registry.add(original)
    admitted = original.versions["1.0.0"]
    swap = substitute("shifty")
    changed = swap.versions["1.0.0"]
    assert changed.integrity != admitted.integrity
    assert len(changed.tarball) != len(admitted.tarball)

    worker = await enqueue_then_start_worker(guarded, public_registry, verdaccio, gate,
                                             sqs_server, "shifty", swap)

    wait_for(lambda: worker.metric("mirrorgate_tampered_total") == 1, timeout=20,
             message="the worker to refuse the substituted bytes")
    assert public_registry.packument("shifty")["versions"]["1.0.0"]["dist"]["integrity"] \
        == changed.integrity  # the packument vouches for the new bytes by now
    [line] = logged(worker, "mirror_size_mismatch")
    assert line["security"] is True
    assert line["expected"] == admitted.integrity
    assert line["actual"] == changed.integrity
    assert worker.metric("mirrorgate_jobs_total", outcome="tampered") == 1
    assert worker.metric("mirrorgate_jobs_total", outcome="published") == 0
    assert gate.publishes == []
    assert verdaccio.versions("shifty") == []
    assert verdaccio.tarball("shifty", tarball_filename("shifty", "1.0.0")) is None
    assert [seen.path for seen in public_registry.requests] == [tarball_path("shifty", "1.0.0")]


async def test_the_original_bytes_are_published_with_the_digest_captured_at_enqueue(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    gate: PublishGate, sqs_server: SqsServer,
) -> None:
    original = make_package("steadfast", ["1.0.0"])
    public_registry.add(original)
    admitted = original.versions["1.0.0"]
    other = substitute("steadfast").versions["1.0.0"]
    relabelled = make_package("steadfast", [admitted.with_dist(integrity=other.integrity,
                                                               shasum=other.shasum)])

    worker = await enqueue_then_start_worker(guarded, public_registry, verdaccio, gate,
                                             sqs_server, "steadfast", relabelled)

    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=20, message="the original bytes to be published")
    assert public_registry.packument("steadfast")["versions"]["1.0.0"]["dist"]["integrity"] \
        == other.integrity
    stored = verdaccio.packument("steadfast")
    assert stored is not None
    assert stored["versions"]["1.0.0"]["dist"]["integrity"] == admitted.integrity
    assert stored["versions"]["1.0.0"]["dist"]["shasum"] == admitted.shasum
    assert verdaccio.tarball("steadfast", tarball_filename("steadfast", "1.0.0")) \
        == admitted.tarball
    assert gate.stored_publishes() == 1
    assert worker.metric("mirrorgate_tampered_total") == 0
    assert [seen.path for seen in public_registry.requests] \
        == [tarball_path("steadfast", "1.0.0")]
