"""What only the SQS backend promises, checked against moto's server on loopback.

Long-poll, visibility, release and dead-lettering as SQS does them; the send buffer's batches
and its answer to failed entries; bodies that are not jobs; jobs too big for the queue; the
serve path never waiting on a dead endpoint; start-up errors that name what to set.

Failed batch entries and call counts are observed through `SqsFront`, a small endpoint in
front of moto that forwards every call, records it, and can answer chosen entries of the next
SendMessageBatch as failed, in SQS's own wire format (moto never fails an entry on its own
unless it carries a delay out of range, which mirrorgate never sends).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.mirror import MirrorQueue, QueueStats, ReceiptHandle, Seconds
from tests.builders import make_job
from tests.queue.harness import after_a_visibility_window, receive_within
from tests.servers.ports import free_port
from tests.servers.processes import until
from tests.servers.sqs_server import (
    SQS_CREDENTIALS,
    SQS_REGION,
    MotoServer,
    SqsServer,
    sqs_settings,
)

_HOP_BY_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection",
                         "accept-encoding", "content-encoding", "keep-alive", "date", "server"})


class SqsFront:
    """An SQS endpoint that forwards to moto, records each call, and fails chosen entries."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.calls: list[tuple[str, int]] = []
        self.fail_next_send: dict[str, tuple[bool, str]] = {}
        self.endpoint = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def entries(self, operation: str) -> list[int]:
        return [count for name, count in self.calls if name == operation]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.endpoint = f"http://{host}:{port}"
        self._session = aiohttp.ClientSession()

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        operation = request.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        body = await request.read()
        failed: list[dict[str, Any]] = []
        if operation.endswith("Batch"):
            document = json.loads(body)
            self.calls.append((operation, len(document["Entries"])))
            if operation == "SendMessageBatch" and self.fail_next_send:
                plan, self.fail_next_send = self.fail_next_send, {}
                kept = []
                for entry in document["Entries"]:
                    if entry["Id"] not in plan:
                        kept.append(entry)
                        continue
                    sender_fault, code = plan[entry["Id"]]
                    failed.append({"Id": entry["Id"], "SenderFault": sender_fault,
                                   "Code": code, "Message": "failed by the test front"})
                document["Entries"] = kept
                body = json.dumps(document).encode()
        else:
            self.calls.append((operation, 1))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.post(self.upstream + request.path_qs, data=body,
                                      headers=headers) as answer:
            data = await answer.read()
            status = answer.status
            answer_headers = {k: v for k, v in answer.headers.items()
                              if k.lower() not in _HOP_BY_HOP}
        if failed and status == 200:
            document = json.loads(data)
            document.setdefault("Failed", []).extend(failed)
            data = json.dumps(document).encode()
        return web.Response(body=data, status=status, headers=answer_headers)


@pytest.fixture
async def sqs_front(sqs_server: SqsServer) -> AsyncIterator[SqsFront]:
    front = SqsFront(sqs_server.endpoint)
    await front.start()
    yield front
    await front.stop()


@pytest.fixture
async def opened(sqs_server: SqsServer) -> AsyncIterator[list[MirrorQueue]]:
    """Queues a test opens, closed at its end whatever happened."""
    queues: list[MirrorQueue] = []
    yield queues
    for queue in queues:
        await queue.close()


async def messages_in(sqs_server: SqsServer, url: str) -> int:
    async with sqs_server.client() as sqs:
        answer = await sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                          "ApproximateNumberOfMessagesNotVisible"])
    attributes = answer["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"])


def hermetic_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS setting from this machine reaches botocore, and no metadata endpoint is asked."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# --- receiving -----------------------------------------------------------------------------


