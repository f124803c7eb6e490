"""The notifier against a real webhook receiver on 127.0.0.1: signed CloudEvents with a line a
chat shows, one notification per version and kind within the window, retries with backoff on a
receiver that fails, drops counted when the queue is full, and nothing secret in the body.

Time is injected: the window's clock is a `ManualClock` and the backoff's sleep is recorded
(and returns at once), so no case waits for a real retry delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from mirrorgate.config import NotifySettings, Secret, SecretUrl
from mirrorgate.events import Alert
from mirrorgate.logs import MASK, register_secret
from mirrorgate.metrics import Metrics
from mirrorgate.notify import (
    SIGNATURE_HEADER,
    Notifier,
    envelope,
    signature,
    verify,
)
from tests.clock import ManualClock
from tests.metric_samples import metric_value, registry_samples
from tests.servers.processes import until
from tests.servers.webhook import SECRET, WebhookReceiver

TAMPERED = Alert("tampered", "left-pad@1.3.0", "the bytes did not match", "left-pad", "1.3.0",
                 {"where": "proxy", "expected": "sha512-AAAA", "actual": "sha512-BBBB"})
MALWARE = Alert("malware", "evil@1.0.0", "known malware", "evil", "1.0.0",
                {"rule": "advisory-malware"})
AT = datetime(2026, 11, 3, 9, 30, 0, 123000, tzinfo=UTC)


class Sleeps:
    """The backoff's sleep: recorded, returning at once, with a hook run before each return."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.before: Callable[[int], None] = lambda _n: None

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.before(len(self.delays))
        await asyncio.sleep(0)


def count(metrics: Metrics, outcome: str) -> float:
    return metric_value(registry_samples(metrics.registry), "mirrorgate_notifications_total",
                        outcome=outcome)


def retries(metrics: Metrics) -> float:
    return metric_value(registry_samples(metrics.registry),
                        "mirrorgate_notification_retries_total")


Make = Callable[..., Awaitable[tuple[Notifier, Metrics]]]


@pytest.fixture
async def notifier(webhook: WebhookReceiver) -> AsyncIterator[Make]:
    """`await make(**overrides)`: a started notifier for the receiver, closed at teardown."""
    made: list[Notifier] = []

    async def make(secret: str | None = SECRET, **overrides: Any) -> tuple[Notifier, Metrics]:
        metrics = Metrics()
        settings = NotifySettings(SecretUrl(webhook.hook_url),
                                  Secret(secret) if secret is not None else None)
        built = Notifier(settings, metrics, source="https://npm.example.com/",
                         process="serve", now=lambda: AT, **overrides)
        await built.start()
        made.append(built)
        return built, metrics

    yield make
    for built in made:
        await built.close(within=1.0)


