"""The product's promise, end to end, with `mirrorgate serve` (proxy + in-process worker).

A real npm installs a real tree through the proxy with a cold cache; the worker mirrors every
tarball into the private registry (Verdaccio, or the embedded file store); then, with the public
registry stopped and a fresh npm cache, the same install succeeds from the private side alone,
every tarball read back through mirrorgate is the published bytes, and the mirrored versions
keep their public publish times (`npm install --before`, yarn 4's default age gate).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson

from tests.e2e.mirroring import (
    assert_served_byte_for_byte,
    assert_store_holds_the_tree,
    assert_verdaccio_holds_the_tree,
)
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import FixtureTree, standard_tree
from tests.servers.verdaccio import Verdaccio


def reinstall_from_scratch(npm: NpmClient, registry: str) -> None:
    npm.clear_cache()
    shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
    done = npm.ci(registry=registry)
    assert done.returncode == 0, done.stderr


YARN = Path(__file__).resolve().parents[1] / "registry" / "node_modules" / ".bin" / "yarn"


def yarn4_install_with_its_default_age_gate(workdir: Path, registry: str,
                                            tree: FixtureTree) -> None:
    """yarn 4 (berry) installs the tree through `registry` with its default
    `npmMinimalAgeGate` (one day): it refuses any version whose `time` is younger, which is
    what a mirrored version would be if it were served with the moment of mirroring."""
    project = workdir / "yarn-project"
    project.mkdir()
    (project / "package.json").write_text(orjson.dumps(
        {"name": "yarn-app", "version": "1.0.0", "private": True,
         "dependencies": tree.dependencies}).decode(), encoding="utf-8")
    (project / "yarn.lock").write_text("", encoding="utf-8")
    (project / ".yarnrc.yml").write_text(
        f'npmRegistryServer: "{registry}"\n'
        'unsafeHttpWhitelist: ["127.0.0.1"]\n'
        "enableGlobalCache: false\n"
        f'cacheFolder: "{workdir / "yarn-cache"}"\n'
        "enableTelemetry: false\n", encoding="utf-8")
    home = workdir / "yarn-home"
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_DATA_HOME": str(home / "data"), "YARN_ENABLE_IMMUTABLE_INSTALLS": "false"}
    done = subprocess.run([str(YARN), "install"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=180, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    for name, version in tree.dependencies.items():
        shown = subprocess.run(
            [str(YARN), "node", "-e", f"console.log(require('{name}/package.json').version)"],
            cwd=project, env=env, capture_output=True, text=True, timeout=60, check=True,
            stdin=subprocess.DEVNULL)
        assert shown.stdout.strip() == tree.resolved[name], (name, version)


def install_before_a_date_between_publish_and_mirroring(npm: NpmClient, registry: str,
                                                        tree: FixtureTree) -> None:
    """`npm install --before` a date after the public publish times (2020) and before the
    mirroring (today): it resolves only if the mirrored versions keep their public times."""
    npm.clear_cache()
    shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
    (npm.project / "package-lock.json").unlink()
    done = npm.install("--before=2021-06-01", registry=registry)
    assert done.returncode == 0, done.stderr
    assert npm.installed() == tree.resolved


def test_an_install_is_mirrored_into_verdaccio_and_then_served_without_the_public_registry(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    tree = standard_tree()
    for package in tree.packages:
        public_registry.add(package)
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token}
    proxy = mirrorgate("serve", env)
    npm_client.write_project(tree.dependencies)

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == tree.resolved
    assert_verdaccio_holds_the_tree(verdaccio, public_registry, tree)
    assert proxy.metric("mirrorgate_jobs_total", outcome="published") == len(tree.resolved)

    public_registry.stop()
    assert proxy.terminate() == 0
    offline = mirrorgate("serve", env)  # a fresh process: nothing cached from the public side
    reinstall_from_scratch(npm_client, offline.registry_url)
    assert npm_client.installed() == tree.resolved
    assert_served_byte_for_byte(offline.registry_url, public_registry, tree)
    install_before_a_date_between_publish_and_mirroring(npm_client, offline.registry_url, tree)
    yarn4_install_with_its_default_age_gate(tmp_path, offline.registry_url, tree)


def test_the_same_round_trip_works_with_the_embedded_file_store(
    public_registry: FixtureRegistry, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
) -> None:
    tree = standard_tree()
    for package in tree.packages:
        public_registry.add(package)
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    store = proxy.workdir / "data" / "store"
    npm_client.write_project(tree.dependencies)

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert_store_holds_the_tree(store, public_registry, tree)

    public_registry.stop()
    assert proxy.terminate() == 0
    offline = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                   "MIRRORGATE_DATA_DIR": str(proxy.workdir / "data")})
    reinstall_from_scratch(npm_client, offline.registry_url)
    assert npm_client.installed() == tree.resolved