async def test_a_long_poll_returns_as_soon_as_a_message_arrives(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue()
    queue = await sqs_server.open(created.url, poll_wait=10)
    opened.append(queue)
    waiting = asyncio.create_task(queue.receive())
    await until(lambda: sqs_server.polls_waiting(created.url) == 1, 5)  # moto holds it
    started = time.monotonic()
    await queue.enqueue(make_job())
    got = await asyncio.wait_for(waiting, 5)
    assert [m.job.name for m in got if m.job] == ["left-pad"]
    assert time.monotonic() - started < 2


async def test_waiting_out_a_visibility_window_by_its_marker_sees_an_unacked_message_come_back(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    # the event-based wait the worker suites use for "nothing came back" can itself fail
    created = await sqs_server.create_queue(visibility=1)
    queue = await sqs_server.open(created.url, poll_wait=1, visibility=1)
    opened.append(queue)
    await queue.enqueue(make_job("forgotten"))
    assert [m.job.name for m in await receive_within(queue, 5) if m.job] == ["forgotten"]
    back = await after_a_visibility_window(queue)  # received above and never acked
    assert [(m.job.name, m.deliveries) for m in back if m.job] == [("forgotten", 2)]


async def test_a_lapsed_visibility_redelivers_the_message_with_its_count_raised_by_one(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=1)
    opened.append(queue)
    await queue.enqueue(make_job())
    [first] = await receive_within(queue, 3)
    [second] = await receive_within(queue, 4)
    assert (first.deliveries, second.deliveries) == (1, 2)
    assert second.message_id == first.message_id
    assert second.receipt != first.receipt


async def test_extend_visibility_holds_a_delivery_past_its_window(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue()
    queue = await sqs_server.open(created.url, visibility=1)
    opened.append(queue)
    await queue.enqueue(make_job())
    [message] = await receive_within(queue, 3)
    await queue.extend_visibility(message.receipt, Seconds(4))
    assert await receive_within(queue, 2.0) == []
    [back] = await receive_within(queue, 5)
    assert back.deliveries == 2


async def test_a_release_makes_the_delivery_visible_at_once(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30, poll_wait=5)
    opened.append(queue)
    await queue.enqueue(make_job())
    [message] = await receive_within(queue, 3)
    await queue.extend_visibility(message.receipt, Seconds(0))
    started = time.monotonic()
    [back] = await queue.receive()
    assert time.monotonic() - started < 1
    assert back.deliveries == 2


async def test_a_redrive_policy_moves_a_message_to_its_dead_letter_queue(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30, max_receive_count=2)
    assert created.dlq_url is not None
    queue = await sqs_server.open(created.url, visibility=30)
    dead = await sqs_server.open(created.dlq_url, visibility=30)
    opened.extend([queue, dead])
    job = make_job("tampered-pkg")
    await queue.enqueue(job)
    for expected in (1, 2):
        [message] = await receive_within(queue, 3)
        assert message.deliveries == expected
        await queue.extend_visibility(message.receipt, Seconds(0))
    assert await queue.receive() == []
    [parked] = await receive_within(dead, 3)
    assert parked.job == job


async def test_a_body_that_is_not_a_job_reaches_the_worker_as_a_message_to_retire(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30)
    opened.append(queue)
    async with sqs_server.client() as sqs:
        for body in ("not json at all", '{"v": 2, "name": "x"}', "[1, 2]"):
            await sqs.send_message(QueueUrl=created.url, MessageBody=body)
    got = await receive_within(queue, 3, want=3)
    assert [m.job for m in got] == [None, None, None]
    assert all(m.problem and m.deliveries == 1 and m.message_id for m in got)
    assert any("not JSON" in (m.problem or "") for m in got)
    assert any("codec version" in (m.problem or "") for m in got)
    for message in got:
        await queue.ack(message.receipt)
    assert await messages_in(sqs_server, created.url) == 0


async def test_a_receive_while_the_endpoint_is_down_logs_and_answers_empty(
    sqs_server: SqsServer,
) -> None:
    created = await sqs_server.create_queue()
    moto = MotoServer()
    queue = await sqs_server.open(created.url, endpoint_url=moto.endpoint, attempts=1,
                                  connect_timeout=1.0)
    moto.stop()
    try:
        with capture_logs() as logs:
            started = time.monotonic()
            got = [await queue.receive() for _ in range(3)]
        assert got == [[], [], []]
        assert time.monotonic() - started < 3
        assert [e["event"] for e in logs].count("mirror_queue_receive_failed") == 3
    finally:
        await queue.close()


# --- acknowledging -------------------------------------------------------------------------


async def test_acks_issued_together_share_delete_batches_of_at_most_ten(
    sqs_server: SqsServer, sqs_front: SqsFront, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30, endpoint_url=sqs_front.endpoint)
    opened.append(queue)
    for i in range(12):
        await queue.enqueue(make_job(f"pkg-{i}"))
    got = await receive_within(queue, 5, want=12)
    assert len(got) == 12
    await asyncio.gather(*(queue.ack(m.receipt) for m in got))
    assert sorted(sqs_front.entries("DeleteMessageBatch")) == [2, 10]
    assert sqs_front.entries("DeleteMessage") == []
    assert await messages_in(sqs_server, created.url) == 0


async def test_a_failed_ack_or_extend_is_logged_and_not_raised(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue()
    queue = await sqs_server.open(created.url)
    opened.append(queue)
    with capture_logs() as logs:
        await queue.ack(ReceiptHandle("not-a-receipt"))
        await asyncio.gather(queue.ack(ReceiptHandle("bad-1")), queue.ack(ReceiptHandle("bad-2")))
        await queue.extend_visibility(ReceiptHandle("not-a-receipt"), Seconds(30))
    events = [e["event"] for e in logs]
    assert events.count("mirror_queue_ack_failed") == 2
    assert events.count("mirror_queue_extend_failed") == 1
    assert [e["jobs"] for e in logs if e["event"] == "mirror_queue_ack_failed"] == [1, 2]


# --- sending -------------------------------------------------------------------------------


async def test_the_buffer_sends_batches_of_at_most_ten(
    sqs_server: SqsServer, sqs_front: SqsFront, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30, endpoint_url=sqs_front.endpoint)
    opened.append(queue)
    for i in range(25):
        await queue.enqueue(make_job(f"pkg-{i}"))
    await until(lambda: queue.stats().sent == 25, 5)
    assert sqs_front.entries("SendMessageBatch") == [10, 10, 5]
    assert queue.stats() == QueueStats(depth=0, dropped=0, sent=25, send_failures=0)
    assert await messages_in(sqs_server, created.url) == 25


async def test_failed_entries_are_retried_unless_refused_as_the_senders_fault(
    sqs_server: SqsServer, sqs_front: SqsFront, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30, endpoint_url=sqs_front.endpoint)
    opened.append(queue)
    sqs_front.fail_next_send = {"1": (False, "InternalError"),
                                "2": (True, "InvalidMessageContents")}
    with capture_logs() as logs:
        for i in range(5):
            await queue.enqueue(make_job(f"pkg-{i}"))
        await until(lambda: queue.stats().depth == 0, 5)
    assert sqs_front.entries("SendMessageBatch") == [5, 1]
    got = await receive_within(queue, 3, want=4)
    assert sorted(m.job.name for m in got if m.job) == ["pkg-0", "pkg-1", "pkg-3", "pkg-4"]
    stats = queue.stats()
    assert (stats.sent, stats.send_failures, stats.dropped) == (4, 1, 1)
    [refused] = [e for e in logs if e["event"] == "mirror_queue_send_refused"]
    assert (refused["job"], refused["code"]) == ("pkg-2@1.3.0", "InvalidMessageContents")


async def test_a_batch_refused_for_one_message_is_resent_one_message_at_a_time(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    queue = await sqs_server.open(created.url, visibility=30)
    opened.append(queue)
    async with sqs_server.client() as sqs:  # the queue shrinks after mirrorgate started
        await sqs.set_queue_attributes(QueueUrl=created.url,
                                       Attributes={"MaximumMessageSize": "1024"})
    big = make_job("big", manifest={"name": "big", "description": "x" * 2000})
    with capture_logs() as logs:
        for job in (make_job("small-a"), big, make_job("small-b")):
            await queue.enqueue(job)
        await until(lambda: queue.stats().depth == 0, 5)
    got = await receive_within(queue, 3, want=2)
    assert sorted(m.job.name for m in got if m.job) == ["small-a", "small-b"]
    assert [e["job"] for e in logs if e["event"] == "mirror_queue_send_refused"] == ["big@1.3.0"]
    assert (queue.stats().sent, queue.stats().dropped) == (2, 1)


async def test_a_job_larger_than_the_queue_accepts_is_refused_at_enqueue(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    small = await sqs_server.create_queue(attributes={"MaximumMessageSize": "2048"})
    default = await sqs_server.create_queue()
    small_queue = await sqs_server.open(small.url)
    default_queue = await sqs_server.open(default.url)
    opened.extend([small_queue, default_queue])
    with capture_logs() as logs:
        await small_queue.enqueue(make_job("wide", manifest={"description": "x" * 4000}))
        await default_queue.enqueue(make_job("huge", manifest={"readme_html": "x" * 1_100_000}))
    assert [(e["event"], e["job"]) for e in logs] == [
        ("mirror_queue_job_too_large", "wide@1.3.0"),
        ("mirror_queue_job_too_large", "huge@1.3.0"),
    ]
    assert [e["limit"] for e in logs] == [2048, 1024 * 1024]
    for queue in (small_queue, default_queue):
        assert (queue.stats().depth, queue.stats().dropped) == (0, 1)


async def test_characters_sqs_refuses_raw_travel_escaped_and_arrive_intact(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue()
    queue = await sqs_server.open(created.url)
    opened.append(queue)
    job = make_job(manifest={"description": "odd \ufffe and \uffff characters"})
    await queue.enqueue(job)
    [message] = await receive_within(queue, 3)
    assert message.job == job


async def test_enqueue_never_waits_while_the_endpoint_is_down_and_sends_once_it_is_back(
    sqs_server: SqsServer, opened: list[MirrorQueue],
) -> None:
    created = await sqs_server.create_queue(visibility=30)
    moto = MotoServer()
    queue = await sqs_server.open(created.url, endpoint_url=moto.endpoint, attempts=1,
                                  connect_timeout=1.0)
    opened.append(queue)
    moto.stop()
    jobs = [make_job(f"pkg-{i}") for i in range(200)]
    took: list[float] = []
    for i, job in enumerate(jobs):
        started = time.perf_counter()
        await queue.enqueue(job)
        took.append(time.perf_counter() - started)
        if i % 10 == 0:
            await asyncio.sleep(0.01)  # let the sender try, and fail, in between
    assert statistics.median(took) < 0.0005
    assert max(took) < 0.01
    await until(lambda: queue.stats().send_failures > 0, 10)  # the sender did try
    assert queue.stats().sent == 0
    assert queue.stats().depth == 200
    back = MotoServer(moto.port)
    try:
        await until(lambda: queue.stats().sent == 200, 10)
    finally:
        await queue.close()
        back.stop()
    assert queue.stats().depth == 0
    assert await messages_in(sqs_server, created.url) == 200


async def test_close_sends_what_is_still_buffered(sqs_server: SqsServer) -> None:
    created = await sqs_server.create_queue()
    queue = await sqs_server.open(created.url)
    for i in range(25):
        await queue.enqueue(make_job(f"pkg-{i}"))
    await queue.close()
    assert queue.stats().sent == 25
    assert await messages_in(sqs_server, created.url) == 25
    await queue.enqueue(make_job("after-close"))
    assert queue.stats().dropped == 1
    assert await queue.receive() == []


# --- start-up ------------------------------------------------------------------------------


async def test_a_missing_queue_url_names_the_variable(sqs_server: SqsServer) -> None:
    settings = sqs_settings("")
    with pytest.raises(QueueUnavailableError, match="MIRROR_SQS_QUEUE_URL"):
        await open_queue(settings)


async def test_a_queue_that_does_not_exist_names_the_queue_url_variable(
    sqs_server: SqsServer,
) -> None:
    created = await sqs_server.create_queue()
    url = created.url + "-gone"
    with pytest.raises(QueueUnavailableError, match="MIRROR_SQS_QUEUE_URL") as raised:
        await sqs_server.open(url)
    assert url in str(raised.value)


async def test_a_fifo_queue_is_refused_with_a_reason(sqs_server: SqsServer) -> None:
    async with sqs_server.client() as sqs:
        answer = await sqs.create_queue(QueueName="mg-ordered.fifo",
                                        Attributes={"FifoQueue": "true"})
    with pytest.raises(QueueUnavailableError, match="needs a standard queue"):
        await sqs_server.open(answer["QueueUrl"])


async def test_an_unreachable_endpoint_names_the_endpoint_variable(
    sqs_server: SqsServer,
) -> None:
    created = await sqs_server.create_queue()
    closed = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(QueueUnavailableError, match="AWS_ENDPOINT_URL_SQS") as raised:
        await sqs_server.open(created.url, endpoint_url=closed, attempts=1)
    assert closed in str(raised.value)
    assert time.monotonic() - started < 5


async def test_no_region_names_aws_region(
    sqs_server: SqsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    hermetic_aws_env(monkeypatch, tmp_path)
    created = await sqs_server.create_queue()
    with pytest.raises(QueueUnavailableError, match="AWS_REGION"):
        await sqs_server.open(created.url, region=None)


async def test_no_credentials_names_the_credential_variables(
    sqs_server: SqsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    hermetic_aws_env(monkeypatch, tmp_path)
    created = await sqs_server.create_queue()
    with pytest.raises(QueueUnavailableError, match="AWS_ACCESS_KEY_ID"):
        await sqs_server.open(created.url, credentials=None)


async def test_the_standard_aws_variables_configure_the_backend(
    sqs_server: SqsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    hermetic_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_REGION", SQS_REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", sqs_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SQS_CREDENTIALS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SQS_CREDENTIALS[1])
    created = await sqs_server.create_queue()
    queue = await open_queue(sqs_settings(created.url))
    try:
        assert (queue.provider, queue.crosses_processes, queue.redelivers) == ("sqs", True, True)
        await queue.enqueue(make_job())
        [message] = await receive_within(queue, 3)
        assert message.job == make_job()
    finally:
        await queue.close()
