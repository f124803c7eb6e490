"""A version the public registry withdraws stops installing through the mirror, and stays
stopped through a public outage and a restart (docs/withdrawals.md).

The attack this stops is September 2025's: malicious versions of widely used packages were
live on the public registry for a few hours, installed and cached by proxies, and kept being
served by them after npm took them down. Here `takedown-pkg@1.0.0` and `1.0.1` are installed
through a real `mirrorgate serve` and mirrored into real Verdaccio; the public registry (the
fixture registry, which can withdraw a version and fail on demand) then withdraws 1.0.1, or
replaces the package with npm's `0.0.1-security` placeholder. The real npm client installs
from a lockfile written before the takedown, as CI does (`npm ci`, retries off).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.processes import MirrorgateProcess, http_request, mirrorgate_argv, wait_for
from tests.servers.verdaccio import Verdaccio

V100 = make_version("takedown-pkg", "1.0.0")
V101 = make_version("takedown-pkg", "1.0.1")
PLACEHOLDER = make_version("takedown-pkg", "0.0.1-security",
                           description="security holding package")
STEADY = make_version("steady-pkg", "2.0.0")
"""A package nobody withdraws: it must keep installing while public is down."""


def start(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
          data: Path) -> MirrorgateProcess:
    return mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        # a takedown reaches clients at the next fill: one second here, a minute by default
        "MIRRORGATE_CACHE_TTL": "1", "MIRRORGATE_DATA_DIR": str(data)})


def mirror_both(npm: NpmClient, proxy: MirrorgateProcess, verdaccio: Verdaccio) -> None:
    """Install 1.0.0 and 1.0.1 (and steady-pkg) through the proxy, wait for the worker to
    mirror them into Verdaccio, and leave a lockfile pinning 1.0.1."""
    npm.write_project({"takedown-pkg": "1.0.0"})
    assert npm.install(registry=proxy.registry_url).returncode == 0
    npm.write_project({"takedown-pkg": "1.0.1", "steady-pkg": "2.0.0"})
    done = npm.install(registry=proxy.registry_url)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: {"1.0.0", "1.0.1"} <= set(verdaccio.versions("takedown-pkg"))
             and "2.0.0" in verdaccio.versions("steady-pkg"), timeout=60,
             message="the worker to mirror both versions into Verdaccio")


def withdrawn_after_mirroring(mirrorgate: MirrorgateFactory, public: FixtureRegistry,
                              verdaccio: Verdaccio, npm: NpmClient,
                              data: Path) -> MirrorgateProcess:
    """Both versions installed and mirrored, then 1.0.1 withdrawn and seen by the proxy."""
    public.add(make_package("takedown-pkg", [V100, V101]), make_package("steady-pkg", [STEADY]))
    proxy = start(mirrorgate, public, verdaccio, data)
    mirror_both(npm, proxy, verdaccio)
    public.add(make_package("takedown-pkg", [V100]))
    wait_for(lambda: withdrawn_seen(proxy, "1.0.1") is not None, timeout=10,
             message="the withdrawal to be seen")
    return proxy


def ci(npm: NpmClient, proxy: MirrorgateProcess) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    return npm.ci(registry=proxy.registry_url)


def served(proxy: MirrorgateProcess, name: str) -> dict[str, Any]:
    document: dict[str, Any] = http_request("GET", proxy.registry_url + name).json()
    return document


def withdrawn_seen(proxy: MirrorgateProcess, version: str) -> str | None:
    denial = served(proxy, "takedown-pkg").get("policyRestrictions", {}).get(
        "denials", {}).get(version, {})
    return denial.get("since") if denial.get("rule") == "public-withdrawn" else None


def command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*mirrorgate_argv(), *args], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **env})


def test_a_withdrawn_version_stops_installing_and_stays_stopped_through_an_outage_and_a_restart(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(make_package("takedown-pkg", [V100, V101]),
                        make_package("steady-pkg", [STEADY]))
    data = tmp_path / "data"
    proxy = start(mirrorgate, public_registry, verdaccio, data)
    mirror_both(npm_client, proxy, verdaccio)

    public_registry.add(make_package("takedown-pkg", [V100]))  # npm withdraws 1.0.1
    wait_for(lambda: withdrawn_seen(proxy, "1.0.1") is not None, timeout=10,
             message="the proxy to see the withdrawal at its next fill")

    document = served(proxy, "takedown-pkg")
    assert sorted(document["versions"]) == ["1.0.0"]
    assert document["dist-tags"]["latest"] == "1.0.0"
    seen = withdrawn_seen(proxy, "1.0.1")
    tarball = http_request("GET", proxy.registry_url + "takedown-pkg/-/takedown-pkg-1.0.1.tgz")
    assert tarball.status == 403
    assert "public-withdrawn" in tarball.body.decode()
    assert f"first seen {seen}" in tarball.body.decode()
    locked = ci(npm_client, proxy)
    assert locked.returncode != 0
    assert "E403" in locked.stderr
    assert "public-withdrawn" in locked.stderr
    [event] = proxy.events("public_withdrawn")
    assert (event["package"], event["version"], event["security"]) == (
        "takedown-pkg", "1.0.1", True)
    assert proxy.metric("mirrorgate_rule_denials_total", rule="public-withdrawn") >= 1

    # the public registry goes down right after the takedown, and the proxy restarts
    public_registry.fault("/", Fault(status=503))
    proxy.terminate()
    again = start(mirrorgate, public_registry, verdaccio, data)
    assert withdrawn_seen(again, "1.0.1") == seen
    still = ci(npm_client, again)
    assert still.returncode != 0
    assert "public-withdrawn" in still.stderr
    # silence is not a withdrawal: what nobody withdrew installs from the mirror
    npm_client.write_project({"takedown-pkg": "1.0.0", "steady-pkg": "2.0.0"})
    offline = npm_client.install(registry=again.registry_url)
    assert offline.returncode == 0, offline.stderr
    assert npm_client.installed() == {"takedown-pkg": "1.0.0", "steady-pkg": "2.0.0"}


def test_npms_placeholder_withdraws_every_mirrored_version(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(make_package("takedown-pkg", [V100, V101]),
                        make_package("steady-pkg", [STEADY]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path / "data")
    mirror_both(npm_client, proxy, verdaccio)

    public_registry.add(make_package("takedown-pkg", [PLACEHOLDER],
                                     dist_tags={"latest": "0.0.1-security"}))
    wait_for(lambda: withdrawn_seen(proxy, "1.0.0") is not None, timeout=10,
             message="the proxy to see the placeholder")

    assert withdrawn_seen(proxy, "1.0.1") is not None
    assert ci(npm_client, proxy).returncode != 0  # the lockfile pins 1.0.1
    pinned = npm_client.install("takedown-pkg@1.0.0", registry=proxy.registry_url)
    assert pinned.returncode != 0
    assert "1.0.0" not in served(proxy, "takedown-pkg")["versions"]


def test_a_version_listed_again_with_the_same_bytes_installs_again(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    proxy = withdrawn_after_mirroring(mirrorgate, public_registry, verdaccio, npm_client,
                                      tmp_path / "data")

    # a takedown by mistake, undone: the registry lists the very bytes the mirror holds
    public_registry.add(make_package("takedown-pkg", [V100, V101]))
    wait_for(lambda: "1.0.1" in served(proxy, "takedown-pkg")["versions"], timeout=10,
             message="the relisted version to be served again")

    assert ci(npm_client, proxy).returncode == 0


def test_a_first_party_version_is_untouched_by_a_public_package_of_the_same_name(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    verdaccio.publish(make_version("acme-widget", "1.0.0", description="ours"))
    # the public registry holds the name too, with none of the organisation's versions
    public_registry.add(make_package("acme-widget", [make_version("acme-widget", "2.0.0")]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path / "data")
    npm_client.write_project({"acme-widget": "1.0.0"})

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {"acme-widget": "1.0.0"}
    assert proxy.events("public_withdrawn") == []


def test_check_audit_and_the_status_page_name_the_withdrawal(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    proxy = withdrawn_after_mirroring(mirrorgate, public_registry, verdaccio, npm_client,
                                      tmp_path / "data")
    seen = withdrawn_seen(proxy, "1.0.1")
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
           "MIRRORGATE_DATA_DIR": str(tmp_path / "commands")}
    lockfile = str(npm_client.project / "package-lock.json")

    checked = command("check", "--json", lockfile, env=env)
    audited = command("audit", "--json", "--names", "takedown-pkg", env=env)
    page = http_request("GET", proxy.url + "ui/package/takedown-pkg").body.decode()

    assert checked.returncode == 1, checked.stdout + checked.stderr
    [finding] = [r for r in json.loads(checked.stdout)["results"] if r["package"] ==
                 "takedown-pkg"]
    assert (finding["status"], finding["rule"]) == ("denied", "public-withdrawn")
    assert audited.returncode == 1, audited.stdout + audited.stderr
    found = {(r["version"], r["status"]) for r in json.loads(audited.stdout)["results"]}
    assert found == {("1.0.0", "ok"), ("1.0.1", "withdrawn")}
    assert f"withdrawn (seen {seen})" in page


def test_a_whole_package_404_from_public_withdraws_nothing(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # a 404 for every name is what a mistyped MIRRORGATE_PUBLIC_UPSTREAM answers: read as a
    # takedown it would withdraw the whole mirror at once (docs/withdrawals.md, Decisions)
    public_registry.add(make_package("takedown-pkg", [V100, V101]),
                        make_package("steady-pkg", [STEADY]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path / "data")
    mirror_both(npm_client, proxy, verdaccio)

    public_registry.remove("takedown-pkg")
    public_registry.remove("steady-pkg")
    public_registry.clear_requests()

    def filled_after_the_404() -> bool:
        served(proxy, "takedown-pkg")
        return any(seen.path == "/takedown-pkg" for seen in public_registry.requests)

    wait_for(filled_after_the_404, timeout=10, message="a fill that asked public after the 404")
    assert http_request("GET", public_registry.url + "takedown-pkg").status == 404
    assert sorted(served(proxy, "takedown-pkg")["versions"]) == ["1.0.0", "1.0.1"]
    done = ci(npm_client, proxy)
    assert done.returncode == 0, done.stderr
    assert proxy.events("public_withdrawn") == []


def test_a_200_that_is_not_the_packument_withdraws_nothing_through_it_and_the_outage_after(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # A rate limiter or a broken CDN answers 200 with JSON that is no packument of the name:
    # read as public's word, it lists none of the mirrored versions and would withdraw them
    # all, durably, and keep them refused through the outage that follows
    public_registry.add(make_package("takedown-pkg", [V100, V101]),
                        make_package("steady-pkg", [STEADY]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path / "data")
    mirror_both(npm_client, proxy, verdaccio)
    other = json.dumps(public_registry.packument("steady-pkg")).encode()

    for answered, body in enumerate((b'{"error": "rate limited"}', b"{}", other), 1):
        public_registry.clear_faults()
        public_registry.fault("/takedown-pkg", Fault(body=body), exact=True)
        # a request past the 1 s TTL fills again, from this answer
        document = wait_for(functools.partial(_served_after, proxy, answered), timeout=10)
        assert document is not None
        assert sorted(document["versions"]) == ["1.0.0", "1.0.1"], body
        assert ci(npm_client, proxy).returncode == 0, body
    public_registry.clear_faults()
    public_registry.fault("/", Fault(status=503))  # and then public goes down
    during = ci(npm_client, proxy)

    assert during.returncode == 0, during.stderr
    assert sorted(served(proxy, "takedown-pkg")["versions"]) == ["1.0.0", "1.0.1"]
    assert proxy.events("public_withdrawn") == []
    reasons = {line["reason"] for line in proxy.events("upstream_not_a_packument")}
    assert any("no versions object" in reason for reason in reasons)
    assert any("'steady-pkg'" in reason for reason in reasons)
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason="not-packument") >= 3


def _served_after(proxy: MirrorgateProcess, answers: int) -> dict[str, Any] | None:
    """takedown-pkg's packument as served, once the proxy has read `answers` answers that
    were not packuments (each request past the TTL fills again)."""
    document = served(proxy, "takedown-pkg")
    return document if len(proxy.events("upstream_not_a_packument")) >= answers else None
