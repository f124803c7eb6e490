"""Google's Pub/Sub emulator for the tests: one per session, on a free loopback port.

The emulator cannot be installed from the package registries these machines reach, so on a
machine without it (nothing at the Cloud SDK's standard path, PUBSUB_EMULATOR_BIN unset) every
test that needs it is skipped with the reason, in CI too, and the run's last lines count those
skips (tests/conftest.py). Where it is expected (installed at the standard path, or named by
PUBSUB_EMULATOR_BIN) but absent or unable to start, that is a failure in CI and a skip
elsewhere. Decisions:

- It is started in its own process group (the launcher is a shell script running java) and
  stopped by signalling that group, so no java child outlives the session.
- It has no reset, so every test makes its own uniquely named topic and subscription with
  `make_pubsub_names` (optionally with a dead-letter topic, its subscription and a policy).
- Nothing here sets PUBSUB_EMULATOR_HOST: the host is passed to the clients explicitly, so
  tests that do not ask for the emulator never see it.
- `pubsub_harness` is the conformance suite's entry for the backend: a short ack deadline and
  a dead-letter policy (for `delivery_attempt`) keep redelivery cases at a second or two.
- `pubsub_environment` gives the variables that put a `mirrorgate` process on a topic and
  subscription of the emulator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.pubsub_v1 import types as pubsub_types
from google.pubsub_v1.services.publisher import PublisherAsyncClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcAsyncIOTransport

from mirrorgate.backends.pubsub import open_pubsub_queue
from mirrorgate.config import QueueSettings
from mirrorgate.mirror import MirrorQueue
from tests.queue.harness import Harness
from tests.servers.availability import unavailable
from tests.servers.ports import free_port

__all__ = [
    "CONFORMANCE_ACK_DEADLINE",
    "DEFAULT_EMULATOR",
    "PROJECT",
    "EmulatorLookup",
    "PubSubAdmin",
    "PubSubNames",
    "create_pubsub_names",
    "find_emulator",
    "look_for_emulator",
    "make_pubsub_names",
    "open_test_queue",
    "pubsub_admin",
    "pubsub_emulator",
    "pubsub_environment",
    "pubsub_harness",
    "queue_settings",
]

DEFAULT_EMULATOR = Path(
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"
)
PROJECT = "mirrorgate-test"
START_WITHIN = 30.0
CONFORMANCE_ACK_DEADLINE = 1
"""The ack deadline the conformance harness sets on each delivery; the emulator honours it."""
TEST_PULL_TIMEOUT = 1.5
"""One receive's network wait in tests: the emulator answers an empty pull about a second
before the client's deadline, so an idle receive takes about half a second."""


@dataclass(frozen=True)
class EmulatorLookup:
    """Where the emulator launcher is, or why there is none, and whether one was expected:
    it is when PUBSUB_EMULATOR_BIN names one, or when this machine has the Cloud SDK's."""

    launcher: Path | None
    reason: str
    expected: bool


def look_for_emulator(configured: str | None = None,
                      default: Path = DEFAULT_EMULATOR) -> EmulatorLookup:
    """$PUBSUB_EMULATOR_BIN (`configured`), else the Cloud SDK's usual place (`default`)."""
    path = Path(configured) if configured else default
    if path.is_file() and os.access(path, os.X_OK):
        return EmulatorLookup(path, f"emulator {path}", expected=True)
    if configured:  # a mistyped variable is a broken setup, not a machine without the emulator
        return EmulatorLookup(None, f"PUBSUB_EMULATOR_BIN={configured} is not an executable "
                              "file; point it at the cloud-pubsub-emulator launcher or unset "
                              "it", expected=True)
    return EmulatorLookup(None, f"Pub/Sub emulator not found at {default} (it cannot be "
                          "installed from the package registries; set PUBSUB_EMULATOR_BIN to "
                          "its cloud-pubsub-emulator launcher)", expected=False)


def find_emulator() -> EmulatorLookup:
    return look_for_emulator(os.environ.get("PUBSUB_EMULATOR_BIN"))