async def test_an_alert_arrives_as_a_signed_cloudevent_with_the_line_a_chat_shows(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    sender, metrics = await notifier()

    sender.post(TAMPERED)
    await until(lambda: count(metrics, "delivered") == 1)  # the answer read, not just sent

    [received] = webhook.delivered()
    event = received.event
    assert received.signature_valid
    assert received.headers["Content-Type"].startswith("application/json")
    assert {key: event[key] for key in ("specversion", "source", "type", "time", "subject",
                                        "datacontenttype")} == {
        "specversion": "1.0", "source": "https://npm.example.com/",
        "type": "dev.mirrorgate.tampered", "time": "2026-11-03T09:30:00.123Z",
        "subject": "left-pad@1.3.0", "datacontenttype": "application/json"}
    assert len(event["id"]) == 36
    assert event["text"].startswith("mirrorgate tampered: the bytes did not match (serve on ")
    assert event["data"]["package"] == "left-pad"
    assert event["data"]["expected"] == "sha512-AAAA"
    assert count(metrics, "delivered") == 1


def test_a_receiver_verifies_the_signature_over_the_exact_bytes() -> None:
    body = b'{"specversion":"1.0"}'
    header = signature(Secret(SECRET), body)

    assert header.startswith("sha256=")
    assert verify(SECRET, body, header)
    assert not verify(SECRET, body + b" ", header)
    assert not verify("another-secret-" + "x" * 30, body, header)
    assert not verify(SECRET, body, None)


async def test_without_a_secret_the_body_goes_unsigned(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    sender, _metrics = await notifier(secret=None)
    sender.post(MALWARE)
    await until(lambda: webhook.delivered())
    assert SIGNATURE_HEADER not in webhook.delivered()[0].headers


async def test_the_same_version_and_kind_within_the_window_is_one_notification(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    clock = ManualClock()
    sender, metrics = await notifier(clock=clock, window=3600.0)

    sender.post(MALWARE)
    sender.post(MALWARE)  # the next packument fill, a retried install
    sender.post(Alert("takeover", "evil@1.0.0", "publisher changed", "evil", "1.0.0"))
    await until(lambda: len(webhook.delivered()) == 2)
    clock.advance(3601)
    sender.post(MALWARE)
    await until(lambda: count(metrics, "delivered") == 3)

    assert [item.event["type"] for item in webhook.delivered()] == [
        "dev.mirrorgate.malware", "dev.mirrorgate.takeover", "dev.mirrorgate.malware"]
    assert count(metrics, "deduplicated") == 1
    assert count(metrics, "delivered") == 3


async def test_a_receiver_answering_500_is_retried_with_backoff_until_it_takes_it(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    sleeps = Sleeps()
    webhook.answer = 500

    def recover(slept: int) -> None:
        if slept == 2:
            webhook.answer = 200

    sleeps.before = recover
    sender, metrics = await notifier(sleep=sleeps)
    sender.post(TAMPERED)
    await until(lambda: count(metrics, "delivered") == 1)

    assert [item.status for item in webhook.received] == [500, 500, 200]
    assert sleeps.delays == [1.0, 2.0]
    assert retries(metrics) == 2
    assert count(metrics, "delivered") == 1
    assert count(metrics, "failed") == 0
    # every attempt carries the same signed body: a receiver may de-duplicate by its id
    assert len({item.body for item in webhook.received}) == 1


async def test_a_receiver_that_is_down_costs_retries_then_one_failure(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    webhook.stop()
    sleeps = Sleeps()
    sender, metrics = await notifier(sleep=sleeps, attempts=3)

    sender.post(TAMPERED)
    await until(lambda: count(metrics, "failed") == 1)

    assert retries(metrics) == 2
    assert sleeps.delays == [1.0, 2.0]
    assert count(metrics, "delivered") == 0


async def test_a_receiver_that_refuses_the_event_is_not_asked_again(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    webhook.answer = 400  # Slack's invalid_payload: the same body would be refused again
    sender, metrics = await notifier(sleep=Sleeps())

    sender.post(TAMPERED)
    await until(lambda: count(metrics, "failed") == 1)

    assert len(webhook.received) == 1
    assert retries(metrics) == 0


async def test_a_retry_after_from_the_receiver_is_honoured_within_a_bound(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    webhook.answer = 429
    webhook.retry_after = "7"
    sleeps = Sleeps()
    sleeps.before = lambda _n: setattr(webhook, "answer", 200)
    sender, _metrics = await notifier(sleep=sleeps)

    sender.post(TAMPERED)
    await until(lambda: webhook.delivered())
    assert sleeps.delays == [7.0]


async def test_a_full_queue_drops_the_newest_and_counts_each_drop(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    sender, metrics = await notifier(capacity=2)

    # posted from one callback, before the sender runs: the queue takes two
    for version in ("1.0.0", "1.0.1", "1.0.2", "1.0.3"):
        sender.post(Alert("malware", f"evil@{version}", "known malware", "evil", version))
    await until(lambda: count(metrics, "delivered") == 2)

    assert [item.event["subject"] for item in webhook.delivered()] == ["evil@1.0.0",
                                                                      "evil@1.0.1"]
    assert count(metrics, "dropped") == 2
    # a dropped alert is not remembered: the next sighting of that version is sent
    sender.post(Alert("malware", "evil@1.0.3", "known malware", "evil", "1.0.3"))
    await until(lambda: len(webhook.delivered()) == 3)


async def test_posting_never_waits_even_while_the_receiver_hangs(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    webhook.hang = True
    sender, _metrics = await notifier(capacity=10)
    loop = asyncio.get_running_loop()

    started = loop.time()
    for version in range(10):
        sender.post(Alert("malware", f"evil@{version}.0.0", "known malware"))
    assert loop.time() - started < 0.05
    await until(lambda: len(webhook.received) == 1)
    webhook.hang = False


async def test_closing_sends_what_is_queued_and_counts_what_it_could_not(
    notifier: Make, webhook: WebhookReceiver,
) -> None:
    webhook.stop()

    async def slowly(_delay: float) -> None:  # long enough that the first is still retrying
        await asyncio.sleep(0.05)

    sender, metrics = await notifier(sleep=slowly, attempts=1000)
    sender.post(TAMPERED)
    sender.post(MALWARE)
    await until(lambda: retries(metrics) >= 1)

    await sender.close(within=0.2)

    assert count(metrics, "dropped") == 2  # the one being retried and the one waiting
    sender.post(Alert("forged-job", "x", "after close"))
    assert count(metrics, "dropped") == 3


def test_a_secret_anywhere_in_an_alert_never_reaches_the_body() -> None:
    register_secret("tok-9f8e7d6c5b4a-private")
    alert = Alert("forged-job", "left-pad@1.3.0",
                  "detail quoting tok-9f8e7d6c5b4a-private", "left-pad", "1.3.0",
                  {"detail": "Bearer tok-9f8e7d6c5b4a-private", "token": "anything"})
    event = envelope(alert, source="s", process="worker", host="h", at=AT, ident="i")

    assert "tok-9f8e7d6c5b4a-private" not in str(event)
    assert event["data"]["token"] == MASK


def test_the_line_cannot_become_a_link_or_a_mention_in_a_chat() -> None:
    alert = Alert("malware", "x@1.0.0", "summary <https://evil.example|click> & <!channel>\n"
                  "second line")
    event = envelope(alert, source="s", process="serve", host="h", at=AT, ident="i")

    assert "<" not in event["text"]
    assert "\n" not in event["text"]
    assert "&lt;https://evil.example|click&gt; &amp; &lt;!channel&gt;" in event["text"]


def test_an_alert_of_a_kind_nobody_documented_cannot_be_made() -> None:
    with pytest.raises(ValueError, match="unknown alert kind"):
        Alert("oops", "x", "y")
