"""The real npm client, isolated, installs the standard tree from the fixture registry: the
fixture packuments and tarballs are valid for npm itself."""

from __future__ import annotations

from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import standard_tree


def test_npm_installs_the_standard_tree_straight_from_the_fixture_registry(
    public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    npm_client.registry = public_registry.url
    npm_client.write_project(tree.dependencies)

    result = npm_client.install(timeout=90)

    assert result.returncode == 0, result.stderr
    assert npm_client.installed() == tree.resolved
    # npm 11.19 asks for full packuments (Accept: application/json) while it installs
    metadata = {r.path for r in public_registry.requests if "/-/" not in r.path}
    assert metadata == {"/alpha", "/@fixture%2fbeta", "/gamma", "/delta", "/epsilon", "/zeta"}
    # the machine's ~/.npmrc omits `resolved`; the isolated config must not
    locked = npm_client.lockfile()["packages"]["node_modules/@fixture/beta"]
    assert locked["resolved"] == public_registry.url + "@fixture/beta/-/beta-2.1.3.tgz"


def test_npm_ci_installs_a_lockfile_written_against_another_registry(
    public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    npm_client.write_project(tree.dependencies)
    assert npm_client.install(registry=public_registry.url, timeout=90).returncode == 0
    public_registry.stop()
    npm_client.clear_cache()

    with FixtureRegistry(*tree.packages) as other:
        result = npm_client.ci(registry=other.url, timeout=90)
        fetched = {r.path for r in other.requests if "/-/" in r.path}

    assert result.returncode == 0, result.stderr
    assert "/zeta/-/zeta-1.0.1.tgz" in fetched
    assert npm_client.installed() == tree.resolved


def test_npm_refuses_a_tampered_tarball_with_eintegrity(
    public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    honest = public_registry.package("zeta").version("1.0.1").tarball
    public_registry.fault("/zeta/-/", Fault(body=honest[:-1] + bytes([honest[-1] ^ 1])))
    npm_client.write_project({"zeta": "1.0.1"})

    result = npm_client.install(registry=public_registry.url, timeout=60)

    assert result.returncode != 0
    assert "EINTEGRITY" in result.stderr
