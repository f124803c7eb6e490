"""Verdaccio, the real npm registry the tests use as the private upstream and mirror target.

Each instance gets a fresh storage directory, an htpasswd file, a generated config and a free
port, so tests never share state. Decisions:

- Config: no uplinks by default (the private registry must not fetch from anywhere); an
  uplink URL can be given for benchmarks, and then every package is proxied to it. Reading is
  open to `$all`, publishing needs `$authenticated`; the audit middleware and the web UI are
  off; `publish.allow_offline` so a publish does not depend on an uplink being up.
- Ready means `GET /-/ping` answers; then one user is created and its token kept
  (`verdaccio.token`), which is what mirrorgate is given as MIRRORGATE_PRIVATE_TOKEN. Tokens
  are JWTs (`security.api.jwt`) unless `tokens="legacy"` keeps Verdaccio's bcrypt default.
- `tarball()` reads the storage directory, not the HTTP API: "what is stored" must not be
  answered by an uplink. Verdaccio does not check `dist.integrity` against the bytes it
  receives, so a test that nothing tampered was published has to look here.
- Not installed, or not starting, raises `ServerUnavailableError` (the fixtures make that a failure
  under CI and a skip elsewhere) with the hint to run `./scripts/test`.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import yaml

from tests.servers.packages import FixturePackage, FixtureVersion, semver_key
from tests.servers.ports import free_port
from tests.servers.processes import CapturedProcess, Reply, ServerUnavailableError, http_request

__all__ = ["VERDACCIO_BIN", "PublishRejectedError", "Verdaccio", "escape_name"]

REGISTRY_DIR = Path(__file__).resolve().parents[1] / "registry"
VERDACCIO_BIN = REGISTRY_DIR / "node_modules" / ".bin" / "verdaccio"


class PublishRejectedError(AssertionError):
    """A publish the test expected to succeed was refused; carries the status and body."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(f"publish answered {reply.status}: {reply.body[:500]!r}")
        self.reply = reply


def escape_name(name: str) -> str:
    """A package name as a registry path segment: `@scope/name` -> `@scope%2fname`."""
    return quote(name, safe="@").replace("%2F", "%2f")