def pytest_report_header(config: pytest.Config) -> str:
    found = find_emulator()
    if found.launcher is None:
        return f"pubsub: SKIPPING the Pub/Sub tests: {found.reason}"
    return f"pubsub: {found.reason}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # the group may outlive its leader (java started by the launcher script)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running emulator's `host:port` on 127.0.0.1, for the whole session."""
    found = find_emulator()
    launcher = found.launcher
    if launcher is None:
        if found.expected:
            unavailable(found.reason)  # a failure under CI: the tests were meant to run
        pytest.skip(found.reason)
    port = free_port()
    logfile = tmp_path_factory.mktemp("pubsub-emulator") / "emulator.log"
    with logfile.open("wb") as sink:
        process = subprocess.Popen(
            [str(launcher), "--host=127.0.0.1", f"--port={port}"],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_WITHIN
        while "Server started" not in logfile.read_text(errors="replace"):
            if process.poll() is not None:
                unavailable(f"the Pub/Sub emulator exited with {process.returncode}: "
                              f"{logfile.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                unavailable(f"the Pub/Sub emulator did not start within {START_WITHIN:.0f} s: "
                              f"{logfile.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(process)


@dataclass(frozen=True)
class PubSubNames:
    """One test's resources: a topic, its subscription and, optionally, a dead-letter pair."""

    topic: str
    subscription: str
    dead_letter_topic: str | None = None
    dead_letter_subscription: str | None = None


class PubSubAdmin:
    """Admin clients on the emulator for one event loop: create resources, publish raw bodies.

    Close it (or use `pubsub_admin`) so its gRPC channels are closed in the loop they belong to.
    """

    def __init__(self, host: str) -> None:
        self.host = host
        self.publisher = PublisherAsyncClient(transport=PublisherGrpcAsyncIOTransport(
            channel=grpc.aio.insecure_channel(host)))
        self.subscriber = SubscriberAsyncClient(transport=SubscriberGrpcAsyncIOTransport(
            channel=grpc.aio.insecure_channel(host)))

    async def create(
        self,
        *,
        dead_letter_attempts: int | None = None,
        ack_deadline: int = 10,
        prefix: str = "mg",
    ) -> PubSubNames:
        """A new topic and pull subscription (and a dead-letter topic with its own subscription
        and a policy of `dead_letter_attempts`, 5..100, when given), uniquely named."""
        unique = f"{prefix}-{uuid.uuid4().hex[:12]}"
        topic = f"projects/{PROJECT}/topics/{unique}"
        subscription = f"projects/{PROJECT}/subscriptions/{unique}"
        await self.publisher.create_topic(name=topic, timeout=10)
        request: dict[str, Any] = {"name": subscription, "topic": topic,
                                   "ack_deadline_seconds": ack_deadline}
        if dead_letter_attempts is None:
            await self.subscriber.create_subscription(request=request, timeout=10)
            return PubSubNames(topic, subscription)
        dead_topic = f"{topic}-dead"
        dead_subscription = f"{subscription}-dead"
        await self.publisher.create_topic(name=dead_topic, timeout=10)
        await self.subscriber.create_subscription(
            request={"name": dead_subscription, "topic": dead_topic}, timeout=10)
        request["dead_letter_policy"] = {"dead_letter_topic": dead_topic,
                                         "max_delivery_attempts": dead_letter_attempts}
        await self.subscriber.create_subscription(request=request, timeout=10)
        return PubSubNames(topic, subscription, dead_topic, dead_subscription)

    async def publish_raw(self, topic: str, *bodies: bytes) -> None:
        """Publish bodies as they are, bypassing the job codec (foreign or broken messages)."""
        await self.publisher.publish(
            topic=topic, messages=[pubsub_types.PubsubMessage(data=b) for b in bodies],
            timeout=10)

    async def close(self) -> None:
        # the generated transports leave close() unannotated
        await self.publisher.transport.close()  # type: ignore[no-untyped-call]
        await self.subscriber.transport.close()  # type: ignore[no-untyped-call]


async def create_pubsub_names(
    host: str, *, dead_letter_attempts: int | None = None, ack_deadline: int = 10,
) -> PubSubNames:
    """Make a topic and subscription on the emulator at `host` and return their names."""
    admin = PubSubAdmin(host)
    try:
        return await admin.create(dead_letter_attempts=dead_letter_attempts,
                                  ack_deadline=ack_deadline)
    finally:
        await admin.close()


@pytest.fixture
def make_pubsub_names(pubsub_emulator: str) -> Callable[..., Awaitable[PubSubNames]]:
    """`await make_pubsub_names(dead_letter_attempts=None, ack_deadline=10)`: fresh names."""

    async def make(*, dead_letter_attempts: int | None = None,
                   ack_deadline: int = 10) -> PubSubNames:
        return await create_pubsub_names(pubsub_emulator, dead_letter_attempts=dead_letter_attempts,
                                         ack_deadline=ack_deadline)

    return make


@pytest.fixture
async def pubsub_admin(pubsub_emulator: str) -> AsyncIterator[PubSubAdmin]:
    admin = PubSubAdmin(pubsub_emulator)
    yield admin
    await admin.close()


def pubsub_environment(emulator: str, names: PubSubNames) -> dict[str, str]:
    """The variables that put a process on this topic and subscription of the emulator (the
    shortest ack deadline Pub/Sub allows)."""
    return {"MIRROR_QUEUE_PROVIDER": "pubsub",
            "MIRROR_PUBSUB_TOPIC": names.topic,
            "MIRROR_PUBSUB_SUBSCRIPTION": names.subscription,
            "MIRROR_VISIBILITY_SECONDS": "10",
            "PUBSUB_EMULATOR_HOST": emulator}


def queue_settings(names: PubSubNames, **overrides: Any) -> QueueSettings:
    """The settings `MIRROR_QUEUE_PROVIDER=pubsub` would produce for these names."""
    values: dict[str, Any] = {
        "provider": "pubsub", "max_depth": 1000, "poll_wait": 20, "visibility": 60,
        "sqs_queue_url": None, "pubsub_topic": names.topic,
        "pubsub_subscription": names.subscription,
    }
    values.update(overrides)
    return QueueSettings(**values)


async def open_test_queue(host: str, names: PubSubNames, **overrides: Any) -> MirrorQueue:
    """The Pub/Sub queue on the emulator at `host`, with a test's short pull wait."""
    overrides.setdefault("pull_timeout", TEST_PULL_TIMEOUT)
    return await open_pubsub_queue(queue_settings(names), emulator_host=host, **overrides)


@asynccontextmanager
async def pubsub_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """The conformance suite's Pub/Sub backend: its own topic, and a dead-letter policy at
    Pub/Sub's maximum (100) so `delivery_attempt` is reported but nothing is forwarded."""
    host: str = request.getfixturevalue("pubsub_emulator")
    names = await create_pubsub_names(host, dead_letter_attempts=100)
    queue = await open_test_queue(host, names, ack_deadline=CONFORMANCE_ACK_DEADLINE)
    try:
        # hold: an extension is clamped to Pub/Sub's 10 s minimum, so the suite asks for that
        yield Harness("pubsub", queue, window=float(CONFORMANCE_ACK_DEADLINE), hold=10,
                      patience=3.0, quiet=1.0)
    finally:
        await queue.close()
