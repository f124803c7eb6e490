"""`MIRROR_QUEUE_PROVIDER=pubsub`: mirror jobs published to a Google Pub/Sub topic and pulled
from a subscription, with the generated asyncio clients of google-cloud-pubsub.

The proxy publishes to `MIRROR_PUBSUB_TOPIC`; the worker pulls from `MIRROR_PUBSUB_SUBSCRIPTION`.
`open_pubsub_queue` checks both and opens the clients; `PubSubQueue` holds what runs after.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import grpc
import structlog
from google.api_core import exceptions as api_exceptions
from google.api_core import retry_async
from google.auth import exceptions as auth_exceptions
from google.pubsub_v1 import types as pubsub_types
from google.pubsub_v1.services.publisher import PublisherAsyncClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcAsyncIOTransport

from mirrorgate.backends import QueueUnavailableError
from mirrorgate.backends._sendbuffer import SendBuffer, SendOutcome
from mirrorgate.backends._shared import BATCH_SIZE, delivery, describe
from mirrorgate.config import QueueSettings
from mirrorgate.jobsign import JobCodec
from mirrorgate.mirror import (
    MirrorQueue,
    QueueMessage,
    QueueStats,
    QueueTraits,
    ReceiptHandle,
    encode_job,
)

if TYPE_CHECKING:  # named in signatures only
    from mirrorgate.backends._shared import DropHook
    from mirrorgate.mirror import MirrorJob, Seconds

__all__ = [
    "ACK_DEADLINE_MAX",
    "ACK_DEADLINE_MIN",
    "MAX_MESSAGE_BYTES",
    "PULL_TIMEOUT",
    "PubSubQueue",
    "ack_deadline_for",
    "open_pubsub_queue",
]

log = structlog.get_logger("mirrorgate.queue")

PROVIDER = "pubsub"

ACK_DEADLINE_MIN = 10
ACK_DEADLINE_MAX = 600
"""Pub/Sub's range for an ack deadline; an extension is clamped into it (0 stays 0)."""

PULL_TIMEOUT = 5.0
"""Longest one receive waits on the network, below MIRROR_POLL_WAIT_SECONDS when that is less:
short enough that an idle worker's heartbeat keeps moving, long enough not to spin."""

MAX_MESSAGE_BYTES = 10_000_000
"""Pub/Sub's limit for one message (and one publish request); a larger job is refused."""

_BATCH_BYTES = 9 * 1024 * 1024
_BATCH_COUNT = 100
_CALL_TIMEOUT = 10.0
_TRANSIENT = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.Aborted,
)


def ack_deadline_for(seconds: int) -> int:
    """The deadline an extension of `seconds` asks Pub/Sub for: 0 (release) or 10..600."""
    if seconds <= 0:
        return 0
    return max(ACK_DEADLINE_MIN, min(ACK_DEADLINE_MAX, seconds))


def _short_retry(timeout: float) -> retry_async.AsyncRetry:
    """Retry a transient failure of an idempotent call (ack, deadline) within `timeout`."""
    return retry_async.AsyncRetry(
        predicate=retry_async.if_exception_type(*_TRANSIENT),
        initial=0.1,
        maximum=1.0,
        multiplier=2.0,
        timeout=timeout,
    )


def _no_credentials(error: Exception) -> QueueUnavailableError:
    return QueueUnavailableError(
        f"MIRROR_QUEUE_PROVIDER=pubsub found no Google credentials ({describe(error)}): set "
        "GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run with Application "
        "Default Credentials (a GCP service account, workload identity, or `gcloud auth "
        "application-default login`), or set PUBSUB_EMULATOR_HOST=HOST:PORT for the emulator"
    )


