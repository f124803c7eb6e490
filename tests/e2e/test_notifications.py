"""Security notifications from the real `mirrorgate serve`, to a real webhook receiver.

With `MIRRORGATE_NOTIFY_URL` and `MIRRORGATE_NOTIFY_SECRET` set, a public tarball whose bytes do
not match (the real npm client fails, the proxy cuts the transfer) and a version denied as
malware by the advisory rules each reach the receiver as a CloudEvent whose signature the
receiver verifies, within seconds; `check-config` shows the webhook by its host alone and the
secret redacted. The receiver down, then answering 500, is row 26 of the faults table
(`tests/faults/test_26_webhook_down.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.advisories.records import fixture_records, write_zip
from tests.e2e.test_advisories_command import rules_file
from tests.faults.guarded import GuardedFactory
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, mirrorgate_argv, wait_for
from tests.servers.webhook import SECRET, WebhookReceiver

EVIL = b"not the admitted bytes"


def notify_environment(webhook: WebhookReceiver) -> dict[str, str]:
    return {"MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET}


def start(mirrorgate: MirrorgateFactory | GuardedFactory, public: FixtureRegistry,
          webhook: WebhookReceiver, tmp_path: Path) -> MirrorgateProcess:
    export = write_zip(tmp_path / "osv-npm.zip", fixture_records())
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                                 "MIRRORGATE_RULES_FILE": str(rules_file(tmp_path, export)),
                                 **notify_environment(webhook)})
    wait_for(lambda: proxy.events("advisories_loaded"), message="the advisory data")
    return proxy


def tampered_package(public: FixtureRegistry, name: str) -> None:
    public.add(make_package(name, ["1.0.0"]))
    public.fault(tarball_path(name, "1.0.0"), Fault(body=EVIL))


def test_tampered_bytes_and_a_malware_denial_reach_the_receiver_signed(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, webhook: WebhookReceiver,
    npm_client: NpmClient, tmp_path: Path,
) -> None:
    tampered_package(public_registry, "bent-bytes")
    public_registry.add(make_package("adv-evil", ["1.0.0"]))
    proxy = start(mirrorgate, public_registry, webhook, tmp_path)
    npm_client.write_project({"bent-bytes": "1.0.0"})

    failed = npm_client.install(registry=proxy.registry_url)
    denied = proxy.get("npm/adv-evil/-/adv-evil-1.0.0.tgz")

    assert failed.returncode != 0
    assert denied.status == 403
    wait_for(lambda: proxy.metric("mirrorgate_notifications_total", outcome="delivered") == 2,
             timeout=10, message="both notifications at the receiver")
    [tampered] = webhook.of_type("dev.mirrorgate.tampered")
    [malware] = webhook.of_type("dev.mirrorgate.malware")
    for received in (tampered, malware):
        assert received.signature_valid, received.headers
        assert received.event["specversion"] == "1.0"
        assert received.event["data"]["process"] == "serve"
    assert tampered.event["subject"] == "bent-bytes@1.0.0"
    assert tampered.event["text"].startswith("mirrorgate tampered: the public upstream's "
                                             "tarball for bent-bytes@1.0.0 did not match")
    assert malware.event["subject"] == "adv-evil@1.0.0"
    assert "MAL-2026-1001" in malware.event["text"]
    assert proxy.metric("mirrorgate_notifications_total", outcome="delivered") == 2
    assert proxy.metric("mirrorgate_notifications_total", outcome="failed") == 0
    [started] = proxy.events("started")
    assert started["notify"] == webhook.url + "**redacted**"
    # the webhook's URL carries its token in the path: never in a log line
    assert "/hook/T0/B0/" not in proxy.stderr()
    assert SECRET not in proxy.stderr()


def test_check_config_shows_the_webhook_by_its_host_and_redacts_the_secret(
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    # the same sources as the test run (PYTHONPATH), nothing else from this environment
    same_code = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    done = subprocess.run([*mirrorgate_argv(), "check-config", "--json"], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", **same_code,
                               "MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
                               "MIRRORGATE_DATA_DIR": str(tmp_path / "data"),
                               "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                               "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k3y-never-shown",
                               **notify_environment(webhook)})

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["settings"]["notify.url"] == webhook.url + "**redacted**"
    assert report["settings"]["notify.secret"] == "**redacted**"
    assert report["tracing"]["on"] is True
    assert report["tracing"]["endpoint"] == "http://127.0.0.1:4318"
    assert report["tracing"]["headers"] == ["x-api-key"]
    for secret in (SECRET, "k3y-never-shown", "/hook/T0/B0/"):
        assert secret not in done.stdout + done.stderr
    assert "is set but mirrorgate does not read it" not in done.stderr
