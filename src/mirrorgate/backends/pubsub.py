"""`MIRROR_QUEUE_PROVIDER=pubsub`: mirror jobs published to a Google Pub/Sub topic and pulled
from a subscription, with the generated asyncio clients of google-cloud-pubsub.

The proxy publishes to `MIRROR_PUBSUB_TOPIC`; the worker pulls from `MIRROR_PUBSUB_SUBSCRIPTION`.
`PUBSUB_EMULATOR_HOST` (or the `emulator_host` keyword) selects an insecure channel to the
emulator; otherwise Application Default Credentials are used. Decisions:

- enqueue never waits on the network and never raises: the encoded job goes to a bounded
  `SendBuffer`, whose background task publishes batches (`publish` with a list of messages,
  no library retry: the buffer backs off and retries a failed batch itself). A batch Pub/Sub
  refuses as invalid is split, and a job refused on its own is logged and not retried, so one
  bad body cannot wedge the buffer. A job Pub/Sub could never take (over its 10 MB message
  limit, or a manifest that cannot be encoded) is refused at enqueue, logged
  (`mirror_queue_job_refused`) and counted with the drops.
- receive is one unary pull of at most 10, with a per-call timeout of a few seconds bounded by
  `MIRROR_POLL_WAIT_SECONDS`. The emulator holds an empty pull until just before the client's
  deadline, and the real service may answer a lapsed wait with DEADLINE_EXCEEDED: both are an
  idle `[]`. Any other failure is logged (`mirror_queue_receive_failed`), followed by a short
  pause so a broken endpoint is not hammered, and is also `[]`. A pull cancelled in flight may
  leave messages leased to nobody: Pub/Sub redelivers them when their deadline lapses.
- Each delivery's ack deadline is set on receipt to `MIRROR_VISIBILITY_SECONDS` (one
  ModifyAckDeadline per batch, skipped when the subscription's own deadline already says so),
  so the worker's hold on a job is the same on every backend whatever the subscription says.
- The delivery count is Pub/Sub's `delivery_attempt`, which it only reports when the
  subscription has a dead-letter policy; without one it is None (unknown), and start-up logs
  `mirror_queue_no_dead_letter_policy`. A delivery Pub/Sub has made before (a worker died or
  gave the job back) is logged as `mirror_queue_redelivered` with its count.
- extend_visibility is ModifyAckDeadline, clamped to Pub/Sub's 10..600 s; 0 releases the job
  for a prompt redelivery (a nack). ack and extend log their failures and never raise: a lost
  ack is a redelivery, which the worker already treats as "already present".
- A body that does not decode is handed over as `job=None` with the codec's reason, for the
  worker to retire; one bad message never turns a receive into an exception.
- Start-up reads the topic and the subscription (GetTopic, GetSubscription): a missing one,
  missing permission, absent credentials or an unreachable endpoint raise
  `QueueUnavailableError` naming what to set, and nothing is left open.
- close() flushes the buffer within a bound, then closes both gRPC channels.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

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
from mirrorgate.backends.memory import BATCH_SIZE
from mirrorgate.config import QueueSettings
from mirrorgate.jobsign import JobCodec, JobSignatureError
from mirrorgate.mirror import (
    MirrorJob,
    MirrorQueue,
    QueueMessage,
    QueueStats,
    ReceiptHandle,
    Seconds,
    encode_job,
)

__all__ = [
    "ACK_DEADLINE_MAX",
    "ACK_DEADLINE_MIN",
    "MAX_MESSAGE_BYTES",
    "PULL_TIMEOUT",
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


def _describe(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]


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
        f"MIRROR_QUEUE_PROVIDER=pubsub found no Google credentials ({_describe(error)}): set "
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
            f"{variable}={name} does not exist at {endpoint}: create the {kind} (see the "
            f"README's Google Pub/Sub section) or set {variable} to an existing one"
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
            f"({_describe(error)}): check GOOGLE_APPLICATION_CREDENTIALS or the service account"
        )
    if isinstance(error, api_exceptions.InvalidArgument):
        example = name.split("/")[2] if name.count("/") == 3 else "topics"
        return QueueUnavailableError(
            f"Pub/Sub refused {variable}={name} ({_describe(error)}); e.g. "
            f"{variable}=projects/my-project/{example}/mirrorgate"
        )
    return QueueUnavailableError(
        f"cannot reach Pub/Sub at {endpoint} to read {variable}={name} ({_describe(error)}): "
        "check the network, or PUBSUB_EMULATOR_HOST when using the emulator"
    )


async def _close_quietly(*clients: PublisherAsyncClient | SubscriberAsyncClient) -> None:
    for client in clients:
        try:
            # the generated transports leave close() unannotated
            await client.transport.close()  # type: ignore[no-untyped-call]
        except Exception as error:  # closing is best effort; the process is going anyway
            log.warning("mirror_queue_close_failed", provider=PROVIDER, error=_describe(error))


def _required(variable: str, value: str | None, kind: str) -> str:
    if not value:
        raise QueueUnavailableError(
            f"{variable} is not set; MIRROR_QUEUE_PROVIDER=pubsub needs it, e.g. "
            f"{variable}=projects/my-project/{kind}/mirrorgate"
        )
    return value


def _log_redelivery(message: QueueMessage) -> None:
    if message.deliveries is None or message.deliveries < 2:
        return
    job = {"package": message.job.name, "version": message.job.version} if message.job else {}
    log.info("mirror_queue_redelivered", provider=PROVIDER, message_id=message.message_id,
             deliveries=message.deliveries, **job)


def _ignore_drop(_total: int) -> None:
    return None


async def open_pubsub_queue(
    settings: QueueSettings,
    on_drop: Callable[[int], None] = _ignore_drop,
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
    host = emulator_host if emulator_host is not None else os.environ.get("PUBSUB_EMULATOR_HOST")
    deadline = settings.visibility if ack_deadline is None else ack_deadline
    if deadline < 1 or deadline > ACK_DEADLINE_MAX:
        raise ValueError(f"ack_deadline must be 1..{ACK_DEADLINE_MAX} seconds, got {deadline}")
    wait = max(0.1, min(float(settings.poll_wait), pull_timeout))

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

    dead_letter = bool(found.dead_letter_policy.dead_letter_topic)
    set_deadline_on_receipt = found.ack_deadline_seconds != deadline
    log.info("mirror_queue_opened", provider=PROVIDER, topic=topic, subscription=subscription,
             emulator=bool(host), dead_letter=dead_letter, ack_deadline=deadline)
    if not dead_letter:
        log.warning("mirror_queue_no_dead_letter_policy", provider=PROVIDER,
                    subscription=subscription,
                    consequence="delivery counts are unknown; see the README's Google "
                                "Pub/Sub section")

    async def publish(bodies: list[bytes]) -> None:
        await publisher.publish(
            topic=topic,
            messages=[pubsub_types.PubsubMessage(data=body) for body in bodies],
            timeout=call_timeout,
            retry=None,
        )

    def refused(body: bytes, error: BaseException) -> None:
        log.error("mirror_queue_send_refused", provider=PROVIDER, topic=topic,
                  bytes=len(body), error=_describe(error))

    async def send(batch: list[bytes]) -> SendOutcome:
        try:
            await publish(batch)
            return SendOutcome()
        except api_exceptions.InvalidArgument as error:
            if len(batch) == 1:
                refused(batch[0], error)
                return SendOutcome()
        # Pub/Sub refused the batch as a whole: find the bodies it refuses on their own
        retry: list[int] = []
        for index, body in enumerate(batch):
            if retry:
                retry.append(index)
                continue
            try:
                await publish([body])
            except api_exceptions.InvalidArgument as error:
                refused(body, error)
            except Exception:
                retry.append(index)
        return SendOutcome(retry=tuple(retry))

    buffer = SendBuffer(send, provider=PROVIDER, max_depth=settings.max_depth,
                        max_count=_BATCH_COUNT, max_bytes=_BATCH_BYTES, on_drop=on_drop)
    counters = {"refused": 0, "ack_failures": 0}
    closed = asyncio.Event()
    codec = JobCodec(settings.job_key, settings.job_key_previous)

    async def enqueue(job: MirrorJob) -> None:
        try:
            body = codec.seal(encode_job(job))
        except Exception as error:  # a manifest orjson cannot write must not fail the response
            counters["refused"] += 1
            log.error("mirror_queue_job_refused", provider=PROVIDER, package=job.label,
                      reason="unencodable", error=_describe(error))
            return
        if len(body) > MAX_MESSAGE_BYTES:
            counters["refused"] += 1
            log.error("mirror_queue_job_refused", provider=PROVIDER, package=job.label,
                      reason="too_large", bytes=len(body), limit=MAX_MESSAGE_BYTES)
            return
        buffer.offer(body)

    def delivered(received: pubsub_types.ReceivedMessage) -> QueueMessage:
        receipt = ReceiptHandle(received.ack_id)
        attempt = received.delivery_attempt
        deliveries = attempt if attempt > 0 else None
        message_id = received.message.message_id
        try:
            job = codec.open(received.message.data)
        except JobSignatureError as error:
            return QueueMessage(None, receipt, deliveries, problem=str(error),
                                message_id=message_id, refusal=error.reason)
        except ValueError as error:  # JobDecodeError, or anything else the body trips on
            return QueueMessage(None, receipt, deliveries, problem=str(error),
                                message_id=message_id)
        return QueueMessage(job, receipt, deliveries, message_id=message_id)

    async def receive() -> list[QueueMessage]:
        try:
            response = await subscriber.pull(subscription=subscription, max_messages=BATCH_SIZE,
                                             timeout=wait, retry=None)
        except api_exceptions.DeadlineExceeded:
            return []
        except Exception as error:
            log.warning("mirror_queue_receive_failed", provider=PROVIDER,
                        subscription=subscription, error=_describe(error))
            await asyncio.sleep(receive_backoff)
            return []
        received = list(response.received_messages)
        if received and set_deadline_on_receipt:
            try:
                await subscriber.modify_ack_deadline(
                    subscription=subscription, ack_ids=[m.ack_id for m in received],
                    ack_deadline_seconds=deadline, timeout=call_timeout,
                    retry=_short_retry(call_timeout))
            except Exception as error:  # they keep the subscription's own deadline
                counters["ack_failures"] += len(received)
                log.warning("mirror_queue_extend_failed", provider=PROVIDER,
                            subscription=subscription, jobs=len(received),
                            error=_describe(error))
        messages = [delivered(m) for m in received]
        for message in messages:
            _log_redelivery(message)
        return messages

    async def ack(receipt: ReceiptHandle) -> None:
        try:
            await subscriber.acknowledge(subscription=subscription, ack_ids=[receipt],
                                         timeout=call_timeout, retry=_short_retry(call_timeout))
        except Exception as error:
            counters["ack_failures"] += 1
            log.warning("mirror_queue_ack_failed", provider=PROVIDER,
                        subscription=subscription, error=_describe(error))

    async def extend_visibility(receipt: ReceiptHandle, seconds: Seconds) -> None:
        try:
            await subscriber.modify_ack_deadline(
                subscription=subscription, ack_ids=[receipt],
                ack_deadline_seconds=ack_deadline_for(seconds), timeout=call_timeout,
                retry=_short_retry(call_timeout))
        except Exception as error:
            counters["ack_failures"] += 1
            log.warning("mirror_queue_extend_failed", provider=PROVIDER,
                        subscription=subscription, jobs=1, error=_describe(error))

    async def close() -> None:
        if closed.is_set():
            return
        closed.set()
        await buffer.close(close_within)
        await _close_quietly(publisher, subscriber)

    def stats() -> QueueStats:
        return QueueStats(depth=buffer.depth, dropped=buffer.dropped + counters["refused"],
                          sent=buffer.sent, send_failures=buffer.failures,
                          ack_failures=counters["ack_failures"])

    return MirrorQueue(
        provider=PROVIDER,
        enqueue=enqueue,
        receive=receive,
        ack=ack,
        extend_visibility=extend_visibility,
        close=close,
        stats=stats,
        crosses_processes=True,
        redelivers=True,
    )
