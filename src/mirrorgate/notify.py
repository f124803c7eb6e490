"""Security notifications: each `Alert` POSTed to MIRRORGATE_NOTIFY_URL as a signed CloudEvent.

A person must hear of tampered bytes, a malware denial or a forged job within seconds, in the
chat or incident tool they already watch, not find it later in a log search. `Notifier.post`
takes an alert on whatever path raised it and returns at once: a repeat of the same kind for the
same version within `WINDOW` is counted, not sent; the rest wait in a bounded queue (the newest
dropped, and counted, when it is full) for one background sender, which retries with backoff.
A client's request never waits on it and never fails because of it.

The body is a CloudEvents 1.0 structured JSON event whose `text` attribute Slack's and Teams'
webhooks show as it is; MIRRORGATE_NOTIFY_SECRET signs its exact bytes (`X-Mirrorgate-Signature`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
import structlog

from mirrorgate.config import NotifySettings, Secret
from mirrorgate.events import Alert
from mirrorgate.logs import scrub
from mirrorgate.metrics import Metrics
from mirrorgate.tasks import Tasks

__all__ = ["OUTCOMES", "SIGNATURE_HEADER", "Notifier", "envelope", "signature", "verify"]

log = structlog.get_logger("mirrorgate.notify")

WINDOW = 3600.0
"""Seconds during which a repeat of (kind, version) is counted `deduplicated`, not sent: a
denied version is seen again at every packument fill and every retried install."""
CAPACITY = 1000
"""Notifications waiting to be sent; past it the newest is dropped (counted)."""
ATTEMPTS = 5
"""Deliveries tried per notification: the first, then after 1, 2, 4 and 8 seconds."""
BACKOFF = 1.0
BACKOFF_MAX = 60.0
"""The longest wait between attempts, a receiver's Retry-After included."""
TIMEOUT = 10.0
"""Seconds one attempt may take."""
CLOSE_WITHIN = 5.0
"""Seconds the exit waits for what is queued to go out; the rest is counted dropped."""
REMEMBERED = 10_000
"""(kind, version) pairs remembered for the window; the oldest are forgotten first."""
DROP_REPORT = 100
"""A full queue is logged on the first drop, then every this many."""
SIGNATURE_HEADER = "X-Mirrorgate-Signature"
TYPE_PREFIX = "dev.mirrorgate."
TEXT_LIMIT = 1000

_DELIVERED, _REFUSED, _AGAIN = "delivered", "refused", "again"
OUTCOMES = ("delivered", "failed", "dropped", "deduplicated")
"""`mirrorgate_notifications_total{outcome}`."""


def signature(secret: Secret, body: bytes) -> str:
    """The signature header's value for `body`: `sha256=` and the hex HMAC-SHA256."""
    mac = hmac.new(secret.reveal().encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={mac}"


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """What a receiver does: recompute the HMAC over the exact bytes received and compare in
    constant time."""
    if header is None or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


def _slack_safe(text: str) -> str:
    # Slack reads <...> as a link or a mention, and Teams decodes the same entities: a package
    # or an advisory's summary cannot turn the line into a link
    one_line = " ".join(text.split())
    return (one_line.replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))[:TEXT_LIMIT]


def envelope(alert: Alert, *, source: str, process: str, host: str, at: datetime,
             ident: str) -> dict[str, Any]:
    """The CloudEvents 1.0 structured event for `alert`, every registered secret scrubbed
    from what it says."""
    data: dict[str, Any] = {"kind": alert.kind, "package": alert.package,
                            "version": alert.version, "process": process, "host": host,
                            **alert.data}
    return {
        "specversion": "1.0",
        "id": ident,
        "source": source,
        "type": TYPE_PREFIX + alert.kind,
        "time": at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "subject": scrub(alert.subject),
        "datacontenttype": "application/json",
        "text": _slack_safe(scrub(f"mirrorgate {alert.kind}: {alert.text} "
                                  f"({process} on {host})")),
        "data": scrub(data),
    }


def _wall() -> datetime:
    return datetime.now(UTC)


def _retry_after(value: str | None) -> float | None:
    try:
        return min(BACKOFF_MAX, max(0.0, float(value))) if value else None
    except ValueError:
        return None