class Verdaccio:
    """One Verdaccio process. `start()` returns once it answers and a user exists."""

    def __init__(self, workdir: Path, *, uplink: str | None = None, port: int | None = None,
                 user: str = "mirrorgate", binary: Path = VERDACCIO_BIN,
                 tokens: Literal["jwt", "legacy"] = "jwt") -> None:
        self.binary = binary
        self.workdir = workdir
        self.storage = workdir / "storage"
        self.config_path = workdir / "config.yaml"
        self.uplink = uplink
        self.port = port if port is not None else free_port()
        self.user = user
        self.tokens = tokens
        self.password = secrets.token_urlsafe(16)
        self._token: str | None = None
        self.process: CapturedProcess | None = None

    @property
    def url(self) -> str:
        """The base URL, with a trailing slash."""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def token(self) -> str:
        if self._token is None:
            raise RuntimeError("Verdaccio has not been started")
        return self._token

    def config(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"access": "$all", "publish": "$authenticated"}
        uplinks: dict[str, Any] = {}
        if self.uplink is not None:
            uplinks = {"upstream": {"url": self.uplink, "timeout": "30s", "max_fails": 10}}
            rule["proxy"] = "upstream"
        config: dict[str, Any] = {
            "storage": str(self.storage),
            "auth": {"htpasswd": {"file": str(self.workdir / "htpasswd"), "max_users": 100}},
            "uplinks": uplinks,
            "packages": {"@*/*": dict(rule), "**": dict(rule)},
            "middlewares": {"audit": {"enabled": False}},
            "web": {"enable": False},
            "publish": {"allow_offline": True},
            "max_body_size": "500mb",
            "log": {"type": "stdout", "format": "json", "level": "warn"},
        }
        if self.tokens == "jwt":
            # JWT tokens are checked with an HMAC (about 2 ms of Verdaccio's CPU); the legacy
            # default runs bcrypt on every authenticated request (about 80 ms). It must be set
            # before the user is created: the token returned then is a JWT.
            config["security"] = {"api": {"jwt": {"sign": {"expiresIn": "60d"}}}}
        return config

    def start(self, timeout: float = 20.0) -> Verdaccio:
        if not self.binary.exists():
            raise ServerUnavailableError(f"Verdaccio is not installed ({self.binary} is "
                                         "missing); run ./scripts/test, which runs npm install "
                                         "in tests/registry")
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config()), encoding="utf-8")
        env = {key: value for key, value in os.environ.items()
               if not key.lower().startswith(("npm_config_", "http_proxy", "https_proxy"))}
        self.process = CapturedProcess(
            [str(self.binary), "--config", str(self.config_path),
             "--listen", f"127.0.0.1:{self.port}"],
            env=env, cwd=self.workdir)
        try:
            self._wait_for_ping(timeout)
            self._token = self._create_user()
        except ServerUnavailableError:
            self.stop()
            raise
        return self

    def _wait_for_ping(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise ServerUnavailableError(f"Verdaccio exited with status "
                                        f"{self.process.returncode}:\n{self.process.output()}")
            try:
                if http_request("GET", self.url + "-/ping", timeout=1).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise ServerUnavailableError(f"Verdaccio did not answer /-/ping within {timeout:g}s:\n"
                                f"{self.process.output()}")

    def _create_user(self) -> str:
        reply = http_request(
            "PUT", f"{self.url}-/user/org.couchdb.user:{quote(self.user)}",
            body=json.dumps({"name": self.user, "password": self.password}).encode(),
            headers={"Content-Type": "application/json"})
        if reply.status != 201:
            raise ServerUnavailableError(f"Verdaccio refused to create a user: {reply.status} "
                                    f"{reply.body[:300]!r}")
        token: str = reply.json()["token"]
        return token

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=5)
            self.process = None

    def __enter__(self) -> Verdaccio:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- reading and seeding -------------------------------------------------------------

    def request(self, method: str, path: str, *, body: bytes | None = None,
                headers: dict[str, str] | None = None, authenticated: bool = True) -> Reply:
        sent = dict(headers or {})
        if authenticated:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        return http_request(method, self.url + path.lstrip("/"), body=body, headers=sent)

    def packument(self, name: str) -> dict[str, Any] | None:
        """The full packument Verdaccio serves for `name`, or None when it has none."""
        reply = self.request("GET", escape_name(name), headers={"Accept": "application/json"})
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise AssertionError(f"GET {name} answered {reply.status}: {reply.body[:300]!r}")
        document: dict[str, Any] = reply.json()
        return document

    def versions(self, name: str) -> list[str]:
        """The versions Verdaccio has for `name`, in semver order ([] when none)."""
        document = self.packument(name)
        return sorted((document or {}).get("versions", {}), key=semver_key)

    def dist_tags(self, name: str) -> dict[str, str]:
        document = self.packument(name) or {}
        tags: dict[str, str] = document.get("dist-tags", {})
        return tags

    def download(self, name: str, filename: str) -> bytes:
        """The tarball as Verdaccio serves it over HTTP, asked for as npm asks (gzip accepted)
        and decoded as npm decodes: what a client installs."""
        reply = self.request("GET", f"{escape_name(name)}/-/{filename}",
                             headers={"Accept-Encoding": "gzip, deflate"})
        if reply.status != 200:
            raise AssertionError(f"GET {name}/-/{filename} answered {reply.status}")
        codings = {value for key, value in reply.headers.items()
                   if key.lower() == "content-encoding"}
        return gzip.decompress(reply.body) if codings == {"gzip"} else reply.body

    def tarball(self, name: str, filename: str) -> bytes | None:
        """The tarball bytes in Verdaccio's storage, or None when it has not stored them."""
        path = self.storage.joinpath(*name.split("/"), filename)
        return path.read_bytes() if path.is_file() else None

    def publish(self, version: FixtureVersion, *, tags: dict[str, str] | None = None,
                check: bool = True) -> Reply:
        """Publish one version directly (`PUT /<name>` with the tarball attached), as the npm
        client does. With `check`, anything but 2xx raises `PublishRejectedError`."""
        tarball = version.tarball
        document = {
            "_id": version.name,
            "name": version.name,
            "dist-tags": tags if tags is not None else {"latest": version.version},
            "versions": {version.version: version.document(self.url)},
            "_attachments": {version.filename: {
                "content_type": "application/octet-stream",
                "data": base64.b64encode(tarball).decode(),
                "length": len(tarball),
            }},
        }
        reply = self.request("PUT", escape_name(version.name),
                             body=json.dumps(document).encode(),
                             headers={"Content-Type": "application/json"})
        if check and not 200 <= reply.status < 300:
            raise PublishRejectedError(reply)
        return reply

    def publish_package(self, package: FixturePackage) -> None:
        """Publish every version of `package`, oldest first, so Verdaccio ends with the same
        versions and dist-tags (npm prefers `latest` when it satisfies a range, so tags
        matter for what an install resolves)."""
        for number in package.sorted_versions():
            tags = {tag: number for tag, target in package.dist_tags.items() if target == number}
            self.publish(package.version(number), tags=tags)
        stored = self.dist_tags(package.name)
        if stored != package.dist_tags:
            raise AssertionError(f"{package.name}: Verdaccio has dist-tags {stored}, "
                                 f"expected {package.dist_tags}")
