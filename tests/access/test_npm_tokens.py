"""Client tokens with the real npm client, the real `mirrorgate serve` and Verdaccio behind it.

The attack these stop: anyone who can reach the port installing (reading every private package
through mirrorgate's own private token). With a tokens file, npm installs with `_authToken` or
`_auth`, is refused with E401 without a token or with a wrong one, and a rotated Secret takes
effect within 10 seconds without a restart. No token string ever reaches a log line or metric.
"""

from __future__ import annotations

import time
from typing import Any

from mirrorgate.access.tokens import new_token
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import standard_tree
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

ROTATION_LIMIT = 10.0
"""Seconds within which a rotated tokens file must be in force (the issue's bound)."""


def tree_behind(public: FixtureRegistry, verdaccio: Verdaccio) -> dict[str, str]:
    """The standard tree, `zeta` published privately: an install reads both upstreams."""
    tree = standard_tree()
    public.add(*tree.packages)
    verdaccio.publish_package(next(p for p in tree.packages if p.name == "zeta"))
    return tree.resolved


def whoami_status(proxy: MirrorgateProcess, token: str) -> int:
    return http_request("GET", proxy.registry_url + "-/whoami",
                        headers={"Authorization": f"Bearer {token}"}).status


def served_lines(proxy: MirrorgateProcess, count: int) -> list[dict[str, Any]]:
    """The proxy's `tarball_served` lines once there are `count` of them."""
    wait_for(lambda: len(proxy.events("tarball_served")) >= count,
             message=f"{count} tarball_served lines")
    return proxy.events("tarball_served")


def test_npm_installs_with_an_auth_token_and_every_request_s_log_line_names_the_client(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(ci=token)
    resolved = tree_behind(public_registry, verdaccio)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token)
    auth_npmrc(npm_client, proxy.registry_url, token=token)
    npm_client.write_project(standard_tree().dependencies)

    done = npm_client.install(registry=proxy.registry_url)
    guard.seen(done.stdout + done.stderr, "npm's output")

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == resolved
    # npm can exit on the last body's final byte before the proxy writes that request's log
    # line: wait for every line rather than read the log at npm's exit.
    served = served_lines(proxy, len(resolved))
    assert len(served) == len(resolved)
    assert {line["client"] for line in served} == {"ci"}
    assert {line["client"] for line in proxy.events("packument_filled")} == {"ci"}


def test_npm_installs_with_basic_auth_the_token_as_password(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(ci=new_token(), laptop=token)
    resolved = tree_behind(public_registry, verdaccio)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token)
    auth_npmrc(npm_client, proxy.registry_url, basic=token)
    npm_client.write_project(standard_tree().dependencies)

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == resolved
    served = served_lines(proxy, len(resolved))
    assert {line["client"] for line in served} == {"laptop"}


def test_npm_without_a_token_or_with_a_wrong_one_is_refused_with_e401(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir,
) -> None:
    token, wrong = new_token(), new_token()
    secret_dir.clients(ci=token)
    tree_behind(public_registry, verdaccio)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path,
                          token, wrong)
    npm_client.write_project(standard_tree().dependencies)

    anonymous = npm_client.install(registry=proxy.registry_url)
    auth_npmrc(npm_client, proxy.registry_url, token=wrong)
    wrong_token = npm_client.install(registry=proxy.registry_url)
    guard.seen(wrong_token.stdout + wrong_token.stderr, "npm's output")

    for refused in (anonymous, wrong_token):
        assert refused.returncode != 0
        assert "E401" in refused.stderr
        assert npm_client.installed() == {}
    assert public_registry.requests == []
    assert verdaccio.versions("zeta") == ["1.0.0", "1.0.1"]  # read by no one through mirrorgate
    refusals = proxy.events("client_refused")
    assert {line["reason"] for line in refusals} == {"no token", "unknown token"}
    assert proxy.metric("mirrorgate_refusals_total", reason="no_client_token") >= 1
    assert proxy.metric("mirrorgate_refusals_total", reason="bad_client_token") >= 1


