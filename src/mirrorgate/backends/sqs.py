"""`MIRROR_QUEUE_PROVIDER=sqs`: the MirrorQueue on Amazon SQS, through aiobotocore.

The serve path and the worker may run in different processes (or pods); SQS carries the jobs
between them and redelivers any delivery that is not acked within its visibility window.
`open_sqs_queue` checks the queue and opens the client; `SqsQueue` holds what runs after.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore import exceptions as boto

from mirrorgate.backends import QueueUnavailableError
from mirrorgate.backends._sendbuffer import SendBuffer, SendOutcome
from mirrorgate.backends._shared import BATCH_SIZE, delivery, describe
from mirrorgate.config import SQS_URL_HINT, QueueSettings
from mirrorgate.jobsign import JobCodec, payload
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

__all__ = ["SQS_MAX_MESSAGE_BYTES", "SqsQueue", "open_sqs_queue"]

log = structlog.get_logger("mirrorgate.queue")

PROVIDER = "sqs"

SQS_MAX_MESSAGE_BYTES = 1024 * 1024
"""SQS's largest message, and largest batch payload: 1 MiB."""

MAX_VISIBILITY = 12 * 60 * 60
"""SQS's longest visibility timeout, in seconds."""

READ_TIMEOUT_MARGIN = 10
"""Seconds the client's read timeout stays above the long-poll wait, so a healthy idle poll
is never mistaken for a dead connection."""

_QUEUE_MISSING = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
_CREDENTIALS_REFUSED = frozenset({
    "AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "UnrecognizedClientException",
    "SignatureDoesNotMatch", "IncompleteSignature", "InvalidSecurity", "ExpiredToken",
    "ExpiredTokenException", "MissingAuthenticationToken", "KMS.AccessDeniedException",
})
_CONTENT_REFUSED = frozenset({
    "InvalidMessageContents", "InvalidParameterValue", "BatchRequestTooLong",
    "MessageTooLong", "InvalidParameterValueException",
})
"""Codes by which SQS refuses what a message holds: sending it again cannot succeed."""


def _code(error: Any) -> str:
    try:
        return str(error.response["Error"]["Code"])
    except (AttributeError, KeyError, TypeError):
        return ""


def _describe(error: BaseException) -> str:
    return describe(error, _code(error))


def _sqs_safe(text: str) -> str:
    """The JSON text with U+FFFE and U+FFFF written as escapes: SQS refuses those two raw
    characters, and inside a JSON string the escape decodes to the same text."""
    if "\ufffe" in text or "\uffff" in text:
        return text.replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")
    return text


def _label(body: bytes) -> str:
    """The package@version a refused body carries, for the log line; '' when unreadable."""
    try:
        data = orjson.loads(payload(body))
        return f"{data['name']}@{data['version']}"
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""


def _deliveries(attributes: Any) -> int | None:
    if not isinstance(attributes, Mapping):
        return None
    try:
        count = int(attributes["ApproximateReceiveCount"])
    except (KeyError, TypeError, ValueError):
        return None
    return count if count >= 1 else None


def _message(raw: Any, codec: JobCodec) -> QueueMessage | None:
    """One received SQS message as a QueueMessage; None (logged) when it has no receipt."""
    if not isinstance(raw, Mapping):
        log.warning("mirror_queue_message_malformed", provider=PROVIDER, reason="not an object")
        return None
    receipt = raw.get("ReceiptHandle")
    message_id = raw.get("MessageId")
    message_id = message_id if isinstance(message_id, str) else ""
    if not isinstance(receipt, str) or not receipt:
        log.warning("mirror_queue_message_malformed", provider=PROVIDER, message_id=message_id,
                    reason="no receipt handle")
        return None
    deliveries = _deliveries(raw.get("Attributes"))
    body = raw.get("Body")
    if not isinstance(body, str):
        return QueueMessage(None, ReceiptHandle(receipt), deliveries,
                            problem="message has no body", message_id=message_id)
    return delivery(PROVIDER, codec, body.encode("utf-8"), ReceiptHandle(receipt), deliveries,
                    message_id)


