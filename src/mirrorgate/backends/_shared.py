"""What every queue backend shares: the batch size, drop reports, error lines, the decoding of a
delivery.

A backend is a small class whose bound methods fill the `MirrorQueue` record (`mirror.py`),
which is all the worker and the serve path ever see.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from mirrorgate.jobsign import JobSignatureError
from mirrorgate.mirror import JobDecodeError, QueueMessage

if TYPE_CHECKING:  # named in signatures only
    from mirrorgate.jobsign import JobCodec
    from mirrorgate.mirror import ReceiptHandle

__all__ = [
    "BATCH_SIZE",
    "DROP_REPORT_EVERY",
    "DropHook",
    "delivery",
    "describe",
    "ignore_drop",
    "report_drop",
]

log = structlog.get_logger("mirrorgate.queue")

BATCH_SIZE = 10
"""At most this many jobs per receive: the SQS cap, so every production backend hands the
worker the same batch shape and a cold-cache burst cannot starve its heartbeat."""

DROP_REPORT_EVERY = 1000
"""Drops absorbed between reports: the first is reported, then every multiple of this."""

DropHook = Callable[[int], None]
"""Told the running count of jobs a queue dropped (a metric, a log line)."""


def ignore_drop(_total: int) -> None:
    return None


def report_drop(total: int, on_drop: DropHook) -> bool:
    """Tell `on_drop` the running drop count on the first drop and every 1,000th; True when it
    was told (the caller logs then), so a flood of drops costs a few lines, not one each."""
    if total != 1 and total % DROP_REPORT_EVERY != 0:
        return False
    with contextlib.suppress(Exception):  # a reporting hook must never fail the serve path
        on_drop(total)
    return True


def describe(error: BaseException, code: str = "") -> str:
    """An error as one short line for a log or a start-up message: its type (with the service's
    error code when there is one) and the first line of its text."""
    text = str(error).splitlines()[0] if str(error) else ""
    name = f"{type(error).__name__}({code})" if code else type(error).__name__
    return f"{name}: {text}"[:300]


def delivery(provider: str, codec: JobCodec, body: bytes, receipt: ReceiptHandle,
             deliveries: int | None, message_id: str) -> QueueMessage:
    """A received body as a QueueMessage: the job, or `job=None` with why it was refused, for
    the worker to retire; one bad message never turns a receive into an exception."""
    try:
        job = codec.open(body)
    except JobSignatureError as error:
        message = QueueMessage(None, receipt, deliveries, problem=str(error),
                               message_id=message_id, refusal=error.reason)
    except JobDecodeError as error:
        message = QueueMessage(None, receipt, deliveries, problem=str(error),
                               message_id=message_id)
    except Exception as error:  # a body the codec did not foresee is still one bad message
        message = QueueMessage(None, receipt, deliveries, message_id=message_id,
                               problem=f"body could not be decoded: {describe(error)}")
    else:
        message = QueueMessage(job, receipt, deliveries, message_id=message_id)
    _log_redelivery(provider, message)
    return message


def _log_redelivery(provider: str, message: QueueMessage) -> None:
    # a delivery made before (a worker died or gave the job back) is logged with its count, so
    # the worker that picks it up says so
    if message.deliveries is None or message.deliveries < 2:
        return
    job = {"package": message.job.name, "version": message.job.version} if message.job else {}
    log.info("mirror_queue_redelivered", provider=provider, message_id=message.message_id,
             deliveries=message.deliveries, **job)
