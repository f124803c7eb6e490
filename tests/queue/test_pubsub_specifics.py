"""What only the Pub/Sub backend promises, against Google's emulator: ack deadlines that lapse,
hold and release; a dead-letter policy and the delivery count it brings; the bounded empty
pull; foreign bodies handed over for retirement; an enqueue that never waits on an unreachable
endpoint; and start-up errors that name what to set.

Faults the emulator cannot produce (a connection that drops, a PERMISSION_DENIED answer) come
from small loopback servers written here: a TCP relay that can be cut, and a gRPC server that
refuses every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.backends.pubsub import ack_deadline_for, open_pubsub_queue
from mirrorgate.mirror import MirrorQueue, ReceiptHandle, Seconds
from tests.builders import make_job
from tests.queue.harness import receive_within
from tests.servers.processes import until
from tests.servers.pubsub_server import (
    PubSubAdmin,
    PubSubNames,
    open_test_queue,
    queue_settings,
)

MakeNames = Callable[..., Awaitable[PubSubNames]]


@contextlib.asynccontextmanager
async def opened(host: str, names: PubSubNames, **overrides: object) -> AsyncIterator[MirrorQueue]:
    queue = await open_test_queue(host, names, **overrides)
    try:
        yield queue
    finally:
        await queue.close()


# --- ack deadlines ----------------------------------------------------------------------------


async def test_an_ack_deadline_lapse_redelivers_the_job(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names, ack_deadline=1) as queue:
        job = make_job()
        await queue.enqueue(job)
        [first] = await receive_within(queue, 3)
        received = time.monotonic()
        [again] = await receive_within(queue, 4)
        assert again.job == job
        assert 0.8 <= time.monotonic() - received < 3.5
        assert again.receipt != first.receipt


async def test_without_a_dead_letter_policy_the_delivery_count_is_unknown(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names) as queue:
        await queue.enqueue(make_job())
        [message] = await receive_within(queue, 3)
        assert message.deliveries is None


async def test_an_extension_holds_a_job_past_its_deadline_and_zero_releases_it(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names, ack_deadline=1) as queue:
        job = make_job()
        await queue.enqueue(job)
        [message] = await receive_within(queue, 3)
        # asks for 2 s, is held for Pub/Sub's minimum of 10: nothing comes back within 4 s
        await queue.extend_visibility(message.receipt, Seconds(2))
        assert await receive_within(queue, 4) == []
        await queue.extend_visibility(message.receipt, Seconds(0))
        released = time.monotonic()
        back = await receive_within(queue, 3)
        assert [m.job for m in back] == [job]
        assert time.monotonic() - released < 1.5


def test_extensions_are_clamped_to_the_range_pubsub_accepts() -> None:
    assert [ack_deadline_for(s) for s in (-3, 0, 1, 9, 10, 60, 600, 601, 3600)] == [
        0, 0, 10, 10, 10, 60, 600, 600, 600]


async def test_each_delivery_gets_the_visibility_setting_as_its_deadline(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    # the subscription says 10 s; the queue's visibility (2 s here, 10..600 from the
    # environment) is what a delivery gets, so it is back after 2 s, not 10
    names = await make_pubsub_names(ack_deadline=10)
    settings = queue_settings(names, visibility=2)
    queue = await open_pubsub_queue(settings, emulator_host=pubsub_emulator, pull_timeout=1.5)
    try:
        await queue.enqueue(make_job())
        await receive_within(queue, 3)
        received = time.monotonic()
        [again] = await receive_within(queue, 6)
        assert 1.5 <= time.monotonic() - received < 5
        await queue.ack(again.receipt)
    finally:
        await queue.close()


# --- dead letters and delivery counts ---------------------------------------------------------


async def test_a_dead_letter_policy_forwards_a_job_after_its_maximum_attempts(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names(dead_letter_attempts=5)
    assert names.dead_letter_subscription is not None
    job = make_job()
    counts: list[int | None] = []
    async with opened(pubsub_emulator, names, ack_deadline=1) as queue:
        await queue.enqueue(job)
        deadline = time.monotonic() + 15
        while len(counts) < 5 and time.monotonic() < deadline:
            for message in await queue.receive():
                counts.append(message.deliveries)
                await queue.extend_visibility(message.receipt, Seconds(0))
        assert counts == [1, 2, 3, 4, 5]
        # the fifth release forwarded it: the subscription has nothing more to deliver
        assert await receive_within(queue, 2) == []
    dead = PubSubNames(names.topic, names.dead_letter_subscription)
    async with opened(pubsub_emulator, dead) as graveyard:
        [forwarded] = await receive_within(graveyard, 5)
        assert forwarded.job == job
        await graveyard.ack(forwarded.receipt)


# --- receive ----------------------------------------------------------------------------------


async def test_an_empty_receive_returns_within_its_bounded_wait(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names, pull_timeout=2.0) as queue:
        started = time.monotonic()
        assert await queue.receive() == []
        assert time.monotonic() - started < 2.5


async def test_the_poll_wait_setting_bounds_the_pull_when_it_is_shorter(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    settings = queue_settings(names, poll_wait=1)
    queue = await open_pubsub_queue(settings, emulator_host=pubsub_emulator)
    try:
        started = time.monotonic()
        assert await queue.receive() == []
        assert time.monotonic() - started < 1.5
    finally:
        await queue.close()


async def test_a_body_that_is_not_a_job_reaches_the_worker_as_retireable(
    pubsub_emulator: str, make_pubsub_names: MakeNames, pubsub_admin: PubSubAdmin,
) -> None:
    names = await make_pubsub_names(dead_letter_attempts=5)
    await pubsub_admin.publish_raw(names.topic, b"not json at all", b'{"v": 2}')
    async with opened(pubsub_emulator, names) as queue:
        got = await receive_within(queue, 3, want=2)
        problems = sorted(m.problem or "" for m in got)
        assert [m.job for m in got] == [None, None]
        assert problems[0].startswith("body is not JSON")
        assert problems[1].startswith("unknown codec version")
        assert [m.deliveries for m in got] == [1, 1]
        for message in got:
            await queue.ack(message.receipt)
        assert await receive_within(queue, 1) == []


async def test_an_ack_or_extension_pubsub_refuses_is_logged_not_raised(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names) as queue:
        with capture_logs() as logs:
            await queue.ack(ReceiptHandle("not-an-ack-id"))
            await queue.extend_visibility(ReceiptHandle("not-an-ack-id"), Seconds(30))
        events = [entry["event"] for entry in logs]
        assert events == ["mirror_queue_ack_failed", "mirror_queue_extend_failed"]


# --- enqueue ----------------------------------------------------------------------------------


class TcpRelay:
    """A loopback TCP relay to a server, which a test can cut (close the listener and drop
    every relayed connection) and restore on the same port."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._server: asyncio.Server | None = None
        self._port = 0
        self._links: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.gather(*self._links, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self._writers.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except OSError:
            writer.transport.abort()
        finally:
            self._links.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.transport.abort()


async def test_enqueue_never_blocks_while_pubsub_is_unreachable_and_sends_once_it_is_back(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    relay = TcpRelay(pubsub_emulator)
    await relay.restore()
    queue = await open_test_queue(relay.address, names, receive_backoff=0.1)
    consumer = await open_test_queue(pubsub_emulator, names)
    try:
        await relay.cut()
        jobs = [make_job(f"pkg-{i}") for i in range(20)]
        slowest = 0.0
        with capture_logs() as logs:
            for job in jobs:
                started = time.monotonic()
                await queue.enqueue(job)
                slowest = max(slowest, time.monotonic() - started)
            await until(lambda: queue.stats().send_failures > 0)  # the sender tried and failed
            assert await queue.receive() == []
        assert slowest < 0.01
        events = {entry["event"] for entry in logs}
        assert {"mirror_queue_send_failed", "mirror_queue_receive_failed"} <= events
        assert queue.stats().depth == len(jobs)
        assert queue.stats().send_failures > 0
        await relay.restore()
        got = await receive_within(consumer, 20, want=len(jobs))
        assert sorted(m.job.name for m in got if m.job) == sorted(j.name for j in jobs)
        await queue.close()
        assert (queue.stats().depth, queue.stats().sent) == (0, len(jobs))
    finally:
        await queue.close()
        await consumer.close()
        await relay.cut()


async def test_a_job_pubsub_could_never_take_is_refused_at_enqueue_and_counted(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    async with opened(pubsub_emulator, names) as queue:
        with capture_logs() as logs:
            await queue.enqueue(make_job("huge", manifest={"description": "x" * 10_000_001}))
            await queue.enqueue(make_job("unencodable", manifest={"size": 2**70}))
        assert [(e["event"], e["reason"]) for e in logs] == [
            ("mirror_queue_job_refused", "too_large"),
            ("mirror_queue_job_refused", "unencodable"),
        ]
        assert queue.stats().dropped == 2
        await queue.enqueue(make_job("fine"))
        [message] = await receive_within(queue, 3)
        assert message.job is not None
        assert message.job.name == "fine"


async def test_close_flushes_what_the_buffer_holds(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    queue = await open_test_queue(pubsub_emulator, names)
    jobs = [make_job(f"pkg-{i}") for i in range(5)]
    for job in jobs:
        await queue.enqueue(job)
    await queue.close()
    await queue.close()
    assert queue.stats().sent == len(jobs)
    async with opened(pubsub_emulator, names) as consumer:
        got = await receive_within(consumer, 3, want=len(jobs))
        assert sorted(m.job.name for m in got if m.job) == sorted(j.name for j in jobs)


async def test_close_gives_up_within_its_bound_while_pubsub_is_unreachable(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    relay = TcpRelay(pubsub_emulator)
    await relay.restore()
    queue = await open_test_queue(relay.address, names, close_within=0.5)
    try:
        await relay.cut()
        await queue.enqueue(make_job())
        started = time.monotonic()
        with capture_logs() as logs:
            await queue.close()
        assert time.monotonic() - started < 2
        assert "mirror_queue_unsent_at_close" in {entry["event"] for entry in logs}
    finally:
        await relay.cut()


# --- start-up ---------------------------------------------------------------------------------


async def test_the_provider_setting_opens_the_pubsub_queue_through_the_emulator_variable(
    pubsub_emulator: str, make_pubsub_names: MakeNames, monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = await make_pubsub_names()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)
    queue = await open_queue(queue_settings(names, poll_wait=2))
    try:
        assert (queue.provider, queue.crosses_processes, queue.redelivers) == (
            "pubsub", True, True)
        await queue.enqueue(make_job())
        [message] = await receive_within(queue, 3)
        await queue.ack(message.receipt)
    finally:
        await queue.close()


async def test_a_missing_topic_is_refused_naming_mirror_pubsub_topic(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    missing = PubSubNames(names.topic + "-nowhere", names.subscription)
    with pytest.raises(QueueUnavailableError, match=r"MIRROR_PUBSUB_TOPIC=\S+-nowhere does not"):
        await open_test_queue(pubsub_emulator, missing)


async def test_a_missing_subscription_is_refused_naming_mirror_pubsub_subscription(
    pubsub_emulator: str, make_pubsub_names: MakeNames,
) -> None:
    names = await make_pubsub_names()
    missing = PubSubNames(names.topic, names.subscription + "-nowhere")
    with pytest.raises(QueueUnavailableError,
                       match=r"MIRROR_PUBSUB_SUBSCRIPTION=\S+-nowhere does not exist"):
        await open_test_queue(pubsub_emulator, missing)


async def test_an_unset_topic_is_refused_naming_the_variable() -> None:
    names = PubSubNames("", "projects/p/subscriptions/s")
    with pytest.raises(QueueUnavailableError, match="MIRROR_PUBSUB_TOPIC is not set"):
        await open_pubsub_queue(queue_settings(names, pubsub_topic=None),
                                emulator_host="127.0.0.1:9")


async def test_an_unreachable_endpoint_is_refused_naming_pubsub_emulator_host() -> None:
    names = PubSubNames("projects/p/topics/t", "projects/p/subscriptions/s")
    with (socket_nobody_listens_on() as address,
          pytest.raises(QueueUnavailableError, match=r"cannot reach .*PUBSUB_EMULATOR_HOST")):
        await open_pubsub_queue(queue_settings(names), emulator_host=address)


async def test_missing_credentials_are_refused_naming_google_application_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    names = PubSubNames("projects/p/topics/t", "projects/p/subscriptions/s")
    with pytest.raises(QueueUnavailableError,
                       match=r"no Google credentials.*GOOGLE_APPLICATION_CREDENTIALS"):
        await open_pubsub_queue(queue_settings(names))


async def test_a_permission_denied_names_the_roles_to_grant() -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_Refuse(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        names = PubSubNames("projects/p/topics/t", "projects/p/subscriptions/s")
        with pytest.raises(QueueUnavailableError,
                           match=r"permission denied reading MIRROR_PUBSUB_TOPIC=.*"
                                 r"roles/pubsub\.publisher and roles/pubsub\.viewer"):
            await open_pubsub_queue(queue_settings(names), emulator_host=f"127.0.0.1:{port}")
    finally:
        await server.stop(None)


class _Refuse(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc is untyped
    """Answers every call with PERMISSION_DENIED, as Pub/Sub does without the IAM role."""

    def service(self, _details: object) -> object:
        async def refuse(_request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "User not authorized to perform this action.")
            return b""

        return grpc.unary_unary_rpc_method_handler(refuse)


@contextlib.contextmanager
def socket_nobody_listens_on() -> Iterator[str]:
    """A loopback port that is bound but never listened on: every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{probe.getsockname()[1]}"