def test_a_rotated_tokens_secret_takes_effect_within_ten_seconds_without_a_restart(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir,
) -> None:
    old, new = new_token(), new_token()
    secret_dir.clients(ci=old)
    resolved = tree_behind(public_registry, verdaccio)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, old, new)
    pid = proxy.pid
    assert whoami_status(proxy, old) == 200

    secret_dir.clients(ci=new)
    rotated = time.monotonic()
    wait_for(lambda: whoami_status(proxy, old) == 401, timeout=ROTATION_LIMIT,
             message="the old token to be refused")
    assert time.monotonic() - rotated < ROTATION_LIMIT
    auth_npmrc(npm_client, proxy.registry_url, token=old)
    npm_client.write_project(standard_tree().dependencies)
    with_old = npm_client.install(registry=proxy.registry_url)
    npm_client.userconfig.write_text(npm_client.userconfig.read_text().replace(old, new))
    with_new = npm_client.install(registry=proxy.registry_url)

    assert "E401" in with_old.stderr
    assert with_new.returncode == 0, with_new.stderr
    assert npm_client.installed() == resolved
    assert proxy.pid == pid
    assert proxy.returncode is None
    assert [line["clients"] for line in proxy.events("client_tokens_reloaded")] == [1]


def test_a_bad_rewrite_keeps_the_last_good_tokens_and_says_why(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(ci=token)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token)

    secret_dir.write(secret_dir.path.read_text() + f"intruder sha256:{'ab' * 32} admin\n")
    [failed] = wait_for(lambda: proxy.events("client_tokens_reload_failed"),
                        timeout=ROTATION_LIMIT, message="the bad rewrite to be reported")

    assert "line 3: unknown permission 'admin'" in failed["reason"]
    assert failed["kept"] == 1
    assert whoami_status(proxy, token) == 200
    assert proxy.metric("mirrorgate_client_tokens_reload_failures_total") == 1


def test_npm_whoami_and_ping_answer_in_npm_s_format(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(**{"release-bot": token})
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token)
    anonymous = npm_client.run("ping", "--loglevel=notice", registry=proxy.registry_url)
    auth_npmrc(npm_client, proxy.registry_url, token=token)

    whoami = npm_client.run("whoami", registry=proxy.registry_url)
    ping = npm_client.run("ping", "--loglevel=notice", registry=proxy.registry_url)

    assert whoami.returncode == 0, whoami.stderr
    assert whoami.stdout.strip() == "release-bot"
    assert ping.returncode == 0, ping.stderr
    assert "PONG" in ping.stderr
    assert anonymous.returncode != 0
    assert "E401" in anonymous.stderr


def test_metrics_need_a_token_unless_opened_and_health_stays_open(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(prometheus=token)
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token,
                          MIRRORGATE_METRICS_OPEN="false")

    anonymous = proxy.get("metrics")
    scraped = proxy.get("metrics", headers={"Authorization": f"Bearer {token}"})
    guard.seen(anonymous)
    guard.seen(scraped, "the /metrics text")

    assert anonymous.status == 401
    assert scraped.status == 200
    assert b"mirrorgate_refusals_total" in scraped.body
    assert proxy.get("livez").status == 200
    assert proxy.get("readyz").status == 200


def test_a_tokens_file_that_cannot_be_parsed_refuses_start_up_naming_the_line(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.write(f"# clients\nci {token}\n")  # the token pasted where its digest belongs

    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                              "MIRRORGATE_CLIENT_TOKENS_FILE": str(secret_dir.path)},
                    ready=False)
    guard.watch(proxy, token)

    assert proxy.wait(timeout=30) == 2
    [refused] = proxy.events("startup_refused")
    assert "MIRRORGATE_CLIENT_TOKENS_FILE" in refused["reason"]
    assert "line 2: the second column must be `sha256:`" in refused["reason"]
