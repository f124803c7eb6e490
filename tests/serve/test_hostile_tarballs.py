"""Tarballs read as npm reads them, through the real `mirrorgate serve` and the real npm client
with scripts on and `[install_scripts] block = true`: each hostile shape that the old tar walk
or orjson read as "runs nothing" (a zstd tarball, a package.json with a byte-order mark or an
invalid UTF-8 byte, `gypfile: false` beside a binding.gyp) is refused with its reason and runs
nothing, while old npm's pax-on-every-entry tarballs (statuses@1.5.0's real bytes) install.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import zstandard

from tests.npm.tarshapes import END, file
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import FixtureVersion, make_package, make_version
from tests.servers.verdaccio import Verdaccio

REGISTRY_FIXTURES = Path(__file__).parents[1] / "npm" / "fixtures" / "registry"


def _hook(marker: Path) -> str:
    return f"node -e \"require('fs').writeFileSync(process.argv[1], 'x')\" {marker}"


def _manifest(name: str, **fields: object) -> bytes:
    return json.dumps({"name": name, "version": "1.0.0", **fields}).encode()


def _version(name: str, tarball: bytes, **fields: Any) -> FixtureVersion:
    # the registry's manifest shows no install script: the rule admits it on the manifest
    return make_version(name, "1.0.0", tarball=tarball, **fields)


def hostile(marker: Path) -> dict[str, tuple[FixtureVersion, str]]:
    """name -> (the version, what its refusal names)."""
    hook = _hook(marker)
    zstd = zstandard.ZstdCompressor().compress(
        file("package/package.json", _manifest("hostile-zstd", bundleDependencies=["inner"]))
        + file("package/node_modules/inner/package.json", json.dumps(
            {"name": "inner", "version": "1.0.0", "scripts": {"postinstall": hook}}).encode())
        + END)
    bom = b"\xef\xbb\xbf" + _manifest("hostile-bom", scripts={"postinstall": hook})
    utf8 = _manifest("hostile-utf8", description="caf\xe9", scripts={"postinstall": hook})
    utf8 = utf8.replace(b"caf\\u00e9", b"caf\xe9\xff")  # Latin-1 and a stray byte
    gyp = (b"{'targets': [{'target_name': 'x', 'sources': ['<!(" + hook.encode()
           + b")']}]}")
    return {
        "hostile-zstd": (_version("hostile-zstd", zstd, bundleDependencies=["inner"]),
                         "node_modules/inner: postinstall"),
        "hostile-bom": (_version("hostile-bom", gzip.compress(
            file("package/package.json", bom) + END)), "postinstall"),
        "hostile-utf8": (_version("hostile-utf8", gzip.compress(
            file("package/package.json", utf8) + END)), "postinstall"),
        "hostile-gyp": (_version("hostile-gyp", gzip.compress(
            file("package/package.json", _manifest("hostile-gyp", gypfile=False))
            + file("package/binding.gyp", gyp) + END), gypfile=False),
            "binding.gyp (node-gyp rebuild)"),
    }


def test_hostile_tarballs_are_refused_with_their_reason_and_old_npm_tarballs_install(
    public_registry: FixtureRegistry, verdaccio: Verdaccio,
    mirrorgate: MirrorgateFactory, npm_client: NpmClient, tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    shapes = hostile(marker)
    statuses = make_version("statuses", "1.5.0", tarball=(
        REGISTRY_FIXTURES / "statuses-1.5.0.tgz").read_bytes())
    public_registry.add(*(make_package(name, [version])
                          for name, (version, _) in shapes.items()),
                        make_package("statuses", [statuses]))
    rules = tmp_path / "rules.toml"
    rules.write_text("[install_scripts]\nblock = true\n", encoding="utf-8")
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
        "MIRRORGATE_RULES_FILE": str(rules),
    })
    npm_client.registry = proxy.registry_url
    npm_client.write_project({})

    runs = {name: npm_client.install(f"{name}@1.0.0", scripts=True) for name in shapes}
    old = npm_client.install("statuses@1.5.0", scripts=True)

    assert not marker.exists(), "a hostile tarball's install script ran"
    refused = {entry["package"]: entry["reason"]
               for entry in proxy.events("tarball_scripts_refused")}
    for name, (_, reason) in shapes.items():
        assert runs[name].returncode != 0, name
        assert reason in refused.get(name, ""), (name, refused)
    # old npm (node-tar 2) wrote a pax header, size and NODETAR.* keys, before every entry
    assert old.returncode == 0, old.stderr
    assert npm_client.installed().get("statuses") == "1.5.0"
    assert "statuses" not in refused
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts") == len(shapes)