def _explain(error: Exception, url: str, region: str | None, endpoint: str | None) -> str:
    """Why the start-up check failed, naming the variable to set or the permission to grant."""
    where = f"at {endpoint}" if endpoint else "at the default AWS endpoint"
    if isinstance(error, boto.NoRegionError):
        return ("no AWS region is configured for SQS: set AWS_REGION to the queue's region "
                "(e.g. AWS_REGION=eu-west-1)")
    if isinstance(error, boto.NoCredentialsError | boto.PartialCredentialsError
                  | boto.CredentialRetrievalError):
        return (f"no usable AWS credentials for SQS ({_describe(error)}): set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role "
                "(web identity, ECS task role or EC2 instance profile)")
    if isinstance(error, boto.ConnectionError | boto.HTTPClientError):
        return (f"cannot reach SQS {where} ({_describe(error)}): check AWS_ENDPOINT_URL_SQS "
                "(unset it to use the AWS endpoint of AWS_REGION) and the network")
    code = _code(error)
    if code in _QUEUE_MISSING:
        return (f"no SQS queue at MIRROR_SQS_QUEUE_URL={url} (region {region or 'unset'}, "
                f"{where}): create the queue, or fix MIRROR_SQS_QUEUE_URL, AWS_REGION or "
                "AWS_ENDPOINT_URL_SQS")
    if code in _CREDENTIALS_REFUSED:
        return (f"SQS refused the credentials ({_describe(error)}): check AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, and grant sqs:GetQueueAttributes on "
                f"MIRROR_SQS_QUEUE_URL={url} (see docs/queues.md#amazon-sqs)")
    if isinstance(error, ValueError):
        return (f"the SQS endpoint is not usable ({_describe(error)}): "
                "check AWS_ENDPOINT_URL_SQS and MIRROR_SQS_QUEUE_URL")
    return (f"the SQS start-up check failed for MIRROR_SQS_QUEUE_URL={url} {where} "
            f"({_describe(error)}): check MIRROR_SQS_QUEUE_URL, AWS_REGION, "
            "AWS_ENDPOINT_URL_SQS and the credentials")


def _max_message_bytes(answer: Any) -> int:
    try:
        declared = int(answer["Attributes"]["MaximumMessageSize"])
    except (KeyError, TypeError, ValueError):
        return SQS_MAX_MESSAGE_BYTES
    return max(1, min(declared, SQS_MAX_MESSAGE_BYTES))


