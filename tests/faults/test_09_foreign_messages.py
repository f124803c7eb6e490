"""Row 9 of the faults table: messages on the queue that mirrorgate did not write.

> | 9 | a queue message not written by mirrorgate: bad JSON, unknown version field, no digest, a
> tarball URL off the public origin | retired with a log line and a metric; never fetched; the
> worker keeps running |

A real `mirrorgate worker` runs over moto's SQS server and over the Pub/Sub emulator; the test
puts foreign bodies on the queue beside it (the row's four, and two well-formed jobs whose name
or version is a path), then one well-formed job. Each foreign message is
retired (`mirror_retired` with its reason, `mirrorgate_jobs_retired_total{reason}`), neither
the public upstream nor the host an off-origin URL names sees a request for it, and the
well-formed job after them is published: the worker kept running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from mirrorgate.mirror import encode_job
from tests.faults.guarded import GuardedFactory
from tests.faults.worker_jobs import (
    Watchers,
    admitted_job,
    logged,
    send_to_sqs,
    stored_tarball,
    stored_version,
    watchers,
)
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.pubsub_server import PubSubAdmin, pubsub_environment
from tests.servers.sqs_server import SqsServer, sqs_environment


@dataclass(frozen=True)
class Foreign:
    """A body no mirrorgate proxy wrote, the retire reason it earns and words of its detail."""

    label: str
    body: bytes
    reason: str
    detail: str


def _edited(public: FixtureRegistry, edit: Callable[[dict[str, object]], object]) -> bytes:
    document = orjson.loads(encode_job(admitted_job(public, "steady", "1.0.0")))
    edit(document)
    return orjson.dumps(document)


def _artifact(document: dict[str, object]) -> dict[str, object]:
    artifact = document["artifact"]
    assert isinstance(artifact, dict)
    return artifact


def foreign_messages(public: FixtureRegistry, watch: Watchers) -> list[Foreign]:
    off_origin = f"http://localhost:{watch.ipv4.port}{tarball_path('steady', '1.0.0')}"
    return [
        Foreign("bad JSON", b'{"v": 1, "name": "steady", "version": ', "undecodable",
                "not JSON"),
        Foreign("an unknown version field", _edited(public, lambda d: d.update(v=2)),
                "undecodable", "unknown codec version v=2"),
        Foreign("an empty digest list",
                _edited(public, lambda d: _artifact(d).update(digests=[])),
                "undecodable", "artifact.digests is empty"),
        Foreign("no digest field", _edited(public, lambda d: _artifact(d).pop("digests")),
                "undecodable", "missing field artifact.digests"),
        Foreign("a tarball URL off the public origin",
                encode_job(admitted_job(public, "steady", "1.0.0", tarball_url=off_origin)),
                "off-origin", f"localhost:{watch.ipv4.port}"),
        # well-formed, but naming a path outside the store: refused before any fetch or write
        Foreign("a package name that climbs out of the store",
                _edited(public, lambda d: d.update(name="../../steady")), "invalid-name",
                "'../../steady'"),
        Foreign("a version that is a path", _edited(public, lambda d: d.update(version="1.0.0/..")),
                "invalid-version", "'1.0.0/..'"),
    ]


def start_worker(guarded: GuardedFactory, public: FixtureRegistry,
                 queue_env: dict[str, str]) -> MirrorgateProcess:
    """A worker publishing into its own file store (no registry needed to see what it did)."""
    return guarded("worker", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url, **queue_env})


async def assert_foreign_messages_are_retired_and_the_worker_carries_on(
    guarded: GuardedFactory, public: FixtureRegistry, queue_env: dict[str, str],
    send: Callable[..., Awaitable[None]], extra: tuple[Foreign, ...] = (),
) -> None:
    package = make_package("steady", ["1.0.0"])
    public.add(package)
    with watchers() as watch:
        foreign = [*foreign_messages(public, watch), *extra]
        worker = start_worker(guarded, public, queue_env)

        await send(*(message.body for message in foreign))
        await send(encode_job(admitted_job(public, "steady", "1.0.0")))

        wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
                 timeout=30, message="the well-formed job after the foreign ones to publish")
        wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="retired")
                 == len(foreign), timeout=15, message="every foreign message to be retired")
        assert watch.requests() == []

    for reason in {message.reason for message in foreign}:
        expected = sum(1 for message in foreign if message.reason == reason)
        assert worker.metric("mirrorgate_jobs_retired_total", reason=reason) == expected, reason
    retired = logged(worker, "mirror_retired", len(foreign))
    assert len(retired) == len(foreign)
    for message in foreign:
        assert [line for line in retired if line["reason"] == message.reason
                and message.detail in line["detail"]], f"no mirror_retired line for {message.label}"
    assert all(line["level"] == "warning" for line in retired)
    # the well-formed job's re-gate (the packument), then its tarball; nothing for the others
    assert [seen.path for seen in public.requests] == ["/steady",
                                                       tarball_path("steady", "1.0.0")]
    assert stored_version(worker, "steady", "1.0.0") is not None
    assert stored_tarball(worker, "steady", "1.0.0") == package.versions["1.0.0"].tarball
    assert worker.returncode is None
    assert worker.get("livez").status == 200
    assert worker.metric("mirrorgate_jobs_total", outcome="retried") == 0


async def test_foreign_sqs_messages_are_retired_never_fetched_and_the_worker_keeps_running(
    guarded: GuardedFactory, public_registry: FixtureRegistry, sqs_server: SqsServer,
) -> None:
    queue = await sqs_server.create_queue(visibility=10)

    async def send(*bodies: bytes) -> None:
        await send_to_sqs(sqs_server, queue.url, *bodies)

    await assert_foreign_messages_are_retired_and_the_worker_carries_on(
        guarded, public_registry, sqs_environment(sqs_server, queue.url), send)


async def test_foreign_pubsub_messages_are_retired_never_fetched_and_the_worker_keeps_running(
    guarded: GuardedFactory, public_registry: FixtureRegistry, pubsub_emulator: str,
) -> None:
    admin = PubSubAdmin(pubsub_emulator)
    try:
        names = await admin.create(dead_letter_attempts=5, ack_deadline=10)

        async def send(*bodies: bytes) -> None:
            await admin.publish_raw(names.topic, *bodies)

        not_text = Foreign("bytes that are not UTF-8", b"\xff\xfe\x00\x9c not text",
                           "undecodable", "not JSON")
        await assert_foreign_messages_are_retired_and_the_worker_carries_on(
            guarded, public_registry, pubsub_environment(pubsub_emulator, names), send,
            extra=(not_text,))
    finally:
        await admin.close()
