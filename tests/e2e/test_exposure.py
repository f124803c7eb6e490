"""Who pulled it: two CI clients install through the real npm client with their own tokens,
`mirrorgate exposure` names each, and when the public registry withdraws the version one of
them installed, the exposure notification names that client and not the other.

The incident this answers is 2025-26's: a malicious version live for a few hours, found and
taken down afterwards; the security team's first question is which builds installed it. Here
`web-ci` installs `takedown-pkg@1.0.1` and `api-ci` installs `1.0.0` through a real
`mirrorgate serve` (mirrored into real Verdaccio); the public registry (the fixture registry)
then withdraws 1.0.1. No token may appear in the log, the report or the notification.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from mirrorgate.access.tokens import new_token
from tests.access.rig import tokens_file
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import shai_hulud_shape
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, http_request, mirrorgate_argv, wait_for
from tests.servers.verdaccio import Verdaccio
from tests.servers.webhook import SECRET, WebhookReceiver

V100 = make_version("takedown-pkg", "1.0.0")
V101 = make_version("takedown-pkg", "1.0.1")


def exposure(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return exposure_with({"MIRRORGATE_DATA_DIR": str(data)}, *args)


def exposure_with(settings: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           **settings}
    return subprocess.run([*mirrorgate_argv(), "exposure", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


def withdrawn_on(proxy: MirrorgateProcess, token: str) -> bool:
    document = http_request("GET", proxy.registry_url + "takedown-pkg",
                            headers={"Authorization": f"Bearer {token}"}).json()
    return "1.0.1" not in document["versions"]


def install(npm: NpmClient, proxy: MirrorgateProcess, token: str, version: str) -> None:
    npm.authenticate(proxy.registry_url, token)
    npm.write_project({"takedown-pkg": version})
    done = npm.install(registry=proxy.registry_url)
    assert done.returncode == 0, done.stderr


def test_the_exposure_report_and_notification_name_the_clients_that_pulled_the_version(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    web, api, operator = new_token(), new_token(), new_token()
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    data = tmp_path / "data"
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_DATA_DIR": str(data),
        "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens_file(
            tmp_path, **{"web-ci": web, "api-ci": api, "operator": operator})),
        "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET})

    install(NpmClient(tmp_path / "web"), proxy, web, "1.0.1")
    install(NpmClient(tmp_path / "api"), proxy, api, "1.0.0")
    wait_for(lambda: {"1.0.0", "1.0.1"} <= set(verdaccio.versions("takedown-pkg")),
             timeout=60, message="the worker to mirror both versions")
    wait_for(lambda: exposure(data, "takedown-pkg").returncode == 1
             and len(json.loads(exposure(data, "takedown-pkg", "--json").stdout)["clients"])
             == 2, timeout=10, message="both pulls written to the pull log")

    everything = exposure(data, "takedown-pkg", "--json")
    answer = json.loads(everything.stdout)
    assert everything.returncode == 1
    assert [(e["client"], e["version"], e["pulls"]) for e in answer["pulled"]] == [
        ("api-ci", "1.0.0", 1), ("web-ci", "1.0.1", 1)]
    assert answer["pulled"][1]["integrity"] == [V101.integrity]
    one = json.loads(exposure(data, "takedown-pkg@1.0.1", "--json").stdout)
    assert one["clients"] == ["web-ci"]

    public_registry.add(make_package("takedown-pkg", [V100]))  # npm withdraws 1.0.1
    seen = http_request("GET", proxy.registry_url + "takedown-pkg",
                        headers={"Authorization": f"Bearer {operator}"})
    assert seen.status == 200
    wait_for(lambda: webhook.of_type("dev.mirrorgate.exposure"), timeout=15,
             message="the exposure notification at the receiver")
    [notified] = webhook.of_type("dev.mirrorgate.exposure")
    assert notified.signature_valid
    event = notified.event
    assert event["subject"] == "takedown-pkg@1.0.1"
    assert [c["client"] for c in event["data"]["clients"]] == ["web-ci"]
    assert event["data"]["cause"] == "withdrawn"
    assert "web-ci" in event["text"]
    assert "api-ci" not in json.dumps(event)
    [line] = proxy.events("version_exposed")
    assert [c["client"] for c in line["clients"]] == ["web-ci"]
    assert proxy.metric("mirrorgate_exposures_total", cause="withdrawn") == 1

    for token in (web, api, operator):  # the client's name only, never its token
        assert token not in proxy.stderr() + proxy.running.output()
        assert token not in everything.stdout
        assert token not in json.dumps([r.event for r in webhook.delivered()])


def test_two_replicas_on_one_postgresql_give_one_answer_and_warn_once(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
    postgres_server: PostgresServer, webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    web, api = new_token(), new_token()
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    database = postgres_server.new_database_now()
    tokens = tokens_file(tmp_path, **{"web-ci": web, "api-ci": api})
    with FixtureRegistry(make_package("takedown-pkg", [V100.marked(), V101.marked()])) as private:
        replicas = [mirrorgate("serve", {
            "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
            "MIRRORGATE_PRIVATE_UPSTREAM": private.url, "MIRRORGATE_DATABASE_URL": database,
            "MIRRORGATE_DATA_DIR": str(tmp_path / f"data-{n}"), "MIRRORGATE_CACHE_TTL": "1",
            "MIRRORGATE_METRICS_OPEN": "true", "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens),
            "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET})
            for n in range(2)]
        for proxy, token in zip(replicas, (web, api), strict=True):  # one client on each
            pulled = http_request("GET", proxy.registry_url
                                  + "takedown-pkg/-/takedown-pkg-1.0.1.tgz",
                                  headers={"Authorization": f"Bearer {token}"})
            assert pulled.status == 200

        ask = {"MIRRORGATE_DATABASE_URL": database}
        wait_for(lambda: len(json.loads(exposure_with(ask, "takedown-pkg@1.0.1", "--json")
                                        .stdout)["clients"]) == 2, timeout=10,
                 message="both replicas' pulls in the one pull log")
        answer = json.loads(exposure_with(ask, "takedown-pkg@1.0.1", "--json").stdout)
        assert answer["store"] == "postgresql"
        assert [(e["client"], e["sources"]) for e in answer["pulled"]] == [
            ("web-ci", ["mirror"]), ("api-ci", ["mirror"])]  # in the order of first pulls

        public_registry.add(make_package("takedown-pkg", [V100]))  # npm withdraws 1.0.1
        for proxy, token in zip(replicas, (web, api), strict=True):
            wait_for(partial(withdrawn_on, proxy, token), timeout=10,
                     message="each replica to refuse the withdrawn version")
        wait_for(lambda: webhook.of_type("dev.mirrorgate.exposure"), timeout=15,
                 message="the exposure notification")
        time.sleep(2)  # time for a second one, were the fleet to send two
    [notified] = webhook.of_type("dev.mirrorgate.exposure")
    assert [c["client"] for c in notified.event["data"]["clients"]] == ["web-ci", "api-ci"]
    assert sum(len(proxy.events("version_exposed")) for proxy in replicas) == 1


def test_a_deny_entry_added_for_a_version_already_served_warns_once_naming_who_pulled_it(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    rules = tmp_path / "rules.toml"
    rules.write_text("[age]\nminimum = \"0\"\n", encoding="utf-8")
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_RULES_FILE": str(rules),
        "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET})
    npm = NpmClient(tmp_path / "npm")
    npm.write_project({"takedown-pkg": "1.0.1"})
    assert npm.install(registry=proxy.registry_url).returncode == 0

    # the security team learns both versions are bad and denies them; only 1.0.1 was pulled
    rules.write_text("[age]\nminimum = \"0\"\n[deny]\npackages = [\"takedown-pkg@1.0.1\", "
                     "\"takedown-pkg@1.0.0\"]\n", encoding="utf-8")
    wait_for(lambda: proxy.events("rules_reloaded"), timeout=15, message="the new rules")
    for _ in range(2):  # two fills under the new rules: still one warning
        wait_for(lambda: not http_request(  # nothing installable: no versions at all
            "GET", proxy.registry_url + "takedown-pkg").json().get("versions"), timeout=10,
            message="both versions denied")
        time.sleep(1.2)
    wait_for(lambda: webhook.of_type("dev.mirrorgate.exposure"), timeout=15,
             message="the exposure notification")
    time.sleep(1)
    [notified] = webhook.of_type("dev.mirrorgate.exposure")  # not 1.0.0: nobody pulled it
    assert notified.event["subject"] == "takedown-pkg@1.0.1"
    assert notified.event["data"]["cause"] == "deny-list"
    assert [c["client"] for c in notified.event["data"]["clients"]] == ["anonymous"]
    assert "is now denied by the deny-list rule" in notified.event["text"]
    assert len(proxy.events("version_exposed")) == 1
    assert proxy.metric("mirrorgate_exposures_total", cause="deny-list") == 1


def test_a_release_signal_reported_then_enforced_warns_the_clients_that_installed_it(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    webhook: WebhookReceiver, tmp_path: Path,
) -> None:
    """The attack: a team trials the release signals in report mode, and the worm's release
    (a new postinstall running a new 1.5 MB bundle) is served with a would-deny; when the
    team switches to enforcing, the builds that installed it must be told, not only the next
    ones refused."""
    public_registry.add(shai_hulud_shape())
    rules = tmp_path / "rules.toml"
    rules.write_text('[age]\nminimum = "0"\n[release]\nnew_install_script = "report"\n',
                     encoding="utf-8")
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_RULES_FILE": str(rules),
        "MIRRORGATE_DATA_DIR": str(tmp_path / "data"),
        "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET})
    npm = NpmClient(tmp_path / "npm")
    npm.write_project({"worm-host": "^1.4.0"})
    installed = npm.install(registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr
    assert npm.installed()["worm-host"] == "1.4.3"  # report mode: served, and said
    wait_for(lambda: proxy.events("version_would_deny"), timeout=15, message="the would-deny")
    assert not webhook.of_type("dev.mirrorgate.exposure")  # nothing refuses it yet

    rules.write_text('[age]\nminimum = "0"\n[release]\nnew_install_script = "quarantine"\n',
                     encoding="utf-8")
    wait_for(lambda: proxy.events("rules_reloaded"), timeout=15, message="the new rules")
    wait_for(lambda: "1.4.3" not in http_request(
        "GET", proxy.registry_url + "worm-host").json()["versions"], timeout=15,
        message="1.4.3 refused under the enforced signal")
    wait_for(lambda: webhook.of_type("dev.mirrorgate.exposure"), timeout=15,
             message="the exposure notification")
    [notified] = webhook.of_type("dev.mirrorgate.exposure")
    assert notified.event["subject"] == "worm-host@1.4.3"
    assert notified.event["data"]["cause"] == "new-install-script"
    assert [c["client"] for c in notified.event["data"]["clients"]] == ["anonymous"]
    assert "node bundle.js" in notified.event["data"]["reason"]
    [line] = proxy.events("version_exposed")
    assert line["cause"] == "new-install-script"


ONE_LOOP = 100_050
"""The refusals of the finding: more than the 100,000 rows the warning used to read."""


async def refuse_many(database: str, integrity: str) -> None:
    """`ONE_LOOP` refused pulls of takedown-pkg@1.0.1, each by a CI job of its own (a branch
    each: no two fold into one count), written as the proxy writes them: `PullLog.refusal`
    and `flush` through the store's own writer, into the same PostgreSQL, in batches of the
    writer's in-memory bound. About five seconds, where as many HTTP requests would take
    minutes; the proxy's own path for a refusal is asked over HTTP beside them."""
    from mirrorgate.gate.kept.facts import KeptFacts
    from mirrorgate.gate.pulls.log import MAX_REFUSALS, PullLog
    from mirrorgate.store.postgres import open_postgres

    facts = KeptFacts(lambda: open_postgres(database))
    await facts.open()
    try:
        log = PullLog(facts, retention_days=90)
        for n in range(ONE_LOOP):
            log.refusal(f"web-ci (acme/web, branch feature-{n})", "takedown-pkg", "1.0.1",
                        integrity, "minimum-age", f"loop-{n}")
            if log.buffered == MAX_REFUSALS or n == ONE_LOOP - 1:
                held = log.buffered
                assert await log.flush() == held
    finally:
        await facts.close()