async def open_sqs_queue(
    settings: QueueSettings,
    on_drop: DropHook | None = None,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    credentials: tuple[str, str] | None = None,
    close_within: float = 5.0,
    send_backoff: tuple[float, float] = (0.1, 5.0),
    receive_backoff: tuple[float, float] = (0.5, 5.0),
    connect_timeout: float = 5.0,
    attempts: int = 3,
) -> MirrorQueue:
    """The SQS MirrorQueue for `settings.sqs_queue_url`, checked to exist and be reachable.

    Raises `QueueUnavailableError` naming what to set when it cannot be used. The keyword-only
    arguments are for tests and embedding, never new environment variables: an explicit
    endpoint, region and (access key id, secret) pair instead of botocore's resolution, the
    bound on `close()`'s flush, the send and receive backoff (base, cap) in seconds, the
    client's connect timeout, and the attempts botocore makes per call (retries included).
    """
    url = settings.sqs_queue_url
    if not url:
        raise QueueUnavailableError(
            f"MIRROR_QUEUE_PROVIDER=sqs needs MIRROR_SQS_QUEUE_URL: {SQS_URL_HINT}")
    if url.rstrip("/").endswith(".fifo"):
        raise QueueUnavailableError(
            f"MIRROR_SQS_QUEUE_URL={url} is a FIFO queue; mirrorgate needs a standard queue "
            "(jobs are independent and redeliveries are handled idempotently, so FIFO ordering "
            "buys nothing and its message groups are not sent)")
    # botocore itself reads only AWS_DEFAULT_REGION and the profile; the endpoint is botocore's
    # (it honours AWS_ENDPOINT_URL_SQS) and the credentials come from the default chain
    region = region or os.environ.get("AWS_REGION") or None
    wait = max(0, min(settings.poll_wait, 20))
    config = AioConfig(
        connect_timeout=connect_timeout,
        read_timeout=wait + READ_TIMEOUT_MARGIN,
        retries={"mode": "standard", "total_max_attempts": attempts},
    )
    keys: dict[str, str] = {}
    if credentials is not None:
        keys = {"aws_access_key_id": credentials[0], "aws_secret_access_key": credentials[1]}

    # the start-up check: a missing queue, absent credentials or an unreachable endpoint stop
    # the process with a message naming what to set; the queue's own MaximumMessageSize lets
    # enqueue refuse a job too big for *this* queue instead of poisoning a batch later
    stack = AsyncExitStack()
    client: Any = None
    try:
        client = await stack.enter_async_context(get_session().create_client(
            "sqs", region_name=region, endpoint_url=endpoint_url, config=config, **keys))
        answer = await client.get_queue_attributes(
            QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    except Exception as error:
        endpoint = endpoint_url or (client.meta.endpoint_url if client is not None else None)
        await stack.aclose()
        raise QueueUnavailableError(_explain(error, url, region, endpoint)) from error
    except BaseException:
        await stack.aclose()
        raise
    queue = SqsQueue(client, stack, url, settings, on_drop, wait=wait,
                     max_body=_max_message_bytes(answer), close_within=close_within,
                     send_backoff=send_backoff, receive_backoff=receive_backoff)
    log.info("mirror_queue_opened", provider=PROVIDER, region=client.meta.region_name,
             endpoint=client.meta.endpoint_url, max_message_bytes=queue.max_body,
             wait_seconds=wait, visibility_seconds=queue.visibility)
    return queue.record()


class SqsQueue:
    """One aiobotocore client per process, owned by the queue and closed by `close()`."""

    traits = QueueTraits(PROVIDER, crosses_processes=True, redelivers=True)

    def __init__(
        self,
        client: Any,
        stack: AsyncExitStack,
        url: str,
        settings: QueueSettings,
        on_drop: DropHook | None,
        *,
        wait: int,
        max_body: int,
        close_within: float,
        send_backoff: tuple[float, float],
        receive_backoff: tuple[float, float],
    ) -> None:
        self._client = client
        self._stack = stack
        self._url = url
        self._wait = wait
        # sent with every receive, so the window the worker extends against is the one SQS
        # applies whatever the queue's own default
        self.visibility = max(0, min(settings.visibility, MAX_VISIBILITY))
        self.max_body = max_body
        self._codec = JobCodec(settings.job_key, settings.job_key_previous)
        self._close_within = close_within
        self._receive_backoff = receive_backoff
        self._buffer = SendBuffer(self._send, provider=PROVIDER, max_depth=settings.max_depth,
                                  max_count=BATCH_SIZE, max_bytes=SQS_MAX_MESSAGE_BYTES,
                                  on_drop=on_drop, backoff=send_backoff)
        self._closed = False
        self._pending: list[tuple[ReceiptHandle, asyncio.Future[None]]] = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._refused = 0
        # jobs refused at enqueue count as dropped, like those SQS refuses or the buffer has no
        # room for: none of them will arrive
        self._not_enqueued = 0
        self._ack_failures = 0
        self._extend_failures = 0
        self._receive_failures = 0

    # --- enqueue: encode, buffer; the buffer's task sends ----------------------------------

    async def enqueue(self, job: MirrorJob) -> bool:
        try:
            body = self._codec.seal(_sqs_safe(encode_job(job).decode("utf-8")).encode("utf-8"))
        except Exception as error:  # the serve path must never fail because of a job
            self._not_enqueued += 1
            log.error("mirror_queue_job_unencodable", provider=PROVIDER, job=job.label,
                      error=_describe(error))
            return False
        if len(body) > self.max_body:
            self._not_enqueued += 1
            log.error("mirror_queue_job_too_large", provider=PROVIDER, job=job.label,
                      bytes=len(body), limit=self.max_body, not_enqueued=self._not_enqueued)
            return False
        return self._buffer.offer(body)

    def _refuse(self, body: bytes, code: str, reason: str) -> None:
        # refused as the sender's fault: logged and counted, never retried
        self._refused += 1
        log.error("mirror_queue_send_refused", provider=PROVIDER, job=_label(body), code=code,
                  reason=reason[:300], bytes=len(body), refused=self._refused)

    async def _send(self, batch: list[bytes]) -> SendOutcome:
        entries = [{"Id": str(i), "MessageBody": body.decode("utf-8")}
                   for i, body in enumerate(batch)]
        try:
            answer = await self._client.send_message_batch(QueueUrl=self._url, Entries=entries)
        except boto.ClientError as error:
            if _code(error) not in _CONTENT_REFUSED:
                raise
            if len(batch) == 1:
                self._refuse(batch[0], _code(error), _describe(error))
                return SendOutcome(refused=(0,))
            # a whole batch refused for its content is re-sent one message at a time, so one
            # bad job cannot hold the others back
            log.warning("mirror_queue_batch_refused", provider=PROVIDER, jobs=len(batch),
                        error=_describe(error))
            return await self._send_each(batch)
        answered: set[int] = set()
        for entry in answer.get("Successful") or ():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                answered.add(int(entry["Id"]))
        retry: list[int] = []
        refused: list[int] = []
        for entry in answer.get("Failed") or ():
            try:
                index = int(entry["Id"])
            except (KeyError, TypeError, ValueError):
                continue
            if not 0 <= index < len(batch) or index in answered:
                continue
            answered.add(index)  # answered for, one way or the other
            code = str(entry.get("Code", ""))
            reason = str(entry.get("Message", ""))
            if entry.get("SenderFault") is True:
                self._refuse(batch[index], code, reason)
                refused.append(index)
            else:  # failed through no fault of the sender: worth another try
                retry.append(index)
                log.warning("mirror_queue_send_entry_failed", provider=PROVIDER, code=code,
                            reason=reason[:300])
        retry.extend(i for i in range(len(batch)) if i not in answered)
        return SendOutcome(retry=tuple(retry), refused=tuple(refused))

    async def _send_each(self, batch: list[bytes]) -> SendOutcome:
        retry: list[int] = []
        refused: list[int] = []
        for index, body in enumerate(batch):
            try:
                await self._client.send_message(QueueUrl=self._url,
                                                MessageBody=body.decode("utf-8"))
            except boto.ClientError as error:
                if _code(error) in _CONTENT_REFUSED:
                    self._refuse(body, _code(error), _describe(error))
                    refused.append(index)
                else:
                    retry.append(index)
            except Exception:
                retry.append(index)
        return SendOutcome(retry=tuple(retry), refused=tuple(refused))

    # --- receive -------------------------------------------------------------------------

    async def receive(self) -> list[QueueMessage]:
        if self._closed:
            return []
        try:
            answer = await self._client.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=BATCH_SIZE,
                WaitTimeSeconds=self._wait,
                VisibilityTimeout=self.visibility,
                # reported as the delivery count, so a redelivery is seen as one
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except Exception as error:
            if self._closed:  # close() shut the client under this poll: not a failure
                return []
            # logged, backed off and answered with [], so the worker's loop and its heartbeat
            # keep going
            self._receive_failures += 1
            base, cap = self._receive_backoff
            delay = min(cap, base * 2 ** min(self._receive_failures - 1, 16))
            delay = random.uniform(delay / 2, delay)
            log.warning("mirror_queue_receive_failed", provider=PROVIDER,
                        error=_describe(error), retry_in=round(delay, 3))
            await asyncio.sleep(delay)
            return []
        self._receive_failures = 0
        raw = answer.get("Messages") if isinstance(answer, Mapping) else None
        if not isinstance(raw, list):
            return []
        return [m for item in raw if (m := _message(item, self._codec)) is not None]

    # --- ack, extend: a failure is logged and swallowed, the message comes back ----------

    def _ack_failed(self, jobs: int, error: str) -> None:
        self._ack_failures += jobs
        log.warning("mirror_queue_ack_failed", provider=PROVIDER, jobs=jobs, error=error,
                    ack_failures=self._ack_failures)

    async def ack(self, receipt: ReceiptHandle) -> None:
        # acks issued in the same loop tick share one DeleteMessageBatch (10 at most)
        if self._closed:
            self._ack_failed(1, "the queue is closed")
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((receipt, done))
        if len(self._pending) == 1:
            task = asyncio.get_running_loop().create_task(self._flush_acks())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        await asyncio.shield(done)

    async def _flush_acks(self) -> None:
        await asyncio.sleep(0)  # let every ack issued in this tick join the batch
        taken = self._pending[:]
        self._pending.clear()
        try:
            for start in range(0, len(taken), BATCH_SIZE):
                chunk = taken[start:start + BATCH_SIZE]
                await self._delete([receipt for receipt, _ in chunk])
                for _, done in chunk:
                    if not done.done():
                        done.set_result(None)
        finally:
            for _, done in taken:
                if not done.done():
                    done.set_result(None)

    async def _delete(self, receipts: list[ReceiptHandle]) -> None:
        try:
            if len(receipts) == 1:
                await self._client.delete_message(QueueUrl=self._url, ReceiptHandle=receipts[0])
                return
            answer = await self._client.delete_message_batch(QueueUrl=self._url, Entries=[
                {"Id": str(i), "ReceiptHandle": receipt} for i, receipt in enumerate(receipts)])
        except Exception as error:
            self._ack_failed(len(receipts), _describe(error))
            return
        failed = answer.get("Failed") or ()
        if failed:
            codes = sorted({str(entry.get("Code", "")) for entry in failed})
            self._ack_failed(len(failed), ", ".join(codes))

    async def extend_visibility(self, receipt: ReceiptHandle, seconds: Seconds) -> None:
        timeout = max(0, min(int(seconds), MAX_VISIBILITY))
        if self._closed:
            error = "the queue is closed"
        else:
            try:
                await self._client.change_message_visibility(
                    QueueUrl=self._url, ReceiptHandle=receipt, VisibilityTimeout=timeout)
                return
            except Exception as failure:
                error = _describe(failure)
        self._extend_failures += 1
        log.warning("mirror_queue_extend_failed", provider=PROVIDER, seconds=timeout,
                    error=error, extend_failures=self._extend_failures)

    # --- the frame -----------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        left = await self._buffer.close(self._close_within)
        if self._flushes:
            await asyncio.wait(set(self._flushes), timeout=self._close_within)
        await self._stack.aclose()
        log.info("mirror_queue_closed", provider=PROVIDER, unsent=left,
                 ack_failures=self._ack_failures, refused=self._refused,
                 not_enqueued=self._not_enqueued)

    def record(self) -> MirrorQueue:
        return MirrorQueue(self.traits, self.enqueue, self.receive, self.ack,
                           self.extend_visibility, self.close, self.stats)

    def stats(self) -> QueueStats:
        return QueueStats(
            depth=self._buffer.depth,
            dropped=self._buffer.dropped + self._not_enqueued,
            sent=self._buffer.sent,
            send_failures=self._buffer.failures,
            ack_failures=self._ack_failures + self._extend_failures,
        )