def _cannot_check(
    error: Exception, variable: str, name: str, endpoint: str, role: str,
) -> QueueUnavailableError:
    """The start-up error for a GetTopic / GetSubscription that failed, naming what to set."""
    if isinstance(error, auth_exceptions.DefaultCredentialsError):
        return _no_credentials(error)
    if isinstance(error, api_exceptions.NotFound):
        kind = "topic" if variable == "MIRROR_PUBSUB_TOPIC" else "subscription"
        return QueueUnavailableError(
            f"{variable}={name} does not exist at {endpoint}: create the {kind} (see "
            f"docs/queues.md#google-pubsub) or set {variable} to an existing one"
        )
    if isinstance(error, api_exceptions.PermissionDenied):
        return QueueUnavailableError(
            f"permission denied reading {variable}={name}: grant this process's service "
            f"account {role} and roles/pubsub.viewer on it (or check which account "
            "GOOGLE_APPLICATION_CREDENTIALS selects)"
        )
    if isinstance(error, api_exceptions.Unauthenticated | auth_exceptions.GoogleAuthError):
        return QueueUnavailableError(
            f"the Google credentials were refused while reading {variable}={name} "
            f"({describe(error)}): check GOOGLE_APPLICATION_CREDENTIALS or the service account"
        )
    if isinstance(error, api_exceptions.InvalidArgument):
        example = name.split("/")[2] if name.count("/") == 3 else "topics"
        return QueueUnavailableError(
            f"Pub/Sub refused {variable}={name} ({describe(error)}); e.g. "
            f"{variable}=projects/my-project/{example}/mirrorgate"
        )
    return QueueUnavailableError(
        f"cannot reach Pub/Sub at {endpoint} to read {variable}={name} ({describe(error)}): "
        "check the network, or PUBSUB_EMULATOR_HOST when using the emulator"
    )


async def _close_quietly(*clients: PublisherAsyncClient | SubscriberAsyncClient) -> None:
    for client in clients:
        try:
            # the generated transports leave close() unannotated
            await client.transport.close()  # type: ignore[no-untyped-call]
        except Exception as error:  # closing is best effort; the process is going anyway
            log.warning("mirror_queue_close_failed", provider=PROVIDER, error=describe(error))


def _required(variable: str, value: str | None, kind: str) -> str:
    if not value:
        raise QueueUnavailableError(
            f"{variable} is not set; MIRROR_QUEUE_PROVIDER=pubsub needs it, e.g. "
            f"{variable}=projects/my-project/{kind}/mirrorgate"
        )
    return value


async def open_pubsub_queue(
    settings: QueueSettings,
    on_drop: DropHook | None = None,
    *,
    emulator_host: str | None = None,
    ack_deadline: int | None = None,
    pull_timeout: float = PULL_TIMEOUT,
    receive_backoff: float = 1.0,
    close_within: float = 5.0,
    call_timeout: float = _CALL_TIMEOUT,
) -> MirrorQueue:
    """Check the topic and subscription exist and build the queue; QueueUnavailableError if not.

    The keywords exist for tests and are not environment variables: `emulator_host` overrides
    PUBSUB_EMULATOR_HOST; `ack_deadline` is the deadline set on each delivery (default
    MIRROR_VISIBILITY_SECONDS; tests shorten it to see redelivery in a second or two);
    `pull_timeout` caps one receive's wait; `receive_backoff` is the pause after a failed pull;
    `close_within` bounds close()'s flush; `call_timeout` bounds every other call.
    """
    topic = _required("MIRROR_PUBSUB_TOPIC", settings.pubsub_topic, "topics")
    subscription = _required("MIRROR_PUBSUB_SUBSCRIPTION", settings.pubsub_subscription,
                             "subscriptions")
    # the emulator is reached over an insecure channel; otherwise Application Default
    # Credentials are used
    host = emulator_host if emulator_host is not None else os.environ.get("PUBSUB_EMULATOR_HOST")
    deadline = settings.visibility if ack_deadline is None else ack_deadline
    if deadline < 1 or deadline > ACK_DEADLINE_MAX:
        raise ValueError(f"ack_deadline must be 1..{ACK_DEADLINE_MAX} seconds, got {deadline}")

    try:
        if host:
            publisher = PublisherAsyncClient(transport=PublisherGrpcAsyncIOTransport(
                channel=grpc.aio.insecure_channel(host)))
            subscriber = SubscriberAsyncClient(transport=SubscriberGrpcAsyncIOTransport(
                channel=grpc.aio.insecure_channel(host)))
        else:
            publisher = PublisherAsyncClient()
            try:
                subscriber = SubscriberAsyncClient()
            except BaseException:
                await _close_quietly(publisher)
                raise
    except auth_exceptions.DefaultCredentialsError as error:
        raise _no_credentials(error) from None
    endpoint = f"emulator {host}" if host else "the Pub/Sub service"

    # the start-up check (GetTopic, GetSubscription): a missing one, missing permission, absent
    # credentials or an unreachable endpoint raise naming what to set, and nothing is left open
    try:
        try:
            await publisher.get_topic(topic=topic, timeout=call_timeout, retry=None)
        except Exception as error:
            raise _cannot_check(error, "MIRROR_PUBSUB_TOPIC", topic, endpoint,
                                "roles/pubsub.publisher") from None
        try:
            found = await subscriber.get_subscription(
                subscription=subscription, timeout=call_timeout, retry=None)
        except Exception as error:
            raise _cannot_check(error, "MIRROR_PUBSUB_SUBSCRIPTION", subscription, endpoint,
                                "roles/pubsub.subscriber") from None
    except BaseException:
        await _close_quietly(publisher, subscriber)
        raise

    # Pub/Sub reports `delivery_attempt` only when the subscription has a dead-letter policy;
    # without one the delivery count is None (unknown)
    dead_letter = bool(found.dead_letter_policy.dead_letter_topic)
    log.info("mirror_queue_opened", provider=PROVIDER, topic=topic, subscription=subscription,
             emulator=bool(host), dead_letter=dead_letter, ack_deadline=deadline)
    if not dead_letter:
        log.warning("mirror_queue_no_dead_letter_policy", provider=PROVIDER,
                    subscription=subscription,
                    consequence="delivery counts are unknown; see docs/queues.md#google-pubsub")
    queue = PubSubQueue(publisher, subscriber, settings, on_drop, topic=topic,
                        subscription=subscription, deadline=deadline,
                        subscription_deadline=found.ack_deadline_seconds,
                        pull_timeout=pull_timeout, receive_backoff=receive_backoff,
                        close_within=close_within, call_timeout=call_timeout)
    return queue.record()


