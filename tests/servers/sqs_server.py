"""moto's SQS server on loopback, for every suite that needs a real SQS endpoint.

One server per test session, run in this process on a free port; every queue gets a unique name,
so tests never share one and nothing needs a reset. Decisions:

- The server is werkzeug's, built here rather than through moto's `ThreadedMotoServer`, so the
  port is bound before the thread starts (a busy port is an error, not a hang) and `stop()`
  closes the listening socket: a stopped endpoint refuses connections, as a dead one does.
  moto keeps its state per process, so a server started again on the same port serves the
  same queues, which is how a test takes the endpoint away and brings it back.
- Region and dummy credentials are passed to every client explicitly (`SQS_REGION`,
  `SQS_CREDENTIALS`); no environment variable is changed for other tests.
- moto, werkzeug and aiobotocore are imported when first used, so a session that runs no
  SQS test does not pay for them.
- A server that cannot start fails the session's SQS tests when CI is set, skips them otherwise.

Fixtures: `sqs_server` (a `SqsServer`: the endpoint, `create_queue`, `open`, `client`) and
`sqs_endpoint` (its URL). `sqs_harness` is the conformance suite's factory for `BACKENDS`;
`sqs_environment` the variables that put a `mirrorgate` process on one of its queues.
"""

from __future__ import annotations

import collections
import io
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from mirrorgate.config import QueueSettings
from mirrorgate.mirror import MirrorQueue
from tests.queue.harness import Harness
from tests.servers.availability import unavailable

__all__ = [
    "SQS_CREDENTIALS",
    "SQS_REGION",
    "MotoServer",
    "ReceiveWatch",
    "SqsServer",
    "SqsTestQueue",
    "sqs_endpoint",
    "sqs_environment",
    "sqs_harness",
    "sqs_server",
    "sqs_settings",
]

SQS_REGION = "us-east-1"
SQS_CREDENTIALS = ("testing", "testing")


class ReceiveWatch:
    """WSGI middleware over moto counting the ReceiveMessage calls it is holding, per queue URL,
    so a test can wait until a long poll is really under way instead of sleeping."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._waiting: collections.Counter[str] = collections.Counter()

    def waiting(self, queue_url: str) -> int:
        with self._lock:
            return self._waiting[queue_url]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        # botocore speaks SQS's JSON protocol: the action is a header, the queue in the body
        if environ.get("HTTP_X_AMZ_TARGET") != "AmazonSQS.ReceiveMessage":
            return self._app(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        queue = str(json.loads(body or b"{}").get("QueueUrl", ""))
        with self._lock:
            self._waiting[queue] += 1
        try:  # moto holds the long poll inside the call; the answer is whole once it returns
            return list(self._app(environ, start_response))
        finally:
            with self._lock:
                self._waiting[queue] -= 1


class MotoServer:
    """moto's server application on 127.0.0.1:`port` (0: a free one), in a thread."""

    def __init__(self, port: int = 0) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        self.polls = ReceiveWatch(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            "127.0.0.1", port, self.polls, threaded=True, request_handler=MotoRequestHandler)
        self.port: int = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"moto-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class SqsTestQueue:
    url: str
    arn: str
    dlq_url: str | None = None


def sqs_settings(url: str, *, poll_wait: int = 1, visibility: int = 1,
                 max_depth: int = 1000) -> QueueSettings:
    """Queue settings for `url` with test-sized windows (1 s poll, 1 s visibility)."""
    return QueueSettings(provider="sqs", max_depth=max_depth, poll_wait=poll_wait,
                         visibility=visibility, sqs_queue_url=url, pubsub_topic=None,
                         pubsub_subscription=None)


