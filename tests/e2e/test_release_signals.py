"""The three compromises of 2025-26 that changed what was inside the tarball, each refused by
the release signal meant for it, through the real npm client, a real `mirrorgate serve` and
real Verdaccio as the private registry (docs/serving.md#release-signals).

The fixture registry plays the public registry with the incident shapes of
`tests.servers.incidents` (no malware: every payload prints a line, and npm runs no scripts
here). A project asks for a range, as package.json files do; the patch release is read against
the one before it at its first pull, its bytes withheld until the verdict. The first install
stops with E403 naming the signal and its evidence, the version leaves the packument
(quarantined), and the next install resolves the same range to the version before it, which
is the only one the worker mirrors.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import (
    AXIOS_DEPENDENCY,
    axios_shape,
    chalk_shape,
    follow_redirects,
    shai_hulud_shape,
)
from tests.servers.npm import NpmClient
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

RULES = '[age]\nminimum = "0"\n\n[release]\n'
"""Every signal at its default action (`quarantine`); the incident versions are minutes old,
so the default cooldown is turned off to let the signals, not the age rule, refuse them."""


def start(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
          tmp_path: Path) -> MirrorgateProcess:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    return mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_RULES_FILE": str(rules), "MIRRORGATE_DATA_DIR": str(tmp_path / "data")})


def install(npm: NpmClient, proxy: MirrorgateProcess,
            dependencies: dict[str, str]) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    npm.write_project(dependencies)
    return npm.install(registry=proxy.registry_url)


def quarantined(npm: NpmClient, proxy: MirrorgateProcess, verdaccio: Verdaccio, name: str,
                wanted: str, refused: str, before: str, rule: str,
                printed: tuple[str, ...] = ()) -> str:
    """Install `name@wanted` twice: the first stops with E403 naming `rule` (or one of
    `printed`: npm prints the first 403 of the tarballs it fetches at once), the second
    installs `before`, and only `before` is mirrored. Returns the package's status page."""
    first = install(npm, proxy, {name: wanted})
    assert first.returncode != 0, first.stdout
    assert "E403" in first.stderr, first.stderr
    assert any(text in first.stderr for text in (rule, *printed)), first.stderr
    [refusal] = [event for event in proxy.events("release_signal_refused")
                 if event["package"] == name]
    assert (refusal["version"], refusal["rule"], refusal["security"]) == (refused, rule, True)
    assert refusal["compared_with"] == before

    second = install(npm, proxy, {name: wanted})
    assert second.returncode == 0, second.stderr
    assert npm.installed()[name] == before
    wait_for(lambda: before in verdaccio.versions(name), timeout=60,
             message=f"the worker to mirror {name}@{before}")
    assert refused not in verdaccio.versions(name)
    assert proxy.metric("mirrorgate_rule_denials_total", rule=rule, mode="enforce") >= 1
    page: str = http_request("GET", proxy.url + f"ui/package/{name}").body.decode()
    assert rule in page
    return page


def test_shai_hulud_a_patch_release_adding_a_postinstall_bundle_is_quarantined(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(shai_hulud_shape())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    page = quarantined(npm_client, proxy, verdaccio, "worm-host", "^1.4.0", "1.4.3", "1.4.2",
                       "new-install-script")

    assert "node bundle.js" in page


def test_chalk_an_obfuscated_blob_in_the_entry_file_is_quarantined(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(chalk_shape())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    page = quarantined(npm_client, proxy, verdaccio, "colour-kit", "^5.6.0", "5.6.1", "5.6.0",
                       "obfuscated-code")

    [refusal] = proxy.events("release_signal_refused")
    assert any(item.startswith("index.js: obfuscator-style `_0x` identifiers")
               for item in refusal["evidence"])
    assert "index.js" in page


def test_axios_a_new_dependency_published_the_day_before_is_quarantined(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    package, dependency = axios_shape()
    public_registry.add(package, dependency, follow_redirects())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    # the dropper itself, a day-old package running a postinstall, is refused too (its own
    # signal): npm prints whichever of the two 403s arrives first
    page = quarantined(npm_client, proxy, verdaccio, "http-kit", "^1.14.0", "1.14.1", "1.14.0",
                       "new-dependency-young", printed=("young-package-install-script",))

    assert AXIOS_DEPENDENCY in page
    assert AXIOS_DEPENDENCY not in npm_client.installed()  # the dropper never arrived
