"""npm publish, install, dist-tag, deprecate and unpublish through mirrorgate into Verdaccio.

One registry URL for everything, as Verdaccio, Artifactory and Nexus users have it: the real
npm client publishes with a token whose line carries `publish`, mirrorgate forwards with its own
credential, and what npm installs back is what it published.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import Stack, login, npm_package, start_stack
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.processes import wait_for
from tests.servers.verdaccio import Verdaccio

NAME = "@acme/widget"


def publish(npm: NpmClient, stack: Stack, root: Path, version: str, *extra: str) -> str:
    done = npm.run("publish", *extra, registry=stack.proxy.registry_url,
                   cwd=npm_package(root, NAME, version))
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def tags(npm: NpmClient, stack: Stack) -> dict[str, str]:
    done = npm.run("dist-tag", "ls", NAME, registry=stack.proxy.registry_url)
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.split("\n") if ": " in line)


def test_npm_publishes_through_mirrorgate_installs_it_back_and_a_new_version_moves_latest(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    login(npm_client, stack, stack.publisher)

    said = publish(npm_client, stack, tmp_path / "packages", "1.0.0")
    guard.seen(said, "npm publish's output")
    public_registry.clear_requests()  # npm publish asked for the name first: none had it
    npm_client.write_project({NAME: "^1.0.0"})
    installed = npm_client.install(registry=stack.proxy.registry_url)

    assert verdaccio.versions(NAME) == ["1.0.0"]
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == {NAME: "1.0.0"}
    module = npm_client.project / "node_modules" / "@acme" / "widget" / "index.js"
    assert module.read_text(encoding="utf-8") == 'module.exports = "1.0.0";\n'
    [line] = stack.proxy.events("package_published")
    assert (line["client"], line["package"], line["version"]) == ("release-bot", NAME, "1.0.0")
    assert stack.publishes("published", client="release-bot") == 1
    status_page = stack.proxy.get("ui/", headers={"Authorization": f"Bearer {stack.reader}"})
    assert "@acme/widget@1.0.0" in status_page.body.decode()
    assert "by release-bot" in status_page.body.decode()
    # first-party at once: the install's packument came from the private side alone
    assert public_registry.requests == []

    publish(npm_client, stack, tmp_path / "packages", "1.1.0")

    assert verdaccio.versions(NAME) == ["1.0.0", "1.1.0"]
    assert tags(npm_client, stack)["latest"] == "1.1.0"
    (npm_client.project / "package-lock.json").unlink()
    shutil.rmtree(npm_client.project / "node_modules")
    assert npm_client.install(registry=stack.proxy.registry_url).returncode == 0
    assert npm_client.installed() == {NAME: "1.1.0"}
    assert stack.publishes("published", client="release-bot") == 2


def test_dist_tag_add_rm_and_ls_deprecate_and_unpublish_go_through_mirrorgate(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    login(npm_client, stack, stack.publisher)
    registry = stack.proxy.registry_url
    for version in ("1.0.0", "1.1.0", "2.0.0-beta.1"):
        publish(npm_client, stack, tmp_path / "packages", version,
                *(["--tag", "next"] if "beta" in version else []))

    added = npm_client.run("dist-tag", "add", f"{NAME}@1.0.0", "stable", registry=registry)
    assert added.returncode == 0, added.stderr
    assert tags(npm_client, stack) == {"latest": "1.1.0", "next": "2.0.0-beta.1",
                                       "stable": "1.0.0"}
    assert verdaccio.dist_tags(NAME)["stable"] == "1.0.0"
    removed = npm_client.run("dist-tag", "rm", NAME, "stable", registry=registry)
    assert removed.returncode == 0, removed.stderr
    assert "stable" not in tags(npm_client, stack)
    assert "stable" not in verdaccio.dist_tags(NAME)

    deprecated = npm_client.run("deprecate", f"{NAME}@1.0.0", "use 1.1.0 or later",
                                registry=registry)
    assert deprecated.returncode == 0, deprecated.stderr
    stored = verdaccio.packument(NAME) or {}
    assert stored["versions"]["1.0.0"]["deprecated"] == "use 1.1.0 or later"
    assert "deprecated" not in stored["versions"]["1.1.0"]
    viewed = npm_client.run("view", f"{NAME}@1.0.0", "deprecated", "--json",
                            registry=registry)
    assert json.loads(viewed.stdout) == "use 1.1.0 or later"
    # the change was rebuilt from Verdaccio's own packument: the manifests are as published
    assert stored["versions"]["1.1.0"]["dist"]["tarball"].startswith(verdaccio.url)

    one = npm_client.run("unpublish", f"{NAME}@2.0.0-beta.1", registry=registry)
    assert one.returncode == 0, one.stderr
    assert verdaccio.versions(NAME) == ["1.0.0", "1.1.0"]
    assert verdaccio.tarball(NAME, "widget-2.0.0-beta.1.tgz") is None
    assert "next" not in tags(npm_client, stack)
    everything = npm_client.run("unpublish", NAME, "--force", registry=registry)
    assert everything.returncode == 0, everything.stderr
    assert verdaccio.packument(NAME) is None
    gone = npm_client.run("view", NAME, "versions", registry=registry)
    assert "E404" in gone.stderr

    operations = {line["event"] for line in stack.proxy.logs()
                  if line.get("client") == "release-bot" and line.get("package") == NAME
                  and line.get("event") in ("dist_tag_added", "dist_tag_removed",
                                            "package_changed", "package_unpublished",
                                            "tarball_removed")}
    assert operations == {"dist_tag_added", "dist_tag_removed", "package_changed",
                          "package_unpublished", "tarball_removed"}
    wait_for(lambda: stack.publishes("changed", "unpublish") == 1)