def test_a_hundred_thousand_refused_pulls_hide_no_build_that_installed_the_version(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
    postgres_server: PostgresServer, verdaccio: Verdaccio, webhook: WebhookReceiver,
    tmp_path: Path,
) -> None:
    """The attack: refused pulls of a release in its cooldown, 100,050 of them (CI retrying
    on every branch, or a client looping on purpose), then a build installs the release once
    it is admitted, then the public registry withdraws it. The warning read the version's
    oldest 100,000 records, refusals among them, and found no one: no `version_exposed`, and
    nobody in "Who pulled it". Now refusals are counted apart and the warning reads the served
    pulls alone."""
    young = make_version("takedown-pkg", "1.0.1", published=datetime.now(UTC))
    public_registry.add(make_package("takedown-pkg", [V100, young]))
    build, laptop = new_token(), new_token()
    database = postgres_server.new_database_now()
    rules = tmp_path / "rules.toml"
    rules.write_text('[age]\nminimum = "1d"\n', encoding="utf-8")
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_DATABASE_URL": database,
        "MIRRORGATE_DATA_DIR": str(tmp_path / "data"), "MIRRORGATE_CACHE_TTL": "1",
        "MIRRORGATE_METRICS_OPEN": "true", "MIRRORGATE_RULES_FILE": str(rules),
        "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens_file(
            tmp_path, **{"build-ci": build, "laptop": laptop})),
        "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET})
    tarball = proxy.registry_url + "takedown-pkg/-/takedown-pkg-1.0.1.tgz"
    for _ in range(3):  # the proxy's own refusals, in its cooldown
        refused = http_request("GET", tarball, headers={"Authorization": f"Bearer {laptop}"})
        assert refused.status == 403
    asyncio.run(refuse_many(database, young.integrity))

    rules.write_text('[age]\nminimum = "0"\n', encoding="utf-8")  # the cooldown is over
    wait_for(lambda: proxy.events("rules_reloaded"), timeout=15, message="the new rules")
    npm = NpmClient(tmp_path / "build")
    install(npm, proxy, build, "1.0.1")
    assert npm.installed()["takedown-pkg"] == "1.0.1"
    wait_for(lambda: "1.0.1" in verdaccio.versions("takedown-pkg"), timeout=60,
             message="the worker to mirror 1.0.1")

    public_registry.add(make_package("takedown-pkg", [V100]))  # withdrawn
    wait_for(partial(withdrawn_on, proxy, build), timeout=15,
             message="the proxy to see the withdrawal")
    wait_for(lambda: webhook.of_type("dev.mirrorgate.exposure"), timeout=15,
             message="the exposure notification")
    [notified] = webhook.of_type("dev.mirrorgate.exposure")
    assert [c["client"] for c in notified.event["data"]["clients"]] == ["build-ci"]
    [line] = proxy.events("version_exposed")
    assert line["client_count"] == 1

    page = http_request("GET", proxy.url + "ui/package/takedown-pkg",
                        headers={"Authorization": f"Bearer {build}"})
    assert page.status == 200
    assert "build-ci" in page.body.decode().split("Who pulled it")[1]

    answer = json.loads(exposure_with({"MIRRORGATE_DATABASE_URL": database},
                                      "takedown-pkg@1.0.1", "--json").stdout)
    assert answer["clients"] == ["build-ci"]
    refusals = answer["refused"]
    assert sum(e["pulls"] for e in refusals) == ONE_LOOP + 3
    assert len(refusals) == ONE_LOOP + 1  # a row a client: each branch's job, the laptop
