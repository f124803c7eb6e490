"""Publishing with the embedded file store as the private upstream (no registry at all).

The store takes publishes, checked as they are for a registry, the tarball written into it as
it is decoded; it has no revisions or tags of its own, so the changes answer 501 saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import forged_document, login, npm_package, start_stack
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package

NAME = "@acme/widget"


def stored_files(store: Path) -> list[str]:
    return sorted(str(path.relative_to(store)) for path in store.rglob("*") if path.is_file())


def test_npm_publishes_into_the_file_store_and_installs_it_back(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, None, secret_dir, tmp_path)
    store = stack.proxy.workdir / "data" / "store"
    login(npm_client, stack, stack.publisher)
    registry = stack.proxy.registry_url

    first = npm_client.run("publish", registry=registry,
                           cwd=npm_package(tmp_path, NAME, "1.0.0"))
    second = npm_client.run("publish", registry=registry,
                            cwd=npm_package(tmp_path, NAME, "1.1.0"))
    npm_client.write_project({NAME: "^1.0.0"})
    installed = npm_client.install(registry=registry)
    deprecated = npm_client.run("deprecate", f"{NAME}@1.0.0", "old", registry=registry)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == {NAME: "1.1.0"}
    assert stored_files(store) == [
        "@acme/widget/tarballs/widget-1.0.0.tgz", "@acme/widget/tarballs/widget-1.1.0.tgz",
        "@acme/widget/versions/1.0.0.json", "@acme/widget/versions/1.1.0.json"]
    manifest = json.loads((store / "@acme/widget/versions/1.1.0.json").read_text())
    assert manifest["name"] == NAME
    assert deprecated.returncode != 0
    assert "501" in deprecated.stderr
    assert [line["version"] for line in stack.proxy.events("package_published")] == [
        "1.0.0", "1.1.0"]


def test_the_file_store_refuses_a_forged_tarball_and_a_second_publish_of_a_version(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, None, secret_dir, tmp_path)
    store = stack.proxy.workdir / "data" / "store"
    widget = make_package(NAME, ["1.0.0"]).version("1.0.0")
    other = make_package(NAME, ["1.0.0"], description="other bytes").version("1.0.0")

    forged = stack.put(NAME, forged_document(widget, tarball=other.tarball))
    files_after_forgery = stored_files(store)
    first = stack.put(NAME, forged_document(widget))
    again = stack.put(NAME, forged_document(other))

    assert forged.status == 400
    assert "does not match its declared sha512" in json.loads(forged.body)["error"]
    assert files_after_forgery == []  # not even a temporary file is left
    assert first.status == 201
    assert again.status == 409
    assert (store / "@acme/widget/tarballs/widget-1.0.0.tgz").read_bytes() == widget.tarball
