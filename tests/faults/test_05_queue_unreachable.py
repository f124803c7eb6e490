"""Row 5 of the faults table: the queue backend is unreachable.

> | 5 | queue backend unreachable (SQS endpoint down, Pub/Sub emulator stopped) | every client
> request still answered; enqueue failures counted in `/metrics`; jobs sent once it is back,
> within the buffer's bound |

The real `mirrorgate serve --no-worker` reaches moto's SQS server, or the Pub/Sub emulator,
through a `TcpRelay` the test cuts once the proxy is up (its start-up check needs the queue)
and restores later on the same port; the queue's server keeps its state meanwhile. With
`MIRROR_QUEUE_MAX_DEPTH=5`, eight distinct tarballs are pulled during the outage: every pull
is answered at once, sends fail and are counted (`mirrorgate_enqueue_failures_total`), the
three jobs past the bound are dropped and counted (`mirrorgate_jobs_dropped_total`, one
`mirror_queue_dropped` line for the first drop), and once the relay is back exactly the five
buffered jobs arrive, which the test reads from the queue itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from mirrorgate.mirror import MirrorJob, decode_job
from tests.faults.guarded import GuardedFactory
from tests.faults.relay import TcpRelay
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.pubsub_server import PubSubAdmin, PubSubNames
from tests.servers.sqs_server import SQS_CREDENTIALS, SQS_REGION, SqsServer

DEPTH = 5
PULLS = 8
VERSIONS = [f"1.0.{i}" for i in range(PULLS)]
MakeNames = Callable[..., Awaitable[PubSubNames]]


def pull_during_the_outage(proxy: MirrorgateProcess, public: FixtureRegistry) -> float:
    """Pull every version once; returns the slowest answer's seconds."""
    slowest = 0.0
    for version in VERSIONS:
        started = time.monotonic()
        reply = http_request("GET", proxy.registry_url.rstrip("/")
                             + tarball_path("buffered", version))
        slowest = max(slowest, time.monotonic() - started)
        assert reply.status == 200, reply.body[:300]
        assert reply.body == public.package("buffered").versions[version].tarball
    return slowest


def assert_outage_accounted(proxy: MirrorgateProcess, provider: str, slowest: float) -> None:
    assert slowest < 2, f"a pull took {slowest:.1f} s while the queue was unreachable"
    wait_for(lambda: proxy.metric("mirrorgate_enqueue_failures_total", provider=provider) >= 1,
             timeout=30, message="a failed send to be counted")
    assert proxy.metric("mirrorgate_jobs_dropped_total", provider=provider) == PULLS - DEPTH
    assert proxy.metric("mirrorgate_queue_depth", provider=provider) == DEPTH
    assert proxy.metric("mirrorgate_jobs_sent_total", provider=provider) == 0
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == DEPTH
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="200") == PULLS
    wait_for(lambda: proxy.events("mirror_queue_send_failed"), timeout=5,
             message="the mirror_queue_send_failed line")
    [report] = proxy.events("mirror_queue_dropped")
    assert (report["provider"], report["dropped"], report["cap"]) == (provider, 1, DEPTH)


def assert_buffered_jobs_arrived(proxy: MirrorgateProcess, provider: str,
                                 jobs: list[MirrorJob]) -> None:
    assert sorted(job.version for job in jobs) == VERSIONS[:DEPTH]
    assert {job.name for job in jobs} == {"buffered"}
    assert proxy.metric("mirrorgate_jobs_sent_total", provider=provider) == DEPTH
    assert proxy.metric("mirrorgate_queue_depth", provider=provider) == 0
    assert proxy.returncode is None


def proxy_environment(public: FixtureRegistry, queue: Mapping[str, str]) -> dict[str, str]:
    return {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
            "MIRROR_QUEUE_MAX_DEPTH": str(DEPTH), **queue}


