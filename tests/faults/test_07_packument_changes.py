"""Row 7 of the faults table: the packument changes between enqueue and processing.

> | 7 | the packument changes between enqueue and processing (a new digest for the same
> version) | the worker verifies against the digest captured at enqueue; the substituted bytes
> are never published |

Since issue 14 the worker re-gates every job against the packument as it is when the job runs,
so a job whose digest public no longer publishes is refused before any download: neither the
bytes the job names nor the ones public names now are published from it (the next pull
enqueues what public says then, verified on the way to the client).

The sidecar shape over SQS: `mirrorgate serve --no-worker` serves a version and enqueues its
job; only then is the public package swapped, and only then does `mirrorgate worker` start, so
the change falls exactly between enqueue and processing. Two swaps:

- a new integrity and new bytes (what a re-published or hijacked version looks like);
- a new integrity over the original bytes.

Either way the job is retired as `digest-mismatch` with a security line, Verdaccio stays empty,
and the worker's only public requests are for the packument (its read, then the conditional
read that confirms a refusal, `gate.packuments.public`): no tarball is downloaded.
"""

from __future__ import annotations

from tests.e2e.sidecar import PublishGate, enqueue_one, registry_environment
from tests.faults.guarded import GuardedFactory
from tests.faults.worker_jobs import logged
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import (
    FixturePackage,
    make_package,
    make_version,
    tarball_filename,
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


def assert_refused_unfetched(worker: MirrorgateProcess, public: FixtureRegistry,
                             verdaccio: Verdaccio, gate: PublishGate, name: str,
                             admitted: str) -> None:
    """The job was retired as digest-mismatch after reading the packument, with no download."""
    wait_for(lambda: worker.metric("mirrorgate_jobs_retired_total",
                                   reason="digest-mismatch") == 1,
             timeout=20, message="the worker to refuse the job against today's packument")
    [line] = logged(worker, "mirror_job_refused")
    assert line["security"] is True
    assert line["reason"] == "digest-mismatch"
    assert line["job"] == admitted
    assert worker.metric("mirrorgate_tampered_total") == 0
    assert worker.metric("mirrorgate_jobs_total", outcome="published") == 0
    assert gate.publishes == []
    assert verdaccio.versions(name) == []
    assert verdaccio.tarball(name, tarball_filename(name, "1.0.0")) is None
    asked = public.requests
    assert [seen.path for seen in asked] == [f"/{name}", f"/{name}"]
    assert "If-None-Match" in asked[1].headers  # the refusal confirmed, public unchanged


async def test_new_bytes_under_a_new_digest_are_refused_before_any_download(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    gate: PublishGate, sqs_server: SqsServer,
) -> None:
    original = make_package("shifty", ["1.0.0"])
    public_registry.add(original)
    admitted = original.versions["1.0.0"]
    swap = substitute("shifty")
    changed = swap.versions["1.0.0"]
    assert changed.integrity != admitted.integrity

    worker = await enqueue_then_start_worker(guarded, public_registry, verdaccio, gate,
                                             sqs_server, "shifty", swap)

    assert_refused_unfetched(worker, public_registry, verdaccio, gate, "shifty",
                             admitted.integrity)


async def test_a_new_digest_over_the_original_bytes_is_refused_too(
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

    assert_refused_unfetched(worker, public_registry, verdaccio, gate, "steadfast",
                             admitted.integrity)