class PubSubQueue:
    """A publisher and a subscriber client over their own gRPC channels, closed by `close()`."""

    traits = QueueTraits(PROVIDER, crosses_processes=True, redelivers=True)

    def __init__(
        self,
        publisher: PublisherAsyncClient,
        subscriber: SubscriberAsyncClient,
        settings: QueueSettings,
        on_drop: DropHook | None,
        *,
        topic: str,
        subscription: str,
        deadline: int,
        subscription_deadline: int,
        pull_timeout: float,
        receive_backoff: float,
        close_within: float,
        call_timeout: float,
    ) -> None:
        self._publisher = publisher
        self._subscriber = subscriber
        self._topic = topic
        self._subscription = subscription
        self._codec = JobCodec(settings.job_key, settings.job_key_previous)
        self._buffer = SendBuffer(self._send, provider=PROVIDER, max_depth=settings.max_depth,
                                  max_count=_BATCH_COUNT, max_bytes=_BATCH_BYTES,
                                  on_drop=on_drop)
        self._closed = False
        self._refused = 0
        self._ack_failures = 0
        self._deadline = deadline
        # one ModifyAckDeadline per received batch, skipped when the subscription's own
        # deadline already says so
        self._set_deadline_on_receipt = deadline != subscription_deadline
        # one receive waits at most `pull_timeout`, less when the poll wait is shorter
        self._wait = max(0.1, min(float(settings.poll_wait), pull_timeout))
        self._receive_backoff = receive_backoff
        self._close_within = close_within
        self._call_timeout = call_timeout

    # --- enqueue: encode, buffer; the buffer's task publishes ------------------------------

    async def enqueue(self, job: MirrorJob) -> bool:
        # a job Pub/Sub could never take is refused here, logged and counted with the drops
        try:
            body = self._codec.seal(encode_job(job))
        except Exception as error:  # a manifest orjson cannot write must not fail the response
            self._refused += 1
            log.error("mirror_queue_job_refused", provider=PROVIDER, package=job.label,
                      reason="unencodable", error=describe(error))
            return False
        if len(body) > MAX_MESSAGE_BYTES:
            self._refused += 1
            log.error("mirror_queue_job_refused", provider=PROVIDER, package=job.label,
                      reason="too_large", bytes=len(body), limit=MAX_MESSAGE_BYTES)
            return False
        return self._buffer.offer(body)

    async def _publish(self, bodies: list[bytes]) -> None:
        # no library retry: the buffer backs off and retries a failed batch itself
        await self._publisher.publish(
            topic=self._topic,
            messages=[pubsub_types.PubsubMessage(data=body) for body in bodies],
            timeout=self._call_timeout,
            retry=None,
        )

    def _refuse(self, body: bytes, error: BaseException) -> None:
        log.error("mirror_queue_send_refused", provider=PROVIDER, topic=self._topic,
                  bytes=len(body), error=describe(error))

    async def _send(self, batch: list[bytes]) -> SendOutcome:
        try:
            await self._publish(batch)
            return SendOutcome()
        except api_exceptions.InvalidArgument as error:
            if len(batch) == 1:
                self._refuse(batch[0], error)
                return SendOutcome()
        # Pub/Sub refused the batch as a whole: find the bodies it refuses on their own, so one
        # bad body cannot wedge the buffer
        retry: list[int] = []
        for index, body in enumerate(batch):
            if retry:
                retry.append(index)
                continue
            try:
                await self._publish([body])
            except api_exceptions.InvalidArgument as error:
                self._refuse(body, error)
            except Exception:
                retry.append(index)
        return SendOutcome(retry=tuple(retry))

    # --- receive -------------------------------------------------------------------------

    async def receive(self) -> list[QueueMessage]:
        # one unary pull of at most 10. The emulator holds an empty pull until just before the
        # deadline and the service may answer a lapsed wait with DEADLINE_EXCEEDED: both are an
        # idle []. A pull cancelled in flight may leave messages leased to nobody: Pub/Sub
        # redelivers them when their deadline lapses.
        try:
            response = await self._subscriber.pull(
                subscription=self._subscription, max_messages=BATCH_SIZE, timeout=self._wait,
                retry=None)
        except api_exceptions.DeadlineExceeded:
            return []
        except Exception as error:
            log.warning("mirror_queue_receive_failed", provider=PROVIDER,
                        subscription=self._subscription, error=describe(error))
            await asyncio.sleep(self._receive_backoff)  # a broken endpoint is not hammered
            return []
        received = list(response.received_messages)
        # each delivery's deadline is set to MIRROR_VISIBILITY_SECONDS, so the worker's hold on
        # a job is the same on every backend whatever the subscription says
        if received and self._set_deadline_on_receipt:
            try:
                await self._subscriber.modify_ack_deadline(
                    subscription=self._subscription, ack_ids=[m.ack_id for m in received],
                    ack_deadline_seconds=self._deadline, timeout=self._call_timeout,
                    retry=_short_retry(self._call_timeout))
            except Exception as error:  # they keep the subscription's own deadline
                self._ack_failures += len(received)
                log.warning("mirror_queue_extend_failed", provider=PROVIDER,
                            subscription=self._subscription, jobs=len(received),
                            error=describe(error))
        return [self._delivered(m) for m in received]

    def _delivered(self, received: pubsub_types.ReceivedMessage) -> QueueMessage:
        attempt = received.delivery_attempt
        return delivery(PROVIDER, self._codec, received.message.data,
                        ReceiptHandle(received.ack_id), attempt if attempt > 0 else None,
                        received.message.message_id)

    # --- ack, extend: failures are logged, never raised; a lost ack is a redelivery ------

    async def ack(self, receipt: ReceiptHandle) -> None:
        try:
            await self._subscriber.acknowledge(
                subscription=self._subscription, ack_ids=[receipt], timeout=self._call_timeout,
                retry=_short_retry(self._call_timeout))
        except Exception as error:
            self._ack_failures += 1
            log.warning("mirror_queue_ack_failed", provider=PROVIDER,
                        subscription=self._subscription, error=describe(error))

    async def extend_visibility(self, receipt: ReceiptHandle, seconds: Seconds) -> None:
        # ModifyAckDeadline, clamped to 10..600 s; 0 releases the job for a prompt redelivery
        try:
            await self._subscriber.modify_ack_deadline(
                subscription=self._subscription, ack_ids=[receipt],
                ack_deadline_seconds=ack_deadline_for(seconds), timeout=self._call_timeout,
                retry=_short_retry(self._call_timeout))
        except Exception as error:
            self._ack_failures += 1
            log.warning("mirror_queue_extend_failed", provider=PROVIDER,
                        subscription=self._subscription, jobs=1, error=describe(error))

    # --- the frame -----------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._buffer.close(self._close_within)
        await _close_quietly(self._publisher, self._subscriber)

    def record(self) -> MirrorQueue:
        return MirrorQueue(self.traits, self.enqueue, self.receive, self.ack,
                           self.extend_visibility, self.close, self.stats)

    def stats(self) -> QueueStats:
        return QueueStats(depth=self._buffer.depth, dropped=self._buffer.dropped + self._refused,
                          sent=self._buffer.sent, send_failures=self._buffer.failures,
                          ack_failures=self._ack_failures)
