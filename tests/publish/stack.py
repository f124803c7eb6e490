"""What a publish test starts: mirrorgate over a fixture public registry and Verdaccio, with a
publisher and a read-only client, and the rules file's `[publish] names`; plus the npm package
directories a test publishes from and the publish documents it forges by hand."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorgate.access.tokens import new_token, token_line
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixtureVersion
from tests.servers.processes import MirrorgateProcess, Reply, http_request
from tests.servers.verdaccio import Verdaccio, escape_name

__all__ = ["RULES", "Stack", "forged_document", "login", "npm_package", "start_stack"]

RULES = '[publish]\nnames = ["@acme/*", "acme-*"]\n\n[private]\nmerge_public = ["acme-shared"]\n'
"""What may be published: the organisation's scope and prefix; `acme-shared` is merged with
its public namesake on purpose."""


@dataclass
class Stack:
    proxy: MirrorgateProcess
    verdaccio: Verdaccio | None
    publisher: str
    reader: str

    def put(self, name: str, body: bytes, *, token: str | None = None) -> Reply:
        """A hand-made `PUT /npm/<name>`, as a client other than npm could send it."""
        return http_request("PUT", self.proxy.registry_url + escape_name(name), body=body,
                            headers={"Content-Type": "application/json",
                                     "Authorization": f"Bearer {token or self.publisher}"})

    def publishes(self, outcome: str, operation: str = "publish", client: str = "") -> float:
        labels = {"outcome": outcome, "operation": operation}
        if client:
            labels["client"] = client
        return self.proxy.metric("mirrorgate_publishes_total", **labels)


def start_stack(guarded: GuardedFactory, guard: SecretGuard, public: FixtureRegistry,
                verdaccio: Verdaccio | None, secrets: SecretDir, tmp_path: Path,
                **env: str) -> Stack:
    """mirrorgate with two clients: `release-bot` may publish, `ci` may only read. Without
    `verdaccio` the private upstream is mirrorgate's embedded file store."""
    publisher, reader = new_token(), new_token()
    secrets.write(f"{token_line('release-bot', publisher)} publish:@acme/*,acme-*\n"
                  f"{token_line('ci', reader)}\n")
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    settings = {"MIRRORGATE_RULES_FILE": str(rules), **env}
    if verdaccio is not None:
        proxy = start_guarded(guarded, guard, public, verdaccio, secrets.path, publisher,
                              reader, **settings)
    else:
        proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                                  "MIRRORGATE_CLIENT_TOKENS_FILE": str(secrets.path),
                                  "MIRRORGATE_METRICS_OPEN": "true", **settings})
        guard.watch(proxy, publisher)
        guard.watch(proxy, reader)
    return Stack(proxy, verdaccio, publisher, reader)


def npm_package(root: Path, name: str, version: str) -> Path:
    """A directory `npm publish` publishes `name@version` from (a package of a few files)."""
    directory = root / f"{name.replace('/', '+')}-{version}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "package.json").write_text(json.dumps(
        {"name": name, "version": version, "main": "index.js", "license": "MIT"}) + "\n",
        encoding="utf-8")
    (directory / "index.js").write_text(f"module.exports = {json.dumps(version)};\n",
                                        encoding="utf-8")
    (directory / "README.md").write_text(f"# {name}\n\n" + "words " * 400, encoding="utf-8")
    return directory


def login(client: NpmClient, stack: Stack, token: str) -> None:
    auth_npmrc(client, stack.proxy.registry_url, token=token)


def forged_document(version: FixtureVersion, *, tarball: bytes | None = None,
                    **changes: Any) -> bytes:
    """The document npm publish sends for `version` (its `dist` computed from its own bytes),
    with `tarball` attached instead when given, and top-level `changes`."""
    attached = version.tarball if tarball is None else tarball
    document: dict[str, Any] = {
        "_id": version.name, "name": version.name,
        "dist-tags": {"latest": version.version},
        "versions": {version.version: version.document("http://127.0.0.1:9/npm/")},
        "_attachments": {version.filename: {"content_type": "application/octet-stream",
                                            "data": base64.b64encode(attached).decode(),
                                            "length": len(attached)}},
    }
    document.update(changes)
    return json.dumps(document).encode()
