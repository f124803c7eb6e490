"""Row 24 of the faults table: a first-party publish whose tarball is not what its document says.

> | 24 | a publish of `@acme/widget@1.0.1` whose tarball's package.json is
> `@acme/other@9.9.9` with a `postinstall`, or holds `package/../../../etc/evil` or
> `/abs/evil`, or runs a script or depends on a package the document does not declare | 400
> naming what differs; nothing reaches Verdaccio, which stays up; an honest `npm publish`
> of the same version then goes through and installs |

The attack is manifest confusion on the publish path: the registry shows the document's
manifest (no scripts), a client runs the tarball's own package.json (a `postinstall`), and an
extractor that follows `..` writes outside the project. The public side already refuses it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import forged_document, login, npm_package, start_stack
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import entry, make_package, tar
from tests.servers.processes import http_request
from tests.servers.verdaccio import Verdaccio
from tests.sri import sri

WIDGET = make_package("@acme/widget", ["1.0.1"]).version("1.0.1")
HONEST = {"name": "@acme/widget", "version": "1.0.1", "main": "index.js"}


def document(contents: bytes) -> bytes:
    """npm publish's document for WIDGET with `contents` attached, its `dist` those bytes'
    own (the attacker computes the digests: they check out, the contents do not)."""
    forged = json.loads(forged_document(WIDGET, tarball=contents))
    dist = forged["versions"]["1.0.1"]["dist"]
    dist["integrity"] = sri("sha512", contents)
    dist["shasum"] = hashlib.sha1(contents).hexdigest()  # noqa: S324 - npm's shasum is sha1
    return json.dumps(forged).encode()


def tarball(manifest: dict[str, Any], *extra: tuple[str, bytes]) -> bytes:
    entries = [entry("package/package.json", json.dumps(manifest).encode()),
               entry("package/index.js", b"module.exports = 1;\n"),
               *(entry(path, data) for path, data in extra)]
    return gzip.compress(tar(entries), mtime=0)


@pytest.mark.parametrize(("contents", "named"), [
    (tarball({"name": "@acme/other", "version": "9.9.9",
              "scripts": {"postinstall": "node steal.js"}}),
     "package.json is @acme/other@9.9.9, not @acme/widget@1.0.1"),
    (tarball({**HONEST, "scripts": {"postinstall": "node steal.js"}}),
     "runs postinstall 'node steal.js' at install, and the document declares None"),
    (tarball({**HONEST, "dependencies": {"left-pad-evil": "1.0.0"}}),
     "differ in dependencies (left-pad-evil)"),
    (tarball(HONEST, ("package/../../../etc/evil", b"x")), "climbs out with '..'"),
    (tarball(HONEST, ("/abs/evil", b"x")), "'/abs/evil'"),
], ids=["another-package", "hidden-postinstall", "hidden-dependency", "dot-dot", "absolute"])
def test_a_publish_whose_tarball_differs_from_its_document_is_refused(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, tmp_path: Path, contents: bytes, named: str,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio,
                        SecretDir(tmp_path / "client-tokens"), tmp_path)

    reply = stack.put("@acme/widget", document(contents))

    assert reply.status == 400
    said = json.loads(reply.body)["error"]
    assert named in said, said
    assert http_request("GET", verdaccio.url + "-/ping").status == 200
    assert verdaccio.packument("@acme/widget") is None


def test_after_a_refused_confused_publish_the_honest_one_goes_through_and_installs(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio,
                        SecretDir(tmp_path / "client-tokens"), tmp_path)
    confused = tarball({**HONEST, "scripts": {"postinstall": "node steal.js"}})
    assert stack.put("@acme/widget", document(confused)).status == 400
    login(npm_client, stack, stack.publisher)

    published = npm_client.run("publish", registry=stack.proxy.registry_url,
                               cwd=npm_package(tmp_path, "@acme/widget", "1.0.1"))
    npm_client.write_project({"@acme/widget": "1.0.1"})
    installed = npm_client.install(registry=stack.proxy.registry_url)

    assert published.returncode == 0, published.stderr
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == {"@acme/widget": "1.0.1"}
