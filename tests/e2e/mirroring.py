"""What the end-to-end suites check after an install: every resolved version mirrored, intact.

Intact means read back over HTTP, as a client reads it (gzip accepted), and hashed against
the published integrity: from Verdaccio itself, and through mirrorgate (`assert_served_*`).
Reading the registry's files from disk alone never showed what a client receives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixtureTree, tarball_filename
from tests.servers.processes import http_request, wait_for
from tests.servers.verdaccio import Verdaccio, escape_name
from tests.sri import sri


def assert_served_byte_for_byte(registry_url: str, public: FixtureRegistry,
                                tree: FixtureTree) -> None:
    """Every resolved version downloaded through mirrorgate (`registry_url`, ending in
    /npm/) as npm asks for it is, undecoded, the published bytes, and its packument gives it
    the public publish time (what an age gate such as yarn 4's `npmMinimalAgeGate` reads)."""
    for name, version in tree.resolved.items():
        original = public_manifest(public, name, version)
        path = f"{escape_name(name)}/-/{tarball_filename(name, version)}"
        reply = http_request("GET", registry_url + path,
                             headers={"Accept-Encoding": "gzip, deflate, br"})
        assert reply.status == 200, f"{name}@{version}: {reply.status}"
        assert not any(key.lower() == "content-encoding" for key in reply.headers)
        assert sri("sha512", reply.body) == original["dist"]["integrity"], f"{name}@{version}"
        document = http_request("GET", registry_url + escape_name(name),
                                headers={"Accept": "application/json"}).json()
        assert document["time"][version] == public.packument(name)["time"][version], (
            f"{name}@{version} is served with another publish time than the public one")


def public_manifest(public: FixtureRegistry, name: str, version: str) -> dict[str, Any]:
    package = public.package(name)
    assert package is not None, f"{name} is not on the public fixture registry"
    manifest: dict[str, Any] = package.packument(public.url)["versions"][version]
    return manifest


def mirrored_in_verdaccio(verdaccio: Verdaccio, tree: FixtureTree) -> bool:
    return all(version in verdaccio.versions(name) for name, version in tree.resolved.items())


def assert_verdaccio_holds_the_tree(verdaccio: Verdaccio, public: FixtureRegistry,
                                    tree: FixtureTree, timeout: float = 60) -> None:
    """Every resolved version lands in Verdaccio with the public integrity, bytes and deps."""
    wait_for(lambda: mirrored_in_verdaccio(verdaccio, tree), timeout=timeout)
    for name, version in tree.resolved.items():
        stored = verdaccio.packument(name)
        assert stored is not None
        manifest = stored["versions"][version]
        original = public_manifest(public, name, version)
        assert manifest["dist"]["integrity"] == original["dist"]["integrity"]
        assert manifest["dist"]["shasum"] == original["dist"]["shasum"]
        assert manifest.get("dependencies", {}) == original.get("dependencies", {})
        package = public.package(name)
        assert package is not None
        stored_bytes = verdaccio.tarball(name, tarball_filename(name, version))
        assert stored_bytes == package.versions[version].tarball
        served = verdaccio.download(name, tarball_filename(name, version))
        assert sri("sha512", served) == original["dist"]["integrity"], f"{name}@{version} over HTTP"


def store_manifest(root: Path, name: str, version: str) -> dict[str, Any] | None:
    path = root / name / "versions" / f"{version}.json"
    if not path.is_file():
        return None
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return document


def assert_store_holds_the_tree(root: Path, public: FixtureRegistry, tree: FixtureTree,
                                timeout: float = 60) -> None:
    wait_for(lambda: all(store_manifest(root, n, v) is not None
                         for n, v in tree.resolved.items()), timeout=timeout)
    for name, version in tree.resolved.items():
        manifest = store_manifest(root, name, version)
        assert manifest is not None
        original = public_manifest(public, name, version)
        assert manifest["dist"]["integrity"] == original["dist"]["integrity"]
        assert manifest.get("dependencies", {}) == original.get("dependencies", {})
        package = public.package(name)
        assert package is not None
        stored = root / name / "tarballs" / tarball_filename(name, version)
        assert stored.read_bytes() == package.versions[version].tarball