@dataclass(frozen=True)
class SqsServer:
    endpoint: str
    polls: ReceiveWatch | None = None
    """The server's long polls under way (None for an endpoint this process does not run)."""

    def polls_waiting(self, queue_url: str) -> int:
        """How many ReceiveMessage calls on `queue_url` the server is holding right now."""
        assert self.polls is not None, "this endpoint's server does not run in this process"
        return self.polls.waiting(queue_url)

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        """A raw aiobotocore SQS client on this server, for setting up and inspecting."""
        from aiobotocore.session import get_session

        async with get_session().create_client(
            "sqs", region_name=SQS_REGION, endpoint_url=self.endpoint,
            aws_access_key_id=SQS_CREDENTIALS[0], aws_secret_access_key=SQS_CREDENTIALS[1],
        ) as sqs:
            yield sqs

    async def create_queue(
        self,
        *,
        visibility: int = 1,
        max_receive_count: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> SqsTestQueue:
        """A fresh queue with a unique name; with `max_receive_count`, a dead-letter queue too,
        wired by a redrive policy."""
        name = f"mg-{uuid.uuid4().hex[:16]}"
        wanted = {"VisibilityTimeout": str(visibility), **(attributes or {})}
        async with self.client() as sqs:
            dlq_url: str | None = None
            if max_receive_count is not None:
                dlq_url = (await sqs.create_queue(QueueName=f"{name}-dlq"))["QueueUrl"]
                dlq_arn = await _arn(sqs, dlq_url)
                wanted["RedrivePolicy"] = json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)})
            url: str = (await sqs.create_queue(QueueName=name, Attributes=wanted))["QueueUrl"]
            return SqsTestQueue(url=url, arn=await _arn(sqs, url), dlq_url=dlq_url)

    async def open(self, url: str, *, poll_wait: int = 1, visibility: int = 1,
                   max_depth: int = 1000, **overrides: Any) -> MirrorQueue:
        """mirrorgate's SQS backend on `url`, with short backoffs unless overridden."""
        from mirrorgate.backends.sqs import open_sqs_queue

        options: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "region": SQS_REGION,
            "credentials": SQS_CREDENTIALS,
            "send_backoff": (0.05, 0.2),
            "receive_backoff": (0.05, 0.2),
        }
        options.update(overrides)
        settings = sqs_settings(url, poll_wait=poll_wait, visibility=visibility,
                                max_depth=max_depth)
        return await open_sqs_queue(settings, **options)


def sqs_environment(server: SqsServer, queue_url: str) -> dict[str, str]:
    """The variables that put a process on this SQS queue (the shortest visibility allowed)."""
    return {"MIRROR_QUEUE_PROVIDER": "sqs",
            "MIRROR_SQS_QUEUE_URL": queue_url,
            "MIRROR_VISIBILITY_SECONDS": "10",
            "AWS_REGION": SQS_REGION,
            "AWS_ENDPOINT_URL_SQS": server.endpoint,
            "AWS_ACCESS_KEY_ID": SQS_CREDENTIALS[0],
            "AWS_SECRET_ACCESS_KEY": SQS_CREDENTIALS[1]}


async def _arn(sqs: Any, url: str) -> str:
    answer = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(answer["Attributes"]["QueueArn"])


@pytest.fixture(scope="session")
def sqs_server() -> Iterator[SqsServer]:
    try:
        server = MotoServer()
    except Exception as error:  # an import, a bind or moto itself: all mean "not here"
        unavailable(f"moto's SQS server could not start: {error}")
    try:
        yield SqsServer(server.endpoint, server.polls)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sqs_endpoint(sqs_server: SqsServer) -> str:
    return sqs_server.endpoint


@asynccontextmanager
async def sqs_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """The conformance suite's SQS backend: a fresh queue with a 1 s visibility window.

    `hold` is 3 s because moto answers an idle 1 s long-poll after up to 2 s; `quiet` covers
    one such poll.
    """
    server: SqsServer = request.getfixturevalue("sqs_server")
    created = await server.create_queue(visibility=1)
    queue = await server.open(created.url, poll_wait=1, visibility=1)
    try:
        yield Harness("sqs", queue, window=1.0, hold=3, patience=3.0, quiet=0.5)
    finally:
        await queue.close()
