"""Registry signatures survive mirroring: a version pulled through `mirrorgate serve`, mirrored
into Verdaccio by the worker and served again from the private side, still carries the public
registry's `dist.signatures`, and they verify against the keys mirrorgate serves, the check
`npm audit signatures` makes."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import orjson

from tests.rules.signing import SigningKey, serve_keys, signed, verify_served
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package
from tests.servers.processes import wait_for
from tests.servers.verdaccio import Verdaccio


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback only
        document: dict[str, Any] = orjson.loads(response.read())
    return document


def test_a_mirrored_version_is_served_with_registry_signatures_that_verify(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    key = SigningKey()
    serve_keys(public_registry, key)
    public_registry.add(make_package("signed-mirror", [signed(key, "signed-mirror", "1.0.0")]))
    rules = tmp_path / "rules.toml"
    rules.write_text("[signatures]\nverify = true\nmissing = \"deny\"\n", encoding="utf-8")
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
           "MIRRORGATE_RULES_FILE": str(rules)}
    proxy = mirrorgate("serve", env)
    npm_client.write_project({"signed-mirror": "1.0.0"})

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    wait_for(lambda: "1.0.0" in verdaccio.versions("signed-mirror"), timeout=60)
    stored = verdaccio.packument("signed-mirror")
    assert stored is not None
    public = public_registry.packument("signed-mirror")["versions"]["1.0.0"]["dist"]
    assert stored["versions"]["1.0.0"]["dist"]["signatures"] == public["signatures"]
    assert proxy.terminate() == 0
    # The public copy loses its signatures: what is served next can only be the mirrored one.
    public_registry.add(make_package("signed-mirror", ["1.0.0"]))
    again = mirrorgate("serve", env)
    served = get_json(f"{again.registry_url}signed-mirror")["versions"]["1.0.0"]["dist"]
    keys = get_json(f"{again.registry_url}-/npm/v1/keys")
    assert verify_served(keys, "signed-mirror", "1.0.0", served["integrity"],
                         served["signatures"])
