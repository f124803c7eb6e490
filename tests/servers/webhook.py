"""A webhook receiver on 127.0.0.1: what Slack, Teams or an incident tool is to the notifier.

`POST /hook` keeps each request's headers and exact body bytes (`Received`, with the body's
JSON and whether its signature verifies with the test's secret). `answer` sets what it replies
(200 by default, 500 to make the notifier retry, with `retry_after` as its Retry-After), `hang`
holds every answer until it is cleared; `stop()` and `start()` take it down and bring it back
on the same URL. A `ThreadedApp`, so it keeps answering while a test blocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from tests.servers.availability import serving
from tests.servers.threaded import ThreadedApp

__all__ = ["SECRET", "Received", "WebhookReceiver", "webhook"]

SECRET = "whsec-" + "7" * 40
SIGNATURE = "X-Mirrorgate-Signature"


def signed_by(secret: str, body: bytes, header: str | None) -> bool:
    """The receiver's check, written as the docs tell a receiver to write it."""
    if header is None or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    status: int
    """What the receiver answered this request."""

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def signature_valid(self) -> bool:
        return signed_by(SECRET, self.body, self.headers.get(SIGNATURE))


class WebhookReceiver(ThreadedApp):
    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(self._build, host=host, name="webhook")
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self.answer = 200
        self.retry_after: str | None = None
        self.hang = False

    @property
    def hook_url(self) -> str:
        return self.url + "hook/T0/B0/" + "x" * 24

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def delivered(self) -> list[Received]:
        """The requests answered 2xx: what a chat would show."""
        return [item for item in self.received if 200 <= item.status < 300]

    def of_type(self, kind: str) -> list[Received]:
        return [item for item in self.delivered() if item.event.get("type") == kind]

    def _build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook/{tail:.*}", self._hook)
        return app

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        status = self.answer
        with self._lock:
            self._received.append(Received(dict(request.headers), body, status))
        while self.hang:  # noqa: ASYNC110 - the flag is set from the test's thread
            await asyncio.sleep(0.02)
        if 200 <= status < 300:
            return web.Response(text="ok")
        headers = {"Retry-After": self.retry_after} if self.retry_after is not None else None
        return web.Response(status=status, text="rollup_error", headers=headers)


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    """A started receiver answering 200, stopped at teardown."""
    with serving(WebhookReceiver(), "the webhook receiver") as receiver:
        yield receiver
