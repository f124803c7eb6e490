"""Client-access helpers: a Secret-style tokens directory, a guarded proxy, `.npmrc` files."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from mirrorgate.access.tokens import token_line
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.processes import MirrorgateProcess
from tests.servers.verdaccio import Verdaccio


class SecretDir:
    """A directory laid out as the kubelet mounts a Secret: `tokens -> ..data/tokens`,
    `..data -> ..<version>`; `write` publishes a new version by swapping `..data`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.versions = 0

    @property
    def path(self) -> Path:
        return self.root / "tokens"

    def write(self, text: str) -> None:
        self.versions += 1
        version = self.root / f"..2026_{self.versions:04d}"
        version.mkdir()
        (version / "tokens").write_text(text, encoding="utf-8")
        staged = self.root / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/tokens")

    def clients(self, **tokens: str) -> None:
        self.write("# clients of mirrorgate\n" + "".join(
            token_line(name, token) + "\n" for name, token in tokens.items()))


def start_guarded(guarded: GuardedFactory, guard: SecretGuard, public: FixtureRegistry,
                  verdaccio: Verdaccio, tokens: Path | None, *tokens_to_watch: str,
                  **env: str) -> MirrorgateProcess:
    """`mirrorgate serve` over the fixture public registry and Verdaccio, metrics open (so the
    guard and the tests can read them), watched for every token in `tokens_to_watch`."""
    settings = {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
                "MIRRORGATE_METRICS_OPEN": "true", **env}
    if tokens is not None:
        settings["MIRRORGATE_CLIENT_TOKENS_FILE"] = str(tokens)
    process = guarded("serve", settings)
    for token in tokens_to_watch:
        guard.watch(process, token)
    return process


def auth_npmrc(client: NpmClient, registry: str, *, token: str | None = None,
               basic: str | None = None) -> None:
    """Give npm a token for `registry` only: `_authToken` (Bearer), or `_auth` (Basic, with
    the token as password and any user name)."""
    if token is not None:
        client.authenticate(registry, token)
    if basic is not None:
        nerfed = registry.split("://", 1)[1]
        ident = base64.b64encode(f"builder:{basic}".encode()).decode()
        with client.userconfig.open("a", encoding="utf-8") as npmrc:
            npmrc.write(f"//{nerfed}:_auth={ident}\n")


def tokens_file(tmp_path: Path, **clients: str) -> Path:
    path = tmp_path / "client-tokens"
    path.write_text("".join(f"{name} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
                            for name, token in clients.items()))
    return path


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
