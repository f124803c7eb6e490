"""A gate operated over time, as its operator and its users see it: the default cooldown, a rule
in report mode, an exception that ends by itself, rules changed without a restart.

Real `mirrorgate serve` processes over the fixture public registry and Verdaccio, the real npm
client. Young versions are published relative to now (`fresh_version`), never waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import fresh_version, make_package, make_version
from tests.servers.processes import MirrorgateProcess, http_request, mirrorgate_argv, wait_for
from tests.servers.verdaccio import Verdaccio

RELOAD_WITHIN = 2.0


def start(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
          rules: Path | None = None) -> MirrorgateProcess:
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true"}
    if rules is not None:
        env["MIRRORGATE_RULES_FILE"] = str(rules)
    return mirrorgate("serve", env)


def installs(npm: NpmClient, proxy: MirrorgateProcess,
             spec: str) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    return npm.install(spec, registry=proxy.registry_url)


def served(proxy: MirrorgateProcess, name: str) -> list[str]:
    return sorted(http_request("GET", proxy.registry_url + name).json()["versions"])


def test_a_version_published_20_minutes_ago_is_held_back_on_the_defaults(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the compromised releases of 2025-26 were found and pulled within hours: a day holds them
    public_registry.add(make_package("fresh-pkg", [
        make_version("fresh-pkg", "1.0.0"),
        fresh_version("fresh-pkg", "1.0.1", age=timedelta(minutes=20))]))
    proxy = start(mirrorgate, public_registry, verdaccio)

    latest = installs(npm_client, proxy, "fresh-pkg")
    young = installs(npm_client, proxy, "fresh-pkg@1.0.1")

    assert latest.returncode == 0, latest.stderr
    assert npm_client.installed()["fresh-pkg"] == "1.0.0"
    assert young.returncode != 0
    assert "E403" in young.stderr
    assert "mirrorgate's default cooldown" in young.stderr

    rules = tmp_path / "rules.toml"
    rules.write_text('[age]\nminimum = "0"\n', encoding="utf-8")
    off = start(mirrorgate, public_registry, verdaccio, rules)
    allowed = installs(npm_client, off, "fresh-pkg@1.0.1")
    assert allowed.returncode == 0, allowed.stderr


def test_a_deny_rule_in_report_mode_is_served_and_reported_everywhere(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(make_package("reported-pkg", ["1.0.0", "1.0.1"]))
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\nmode = "report"\npackages = ["reported-pkg@1.0.1"]\n',
                     encoding="utf-8")
    proxy = start(mirrorgate, public_registry, verdaccio, rules)
    npm_client.write_project({"reported-pkg": "1.0.1"})

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {"reported-pkg": "1.0.1"}
    [line] = [e for e in proxy.events("version_would_deny") if e["version"] == "1.0.1"]
    assert line["rule"] == "deny-list"
    assert "matches the deny list entry" in line["reason"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="deny-list", mode="report") == 1
    assert proxy.metric("mirrorgate_rule_denials_total", mode="enforce") == 0
    page = http_request("GET", proxy.url + "ui/package/reported-pkg").body.decode()
    assert "would deny (deny-list)" in page
    checked = subprocess.run(
        [*mirrorgate_argv(), "check", "--json", str(npm_client.project / "package-lock.json")],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
             "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
             "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_RULES_FILE": str(rules),
             "MIRRORGATE_DATA_DIR": str(tmp_path / "check")})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [result] = json.loads(checked.stdout)["results"]
    assert result["status"] == "would-deny"


def test_a_rules_file_emptied_by_a_redirect_keeps_the_deny_list_in_force(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    public_registry.add(make_package("emptied-pkg", ["1.0.0", "1.0.1"]))
    rules = tmp_path / "rules.toml"
    rules.write_text('# the platform team\'s rules\n\n[deny]\n'
                     'packages = ["emptied-pkg@1.0.1"]\n', encoding="utf-8")
    proxy = start(mirrorgate, public_registry, verdaccio, rules)
    assert served(proxy, "emptied-pkg") == ["1.0.0"]

    rules.write_text("", encoding="utf-8")  # `> rules.toml`: valid TOML, the defaults
    wait_for(lambda: proxy.events("rules_reload_failed"), timeout=RELOAD_WITHIN + 1)

    assert served(proxy, "emptied-pkg") == ["1.0.0"]  # still denied: the last good rules
    [failed] = proxy.events("rules_reload_failed")
    assert "sets nothing" in failed["problems"][0]
    assert proxy.metric("mirrorgate_rules_reload_failures_total") == 1
    page = http_request("GET", proxy.url + "ui/").body.decode()
    assert "cannot be used" in page
    assert "sets nothing" in page
    assert not proxy.events("rules_reloaded")


def test_an_exception_admits_a_denied_version_until_it_ends_without_a_restart(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(make_package("excepted-pkg", ["1.0.0", "1.0.1"]))
    ends = datetime.now(UTC) + timedelta(seconds=8)
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\npackages = ["excepted-pkg@1.0.1"]\n\n'
                     '[[exception]]\npackage = "excepted-pkg@1.0.1"\n'
                     f'until = {ends.strftime("%Y-%m-%dT%H:%M:%SZ")}\n'
                     'reason = "the vendor ships the fix on Friday"\nby = "alice"\n',
                     encoding="utf-8")
    proxy = start(mirrorgate, public_registry, verdaccio, rules)

    while_on = installs(npm_client, proxy, "excepted-pkg@1.0.1")
    page = http_request("GET", proxy.url + "ui/").body.decode()
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.5)
    after = installs(npm_client, proxy, "excepted-pkg@1.0.1")

    assert while_on.returncode == 0, while_on.stderr
    assert "the vendor ships the fix on Friday" in page
    assert 'data-key="exception-left"' in page
    assert after.returncode != 0  # the cache's 60 s TTL was not waited for
    assert "E403" in after.stderr
    assert "deny-list" in after.stderr


def configmap(root: Path, text: str, version: int) -> None:
    """Write `text` as Kubernetes mounts a ConfigMap: `rules.toml -> ..data/rules.toml`,
    `..data -> ..<version>`, the new version swapped in with one rename."""
    folder = root / f"..v{version}"
    folder.mkdir(parents=True)
    (folder / "rules.toml").write_text(text, encoding="utf-8")
    staged = root / "..data_tmp"
    staged.symlink_to(folder.name)
    os.replace(staged, root / "..data")
    if not (root / "rules.toml").is_symlink():
        (root / "rules.toml").symlink_to("..data/rules.toml")


def test_a_rules_file_changed_in_place_or_swapped_takes_effect_without_a_restart(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    public_registry.add(make_package("reload-pkg", ["1.0.0", "1.0.1"]))
    mounted = tmp_path / "config"
    configmap(mounted, "", 1)
    proxy = start(mirrorgate, public_registry, verdaccio, mounted / "rules.toml")
    assert served(proxy, "reload-pkg") == ["1.0.0", "1.0.1"]

    configmap(mounted, '[deny]\npackages = ["reload-pkg@1.0.1"]\n', 2)  # the ConfigMap swap
    started = time.monotonic()
    wait_for(lambda: served(proxy, "reload-pkg") == ["1.0.0"], timeout=RELOAD_WITHIN + 1)
    swapped_in = time.monotonic() - started
    # an edit in place; an empty file would be kept out as a truncated write (`rules.live`)
    (mounted / "..v2" / "rules.toml").write_text("[deny]\npackages = []\n", encoding="utf-8")
    wait_for(lambda: served(proxy, "reload-pkg") == ["1.0.0", "1.0.1"],
             timeout=RELOAD_WITHIN + 1)

    assert swapped_in < RELOAD_WITHIN + 0.5
    reloads = proxy.events("rules_reloaded")
    assert len(reloads) == 2
    assert all(len(line["digest"]) == 64 for line in reloads)


def test_a_rewrite_that_does_not_parse_keeps_the_last_good_rules(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    public_registry.add(make_package("broken-pkg", ["1.0.0", "1.0.1"]))
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\npackages = ["broken-pkg@1.0.1"]\n', encoding="utf-8")
    proxy = start(mirrorgate, public_registry, verdaccio, rules)
    assert served(proxy, "broken-pkg") == ["1.0.0"]

    rules.write_text('[deny]\npackages = ["broken-pkg@1.0.1"\n', encoding="utf-8")  # no ]
    wait_for(lambda: proxy.events("rules_reload_failed"), timeout=RELOAD_WITHIN + 1)

    assert served(proxy, "broken-pkg") == ["1.0.0"]  # still denied: the last good rules
    assert proxy.metric("mirrorgate_rules_reload_failures_total") == 1
    assert "cannot be used" in http_request("GET", proxy.url + "ui/").body.decode()
    rules.write_text("[deny]\npackages = []\n", encoding="utf-8")
    wait_for(lambda: served(proxy, "broken-pkg") == ["1.0.0", "1.0.1"],
             timeout=RELOAD_WITHIN + 1)
    assert "cannot be used" not in http_request("GET", proxy.url + "ui/").body.decode()