class Notifier:
    """One webhook's sender. `post` from the event loop; `start` before, `close` at exit.

    `clock` (monotonic, for the window), `now` (wall time, for the event's `time`) and
    `sleep` (the backoff) are injectable so tests move time instead of waiting."""

    def __init__(self, settings: NotifySettings, metrics: Metrics, *, source: str,
                 process: str, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = _wall,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 capacity: int = CAPACITY, window: float = WINDOW, attempts: int = ATTEMPTS,
                 timeout: float = TIMEOUT) -> None:
        if settings.url is None:
            raise ValueError("a Notifier needs MIRRORGATE_NOTIFY_URL")
        self._url = settings.url
        self._secret = settings.secret
        self.shown = settings.url.shown()
        self._metrics = metrics
        self._source = source
        self._process = process
        self._host = socket.gethostname()
        self._clock = clock
        self._now = now
        self._sleep = sleep
        self._window = window
        self._attempts = max(1, attempts)
        self._timeout = timeout
        self._queue: asyncio.Queue[tuple[Alert, datetime]] = asyncio.Queue(capacity)
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._dropped = 0
        self._closing = False
        self._sending = False
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._outcomes = {outcome: metrics.notifications.labels(outcome)
                          for outcome in OUTCOMES}

    async def start(self, tasks: Tasks | None = None) -> None:
        """Open the session and start the sender, watched by the process's `tasks` (a
        command's notifier by tasks of its own)."""
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._timeout),
            headers={"User-Agent": "mirrorgate (notify)"}, trust_env=False,
            connector=aiohttp.TCPConnector(limit=2))
        self._task = (tasks or Tasks(self._metrics)).keep("notifier", self._run)

    # --- taking alerts (on whatever path raised them) ------------------------------------

    def post(self, alert: Alert) -> None:
        """Queue `alert` for sending; never waits, never raises."""
        key = alert.repeat_key
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last < self._window:
            self._outcomes["deduplicated"].inc()
            return
        if self._closing:
            self._drop(alert, "stopping")
            return
        try:
            self._queue.put_nowait((alert, self._now()))
        except asyncio.QueueFull:
            self._drop(alert, "full")
            return
        self._seen[key] = now
        self._seen.move_to_end(key)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)

    def _drop(self, alert: Alert, why: str) -> None:
        self._outcomes["dropped"].inc()
        self._dropped += 1
        if self._dropped == 1 or self._dropped % DROP_REPORT == 0:
            log.warning("notification_dropped", kind=alert.kind, subject=alert.subject,
                        why=why, dropped=self._dropped, capacity=self._queue.maxsize)

    # --- sending (one background task) ---------------------------------------------------

    async def _run(self) -> None:
        while True:
            alert, at = await self._queue.get()
            self._sending = True
            try:
                await self._send(alert, at)
            except Exception:  # one notification never stops the sender
                log.exception("notification_crashed", kind=alert.kind)
                self._outcomes["failed"].inc()
            finally:
                self._sending = False
                self._queue.task_done()

    def _body(self, alert: Alert, at: datetime) -> tuple[bytes, dict[str, str]]:
        event = envelope(alert, source=self._source, process=self._process, host=self._host,
                         at=at, ident=str(uuid.uuid4()))
        body = orjson.dumps(event)
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = signature(self._secret, body)
        return body, headers

    async def _send(self, alert: Alert, at: datetime) -> None:
        body, headers = self._body(alert, at)
        for attempt in range(1, self._attempts + 1):
            verdict, detail, wait = await self._attempt(body, headers)
            if verdict == _DELIVERED:
                self._outcomes["delivered"].inc()
                log.info("notification_delivered", kind=alert.kind, subject=alert.subject,
                         attempts=attempt, target=self.shown)
                return
            if verdict == _REFUSED or attempt == self._attempts:
                self._outcomes["failed"].inc()
                log.error("notification_failed", kind=alert.kind, subject=alert.subject,
                          attempts=attempt, detail=detail, target=self.shown,
                          reason="the receiver refused it" if verdict == _REFUSED
                          else "every attempt failed")
                return
            delay = wait if wait is not None else min(BACKOFF_MAX,
                                                      BACKOFF * 2 ** (attempt - 1))
            self._metrics.notification_retries.inc()
            log.warning("notification_retry", kind=alert.kind, subject=alert.subject,
                        attempt=attempt, detail=detail, delay=delay, target=self.shown)
            await self._sleep(delay)

    async def _attempt(self, body: bytes,
                       headers: Mapping[str, str]) -> tuple[str, str, float | None]:
        """One POST: (verdict, what happened, the receiver's Retry-After)."""
        assert self._session is not None
        try:
            # no redirects: a signed security event goes where the operator said, nowhere else
            async with self._session.post(self._url.reveal(), data=body, headers=headers,
                                          allow_redirects=False) as response:
                await response.content.read(64 * 1024)
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            # the type only: aiohttp's text can quote the URL, which is a credential
            return _AGAIN, type(error).__name__, None
        if 200 <= status < 300:
            return _DELIVERED, str(status), None
        if status >= 500 or status in (408, 429):
            return _AGAIN, f"answered {status}", retry_after
        return _REFUSED, f"answered {status}", None

    # --- stopping ------------------------------------------------------------------------

    async def close(self, within: float = CLOSE_WITHIN) -> None:
        """Send what is queued for up to `within` seconds, then stop; what is left is
        counted dropped and logged."""
        self._closing = True
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), within)
            unsent = self._queue.qsize() + (1 if self._sending else 0)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            if unsent:
                self._outcomes["dropped"].inc(unsent)
                log.warning("notification_unsent_at_close", unsent=unsent, within=within)
        if self._session is not None:
            await self._session.close()
            self._session = None