async def test_pulls_are_answered_while_sqs_is_unreachable_and_the_buffered_jobs_arrive_after(
    guarded: GuardedFactory, sqs_server: SqsServer, public_registry: FixtureRegistry,
) -> None:
    public_registry.add(make_package("buffered", VERSIONS))
    queue = await sqs_server.create_queue(visibility=30)
    with serving(TcpRelay(sqs_server.endpoint.removeprefix("http://")),
                 "the relay to SQS") as relay:
        proxy = guarded("serve --no-worker", proxy_environment(public_registry, {
            "MIRROR_QUEUE_PROVIDER": "sqs", "MIRROR_SQS_QUEUE_URL": queue.url,
            "AWS_REGION": SQS_REGION, "AWS_ENDPOINT_URL_SQS": relay.url,
            "AWS_ACCESS_KEY_ID": SQS_CREDENTIALS[0],
            "AWS_SECRET_ACCESS_KEY": SQS_CREDENTIALS[1]}))
        relay.cut()

        slowest = pull_during_the_outage(proxy, public_registry)
        assert_outage_accounted(proxy, "sqs", slowest)

        relay.restore()
        wait_for(lambda: proxy.metric("mirrorgate_jobs_sent_total", provider="sqs") == DEPTH,
                 timeout=30, message="the buffered jobs to be sent once SQS is back")
        jobs = await receive_from_sqs(sqs_server, queue.url, DEPTH)
        assert_buffered_jobs_arrived(proxy, "sqs", jobs)


async def receive_from_sqs(server: SqsServer, url: str, want: int) -> list[MirrorJob]:
    jobs: list[MirrorJob] = []
    deadline = time.monotonic() + 20
    async with server.client() as sqs:
        while time.monotonic() < deadline:
            answer = await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                               WaitTimeSeconds=1)
            jobs.extend(decode_job(message["Body"]) for message in answer.get("Messages", []))
            if len(jobs) > want:
                break
            if len(jobs) == want:  # one more poll: nothing beyond the bound may arrive
                answer = await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                   WaitTimeSeconds=1)
                jobs.extend(decode_job(m["Body"]) for m in answer.get("Messages", []))
                break
    return jobs


async def test_pulls_are_answered_while_pubsub_is_unreachable_and_the_buffered_jobs_arrive_after(
    guarded: GuardedFactory, pubsub_emulator: str, make_pubsub_names: MakeNames,
    public_registry: FixtureRegistry,
) -> None:
    public_registry.add(make_package("buffered", VERSIONS))
    names = await make_pubsub_names()
    with serving(TcpRelay(pubsub_emulator), "the relay to Pub/Sub") as relay:
        proxy = guarded("serve --no-worker", proxy_environment(public_registry, {
            "MIRROR_QUEUE_PROVIDER": "pubsub", "MIRROR_PUBSUB_TOPIC": names.topic,
            "MIRROR_PUBSUB_SUBSCRIPTION": names.subscription,
            "PUBSUB_EMULATOR_HOST": relay.address}))
        relay.cut()

        slowest = pull_during_the_outage(proxy, public_registry)
        assert_outage_accounted(proxy, "pubsub", slowest)

        relay.restore()
        wait_for(lambda: proxy.metric("mirrorgate_jobs_sent_total", provider="pubsub")
                 == DEPTH, timeout=60, message="the buffered jobs to be sent once Pub/Sub is back")
        jobs = await receive_from_pubsub(pubsub_emulator, names, DEPTH)
        assert_buffered_jobs_arrived(proxy, "pubsub", jobs)


async def receive_from_pubsub(host: str, names: PubSubNames, want: int) -> list[MirrorJob]:
    admin = PubSubAdmin(host)
    jobs: list[MirrorJob] = []
    try:
        deadline = time.monotonic() + 20
        empty_pulls = 0
        while time.monotonic() < deadline and empty_pulls < 2:
            try:
                answer = await admin.subscriber.pull(subscription=names.subscription,
                                                     max_messages=10, timeout=2)
            except Exception as error:  # the emulator answers an empty pull at the deadline
                if "Deadline" not in type(error).__name__:
                    raise
                answer = None
            received = list(answer.received_messages) if answer is not None else []
            if not received:
                empty_pulls += 1 if len(jobs) >= want else 0
                await asyncio.sleep(0.1)
                continue
            jobs.extend(decode_job(m.message.data) for m in received)
            await admin.subscriber.acknowledge(subscription=names.subscription,
                                               ack_ids=[m.ack_id for m in received], timeout=10)
    finally:
        await admin.close()
    return jobs
