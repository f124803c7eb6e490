"""The license rule through the real npm client and a real `mirrorgate serve`: tarballs of
real licenses (`tests.servers.licensed`) admitted or refused as the rules file says, each
refusal printed by npm with the license, the rule and the way through
(docs/licenses.md). The other four clients print what they print for any refusal: the
client matrix (tests/e2e/test_package_managers.py) holds them to it for the license rule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mirrorgate.access.tokens import new_token, token_line
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.licensed import licensed_packages
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage
from tests.servers.processes import MirrorgateProcess, wait_for

RULES = """\
[license]
allow = ["MIT", "ISC", "Apache-2.0", "BSD-3-Clause", "GPL-2.0-only WITH Classpath-exception-2.0"]
deny = ["GPL-*", "AGPL-*"]
"""
ADMITTED = {"content-type": "1.0.5", "inherits": "2.0.1", "samsam": "1.3.0",
            "querystring-es3": "0.2.1", "lic-apache": "1.0.0", "lic-dual": "1.0.0",
            "lic-classpath": "1.0.0"}
# what npm prints (E403, the packument's message) for each refused one, beside its rule
REFUSED = {
    "lic-gpl": ("license", 'GPL-3.0-only matches the license deny list entry "GPL-*"'),
    "lic-both": ("license", "declares the license MIT AND GPL-3.0-only"),
    "lic-unlicensed": ("license-unknown", "declares UNLICENSED"),
    "lic-see": ("license-unknown", 'declares "SEE LICENSE IN LICENSE.md"'),
    "ms": ("license-unknown", "declares no license"),
}


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FixturePackage]:
    return licensed_packages(tmp_path_factory.mktemp("licensed"))


@pytest.fixture
def proxy(packages: dict[str, FixturePackage], public_registry: FixtureRegistry,
          mirrorgate: MirrorgateFactory, tmp_path: Path) -> MirrorgateProcess:
    public_registry.add(*packages.values())
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    return mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                "MIRRORGATE_RULES_FILE": str(rules),
                                "MIRRORGATE_OPERATOR_CONTACT": "legal@example.com",
                                "MIRRORGATE_DATA_DIR": str(tmp_path / "data")})


def install(npm: NpmClient, proxy: MirrorgateProcess,
            dependencies: dict[str, str]) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    npm.write_project(dependencies)
    return npm.install(registry=proxy.registry_url)


def test_the_licenses_the_rules_admit_install_and_are_mirrored(
        proxy: MirrorgateProcess, npm_client: NpmClient) -> None:
    # MIT, ISC, BSD-3-Clause and Apache-2.0 as allowed; a legacy `licenses: [MIT]` read as npm
    # reads it; `MIT OR GPL-3.0-only` because MIT is allowed; GPL with the Classpath exception
    # because the allow entry naming the exception outranks the plain `GPL-*` deny entry
    done = install(npm_client, proxy, ADMITTED)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == ADMITTED
    wait_for(lambda: len(proxy.events("job_enqueued")) >= len(ADMITTED),
             message="a mirror job for every admitted version")
    assert {event["package"] for event in proxy.events("job_enqueued")} == set(ADMITTED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_license_stops_npm_with_the_license_the_rule_and_the_way_through(
        name: str, proxy: MirrorgateProcess, npm_client: NpmClient) -> None:
    rule, said = REFUSED[name]
    version = "0.7.1" if name == "ms" else "1.0.0"

    done = install(npm_client, proxy, {name: version})

    assert done.returncode != 0
    assert "E403" in done.stderr, done.stderr
    printed = done.stderr.replace("npm error 403 ", "")
    assert f"- {version} ({rule}): {name}@{version} declares" in printed, printed
    assert said in printed
    assert "no version is admitted" in printed
    assert f"for an exception ask legal@example.com: mirrorgate allow {name}@VERSION" \
        in done.stderr
    assert proxy.events("job_enqueued") == []


def test_a_tarball_declaring_another_license_than_its_manifest_is_refused_with_both_named(
        proxy: MirrorgateProcess, npm_client: NpmClient) -> None:
    # the attack: the registry manifest says MIT, so the packument admits the version; the
    # package.json inside the tarball, which is what npm installs, says GPL-3.0-only
    done = install(npm_client, proxy, {"lic-confused": "1.0.0"})

    assert done.returncode != 0
    assert "E403" in done.stderr, done.stderr
    printed = " ".join(done.stderr.replace("npm error", " ").split())
    assert ("mirrorgate denied lic-confused@1.0.0 by its license rule: the registry's manifest "
            "declares MIT, but the package.json in its tarball, which npm installs, declares "
            'GPL-3.0-only, where GPL-3.0-only matches the license deny list entry "GPL-*"'
            ) in printed
    [refused] = proxy.events("tarball_license_refused")
    assert (refused["package"], refused["rule"]) == ("lic-confused", "license")
    assert proxy.events("job_enqueued") == []
    # remembered: the next pull is the same 403 before any byte is read
    again = install(npm_client, proxy, {"lic-confused": "1.0.0"})
    assert "declares GPL-3.0-only" in " ".join(again.stderr.split())
    assert len(proxy.events("tarball_license_refused")) == 1


def test_the_control_a_tarball_agreeing_with_its_manifest_is_served(
        proxy: MirrorgateProcess, npm_client: NpmClient) -> None:
    # the same reading of the bytes, the same MIT on both sides: installed, nothing refused
    done = install(npm_client, proxy, {"content-type": "1.0.5"})

    assert done.returncode == 0, done.stderr
    assert proxy.events("tarball_license_refused") == []


LEGAL = '[policy.legal.license]\ndeny = ["GPL-*", "AGPL-*"]\n'
"""The legal team's policy set: no copyleft; the default rules, every other client's, have no
license rule at all."""


def test_a_teams_policy_set_refuses_by_its_own_license_rule_what_the_default_admits(
        packages: dict[str, FixturePackage], public_registry: FixtureRegistry,
        mirrorgate: MirrorgateFactory, tmp_path: Path) -> None:
    public_registry.add(*packages.values())
    rules = tmp_path / "rules.toml"
    rules.write_text(LEGAL, encoding="utf-8")
    legal_token, web_token = new_token(), new_token()
    tokens = tmp_path / "client-tokens"
    tokens.write_text(f"{token_line('legal-ci', legal_token)} policy:legal\n"
                      f"{token_line('web-ci', web_token)}\n", encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_RULES_FILE": str(rules),
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens),
                                 "MIRRORGATE_DATA_DIR": str(tmp_path / "data")})
    web, legal = (NpmClient(tmp_path / name) for name in ("web", "legal"))
    web.authenticate(proxy.registry_url, web_token)
    legal.authenticate(proxy.registry_url, legal_token)

    # the web job first: both served under the default rules, and mirrored
    served = install(web, proxy, {"lic-gpl": "1.0.0", "lic-confused": "1.0.0"})
    # the attacks: a GPL version by its manifest; a tarball saying GPL under an MIT manifest,
    # which the default rules served and mirrored unread (the mirror's copy is read for legal)
    refused = install(legal, proxy, {"lic-gpl": "1.0.0"})
    confused = install(legal, proxy, {"lic-confused": "1.0.0"})
    admitted = install(legal, proxy, {"content-type": "1.0.5"})  # the control: MIT

    assert served.returncode == 0, served.stderr
    assert web.installed() == {"lic-gpl": "1.0.0", "lic-confused": "1.0.0"}
    assert refused.returncode != 0
    printed = refused.stderr.replace("npm error 403 ", "")
    assert ('- 1.0.0 (license): lic-gpl@1.0.0 declares the license GPL-3.0-only: GPL-3.0-only '
            'matches the license deny list entry "GPL-*"') in printed, printed
    assert confused.returncode != 0
    said = " ".join(confused.stderr.replace("npm error", " ").split())
    assert ("mirrorgate denied lic-confused@1.0.0 by its license rule: the registry's manifest "
            "declares MIT, but the package.json in its tarball, which npm installs, declares "
            "GPL-3.0-only") in said, said
    assert admitted.returncode == 0, admitted.stderr
    assert legal.installed() == {"content-type": "1.0.5"}
