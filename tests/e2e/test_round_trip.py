"""The product's promise, end to end, with `mirrorgate serve` (proxy + in-process worker).

A real npm installs a real tree through the proxy with a cold cache; the worker mirrors every
tarball into the private registry (Verdaccio, or the embedded file store); then, with the public
registry stopped and a fresh npm cache, the same install succeeds from the private side alone.
"""

from __future__ import annotations

import shutil

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
    mirrorgate: MirrorgateFactory,
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
