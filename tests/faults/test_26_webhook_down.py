"""Row 26 of the faults table: the notification webhook down, then failing.

> | 26 | the security notification webhook down (connection refused), then answering 500 |
> every client request answered as before; the notifier's retries counted; the notification
> delivered once the webhook takes it; the webhook's URL and secret never logged |

The real `mirrorgate serve`, with advisory rules that deny a malware version and
`MIRRORGATE_NOTIFY_URL` at a real receiver on 127.0.0.1 (`tests.servers.webhook`) that is
stopped when the proxy starts, then brought back answering 500, then 200. Throughout, a
packument, a good tarball and the denied tarball are asked for: each is answered as it would be
without a webhook, since a notification is never on a client's time. The backoff runs at its
real pace (1, 2, 4 s), so the row takes about ten seconds. Drops (a queue of 1,000 filled) are
held by `tests/serve/test_notifications.py`, where the queue can be made small.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_notifications import start
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import http_request, wait_for
from tests.servers.webhook import SECRET, WebhookReceiver


def test_a_webhook_down_then_answering_500_leaves_every_client_answered(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    good = make_package("fine-pkg", ["1.0.0"])
    public_registry.add(good, make_package("adv-evil", ["1.0.0"]))
    webhook.stop()
    proxy = start(guarded, public_registry, webhook, tmp_path)
    guard.watch(proxy, SECRET)
    guard.watch(proxy, webhook.hook_url.split("/", 3)[3])  # the webhook's path: its token
    tarball = proxy.registry_url.rstrip("/") + tarball_path("fine-pkg", "1.0.0")

    def serving_as_before() -> None:
        assert proxy.get("npm/fine-pkg").status == 200
        reply = http_request("GET", tarball, timeout=5)
        assert reply.status == 200
        assert reply.body == good.versions["1.0.0"].tarball
        assert proxy.get("npm/adv-evil/-/adv-evil-1.0.0.tgz", timeout=5).status == 403

    # the malware denial's notification waits while the receiver is down
    serving_as_before()
    wait_for(lambda: proxy.metric("mirrorgate_notification_retries_total") >= 1, timeout=10,
             message="a retry while the receiver is down")
    serving_as_before()

    webhook.answer = 500
    webhook.start()
    wait_for(lambda: len(webhook.received) >= 1, timeout=15, message="an attempt answered 500")
    serving_as_before()
    webhook.answer = 200
    wait_for(lambda: proxy.metric("mirrorgate_notifications_total", outcome="delivered") == 1,
             timeout=20, message="the notification, at last")

    [delivered] = webhook.delivered()
    assert delivered.event["type"] == "dev.mirrorgate.malware"
    assert delivered.signature_valid
    assert proxy.metric("mirrorgate_notification_retries_total") >= 2
    assert proxy.metric("mirrorgate_notifications_total", outcome="delivered") == 1
    # the same version asked for again and again: counted, never sent again
    assert proxy.metric("mirrorgate_notifications_total", outcome="deduplicated") >= 3
    assert [line["event"] for line in proxy.logs()
            if str(line.get("event")).startswith("notification_")][-1] \
        == "notification_delivered"
    guard.scrape(proxy)
