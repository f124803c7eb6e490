"""Security notifications from the running proxy, to a real webhook receiver on 127.0.0.1.

The proxy in process (`start_proxy`) with the notifier `mirrorgate serve` wires to it: its
alerts go through `metrics.events`, as in the real process. The cases: a tampered tarball and a
malware denial each reach the receiver signed, once per version however often they are asked
for; and with the receiver down and then answering 500, every client request is answered as
before, while the notifier's retries and drops are counted. The backoff's sleep is shortened
(a twentieth of each delay) so the outage plays out in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from mirrorgate.config import NotifySettings, Secret, SecretUrl
from mirrorgate.notify import Notifier
from tests.serve.rig import RunningProxy, StartProxy
from tests.serve.test_advisories import loaded
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import until
from tests.servers.webhook import SECRET, WebhookReceiver

EVIL = b"not the admitted bytes"

Attach = Callable[..., Awaitable[Notifier]]


async def cut(proxy: RunningProxy, name: str) -> None:
    """GET a tarball whose bytes do not match: the proxy cuts the transfer before its end."""
    with pytest.raises(aiohttp.ClientPayloadError):
        await proxy.request("GET", "npm" + tarball_path(name, "1.0.0"))


async def quick(delay: float) -> None:
    await asyncio.sleep(delay / 20)


@pytest.fixture
async def attach(webhook: WebhookReceiver) -> AsyncIterator[Attach]:
    """`await attach(proxy, **overrides)`: the proxy's alerts to a started notifier."""
    made: list[Notifier] = []

    async def start(proxy: RunningProxy, **overrides: object) -> Notifier:
        notifier = Notifier(NotifySettings(SecretUrl(webhook.hook_url), Secret(SECRET)),
                            proxy.metrics, source=proxy.url, process="serve",
                            **overrides)  # type: ignore[arg-type]
        await notifier.start()
        proxy.metrics.events.send_alerts_to(notifier.post)
        made.append(notifier)
        return notifier

    yield start
    for notifier in made:
        await notifier.close(within=1.0)


async def test_tampered_bytes_and_a_malware_denial_each_reach_the_receiver_once_signed(
    public_registry: FixtureRegistry, start_proxy: StartProxy, attach: Attach,
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    public_registry.add(make_package("bent-bytes", ["1.0.0"]), make_package("adv-evil",
                                                                             ["1.0.0"]))
    public_registry.fault(tarball_path("bent-bytes", "1.0.0"), Fault(body=EVIL))
    proxy = await start_proxy(public_registry.url, rules=await loaded(tmp_path))
    await attach(proxy)

    for _ in range(3):  # npm's retries, a CI matrix: one notification each all the same
        assert (await proxy.get("npm" + tarball_path("adv-evil", "1.0.0"))).status == 403
        await cut(proxy, "bent-bytes")
    await until(lambda: proxy.metric("mirrorgate_notifications_total",
                                     outcome="delivered") == 2)

    tampered, = webhook.of_type("dev.mirrorgate.tampered")
    malware, = webhook.of_type("dev.mirrorgate.malware")
    assert tampered.signature_valid
    assert malware.signature_valid
    assert tampered.event["subject"] == "bent-bytes@1.0.0"
    assert tampered.event["data"]["where"] == "proxy"
    assert tampered.event["data"]["expected"].startswith("sha512-")
    assert "did not match the sha512 digest" in tampered.event["text"]
    assert malware.event["subject"] == "adv-evil@1.0.0"
    assert malware.event["data"]["rule"] == "advisory-malware"
    assert "MAL-2026-1001" in malware.event["text"]
    assert len(webhook.received) == 2
    # malware: withheld at the fill of the version alone and at the whole packument's fill
    # (which the 403 reads for the versions it names instead), then three tarball requests;
    # tampered: three transfers
    assert proxy.metric("mirrorgate_notifications_total", outcome="deduplicated") == 4 + 2
    assert proxy.metric("mirrorgate_notifications_total", outcome="delivered") == 2


async def test_a_receiver_down_then_answering_500_costs_the_serve_path_nothing(
    public_registry: FixtureRegistry, start_proxy: StartProxy, attach: Attach,
    webhook: WebhookReceiver,
) -> None:
    names = [f"bent-{index}" for index in range(6)]
    public_registry.add(make_package("fine-pkg", ["1.0.0"]),
                        *(make_package(name, ["1.0.0"]) for name in names))
    for name in names:
        public_registry.fault(tarball_path(name, "1.0.0"), Fault(body=EVIL))
    proxy = await start_proxy(public_registry.url)
    await attach(proxy, sleep=quick, capacity=2)
    webhook.stop()

    loop = asyncio.get_running_loop()
    for name in names:  # six alerts while the receiver is down: two wait, the rest drop
        started = loop.time()
        await cut(proxy, name)
        assert loop.time() - started < 2.0
    good = await proxy.get("npm" + tarball_path("fine-pkg", "1.0.0"))
    assert good.status == 200
    assert good.body == public_registry.package("fine-pkg").versions["1.0.0"].tarball
    assert (await proxy.get("npm/fine-pkg")).status == 200
    await until(lambda: proxy.metric("mirrorgate_notification_retries_total") >= 1)
    assert proxy.metric("mirrorgate_notifications_total", outcome="dropped") >= 3

    webhook.answer = 500
    webhook.start()
    await until(lambda: len(webhook.received) >= 1, timeout=10)
    assert (await proxy.get("npm/fine-pkg")).status == 200
    webhook.answer = 200
    await until(lambda: proxy.metric("mirrorgate_notifications_total",
                                     outcome="delivered") >= 1, timeout=10)

    assert proxy.metric("mirrorgate_notification_retries_total") >= 2
    assert all(item.signature_valid for item in webhook.received)
    assert proxy.metric("mirrorgate_tampered_total") == len(names)
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="tampered") \
        == len(names)
