"""Verdaccio, the private registry of the tests, starts fresh, takes publishes with its token,
serves them back, and refuses the same version twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers.availability import unavailable
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, standard_tree
from tests.servers.processes import ServerUnavailableError
from tests.servers.verdaccio import Verdaccio


def test_verdaccio_takes_a_publish_with_its_token_and_serves_it_back(
    verdaccio: Verdaccio,
) -> None:
    version = make_package("@fixture/beta", ["2.1.3"]).version("2.1.3")
    assert verdaccio.packument("@fixture/beta") is None

    reply = verdaccio.publish(version)

    assert reply.status == 201
    assert verdaccio.versions("@fixture/beta") == ["2.1.3"]
    assert verdaccio.dist_tags("@fixture/beta") == {"latest": "2.1.3"}
    document = verdaccio.packument("@fixture/beta")
    assert document is not None
    assert document["versions"]["2.1.3"]["dist"]["integrity"] == version.integrity
    assert verdaccio.tarball("@fixture/beta", "beta-2.1.3.tgz") == version.tarball
    served = verdaccio.request("GET", "@fixture/beta/-/beta-2.1.3.tgz", authenticated=False)
    assert served.body == version.tarball


def test_verdaccio_answers_409_to_the_same_version_again(verdaccio: Verdaccio) -> None:
    version = make_package("alpha", ["1.0.0"]).version("1.0.0")
    verdaccio.publish(version)

    again = verdaccio.publish(version, check=False)

    assert again.status == 409
    assert "already present" in again.json()["error"]


def test_verdaccio_refuses_a_publish_without_a_valid_token(verdaccio: Verdaccio) -> None:
    version = make_package("alpha", ["1.0.0"]).version("1.0.0")
    reply = verdaccio.request("PUT", "alpha", body=b"{}", authenticated=False,
                              headers={"Authorization": "Bearer not-a-token",
                                       "Content-Type": "application/json"})
    assert reply.status == 401
    assert verdaccio.tarball("alpha", version.filename) is None


def test_npm_installs_the_standard_tree_published_to_verdaccio(
    verdaccio: Verdaccio, npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    for package in tree.packages:
        verdaccio.publish_package(package)
    npm_client.write_project(tree.dependencies)

    result = npm_client.install(registry=verdaccio.url, timeout=90)

    assert result.returncode == 0, result.stderr
    assert npm_client.installed() == tree.resolved


def test_verdaccio_with_an_uplink_serves_what_the_uplink_has(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    public_registry.add(make_package("alpha", ["1.0.0", "1.2.0"]))
    with Verdaccio(tmp_path / "proxying", uplink=public_registry.url) as proxying:
        assert proxying.versions("alpha") == ["1.0.0", "1.2.0"]
    assert any(r.path == "/alpha" for r in public_registry.requests)


def test_a_missing_verdaccio_says_to_run_the_test_script(tmp_path: Path) -> None:
    with pytest.raises(ServerUnavailableError, match=r"run \./scripts/test"):
        Verdaccio(tmp_path, binary=tmp_path / "no-verdaccio").start()


def test_an_unavailable_server_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="no server"):
        unavailable("no server")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no server"):
        unavailable("no server")
