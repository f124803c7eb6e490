"""Obfuscated code is measured where it runs: every file npm or node may execute (`main`,
extensionless too; `bin`; `exports`; files install scripts name; what those `require`, any
extension) is read whole, through the real npm client, a real `mirrorgate serve` and real
Verdaccio (docs/serving.md#release-signals).

Each shape hides the chalk/debug blob (or its loader) where the reading of 2026-12 did not
look: past the first 2 MiB of the entry file, in an extensionless `main`, in a `.dat` file
the entry requires, or as an indirect `(0,eval)` over base64 cut into pieces (no large literal
to see). Each is refused with `obfuscated-code` and the file, line and byte of its mark; the
same payload in its plain shape is refused as before; and a clean release carrying every one
of those kinds of file, unobfuscated, is admitted.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_release_signals import install, start
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import chalk_shape, entry_file, obfuscated_blob
from tests.servers.npm import NpmClient
from tests.servers.packages import EPOCH, FixturePackage, make_package, make_version
from tests.servers.processes import MirrorgateProcess
from tests.servers.verdaccio import Verdaccio

RULE = "obfuscated-code"


def _fresh() -> datetime:
    return datetime.now(UTC) - timedelta(minutes=5)


def hand_written(size: int) -> bytes:
    """About `size` bytes of hand-written modules (short lines, no mark), as a large
    unbundled entry file carries them."""
    parts: list[bytes] = []
    total = 0
    while total < size:
        parts.append(entry_file(f"part{len(parts)}"))
        total += len(parts[-1])
    return b"\n".join(parts) + b"\n"


def split_eval(seed: str) -> bytes:
    """A loader as droppers write it: the payload's base64 cut into pieces no larger than a
    line of ordinary code, joined, decoded and run by an indirect eval."""
    payload = base64.b64encode(f"console.log('fixture payload {seed} ran')".encode() * 40)
    pieces = ",".join(f'"{payload[i:i + 64].decode()}"' for i in range(0, len(payload), 64))
    return (f"const parts = [{pieces}];\n"
            "(0, eval)(Buffer.from(parts.join(''), 'base64').toString());\n").encode()


def two_versions(name: str, before: dict[str, bytes], after: dict[str, bytes],
                 **manifest: Any) -> FixturePackage:
    return make_package(name, [
        make_version(name, "1.0.0", files=before, published=EPOCH, **manifest),
        make_version(name, "1.0.1", files=after, published=_fresh(), **manifest)])


def past_two_mib() -> FixturePackage:
    """The blob appended to a 3 MB hand-written entry file: past the first 2 MiB."""
    entry = hand_written(3_000_000)
    return two_versions("long-entry", {"index.js": entry},
                        {"index.js": entry + obfuscated_blob("long-entry")})


def extensionless_main() -> FixturePackage:
    """`main` names a file without an extension, which node runs as JavaScript."""
    return two_versions("bare-main", {"lib/start": entry_file("bare-main")},
                        {"lib/start": entry_file("bare-main") + obfuscated_blob("bare-main")},
                        main="lib/start")


def required_dat() -> FixturePackage:
    """The entry requires `./data/table.dat`, which node loads as JavaScript; the blob moves
    into it."""
    entry = entry_file("dat-loader") + b"module.exports.table = require('./data/table.dat');\n"
    return two_versions("dat-loader",
                        {"index.js": entry, "data/table.dat": b"module.exports = [1, 2, 3];\n"},
                        {"index.js": entry, "data/table.dat": obfuscated_blob("dat-loader")})


def indirect_eval() -> FixturePackage:
    return two_versions("split-eval", {"index.js": entry_file("split-eval")},
                        {"index.js": entry_file("split-eval") + split_eval("split-eval")})


def refused(npm: NpmClient, proxy: MirrorgateProcess, name: str) -> list[str]:
    """Install `name@^1.0.0`: E403 naming the rule and how to release it; the evidence."""
    answer = install(npm, proxy, {name: "^1.0.0"})
    assert answer.returncode != 0, answer.stdout
    assert "E403" in answer.stderr, answer.stderr
    assert RULE in answer.stderr
    assert "release.allow" in answer.stderr  # how a person releases a false positive
    [refusal] = [event for event in proxy.events("release_signal_refused")
                 if event["package"] == name]
    assert (refusal["version"], refusal["rule"], refusal["compared_with"]) == (
        "1.0.1", RULE, "1.0.0")
    evidence: list[str] = refusal["evidence"]
    return evidence


@pytest.mark.parametrize(("shape", "file", "mark"), [
    (past_two_mib, "index.js", "obfuscator-style `_0x` identifiers"),
    (extensionless_main, "lib/start", "obfuscator-style `_0x` identifiers"),
    (required_dat, "data/table.dat", "obfuscator-style `_0x` identifiers"),
    (indirect_eval, "index.js", "eval or Function over a decoded string"),
], ids=["past-2-mib", "extensionless-main", "required-dat", "indirect-eval"])
def test_a_payload_where_the_code_runs_is_refused_with_its_file_line_and_byte(
    shape: object, file: str, mark: str, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    assert callable(shape)
    package: FixturePackage = shape()
    public_registry.add(package)
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    evidence = refused(npm_client, proxy, package.name)

    [item] = [item for item in evidence if item.startswith(f"{file}: {mark}")]
    where = re.search(r"at line (\d+), byte (\d+)", item)
    assert where is not None, item
    if shape is past_two_mib:
        assert int(where.group(2)) > 2 * 1024 * 1024  # where the first 2 MiB ended
    assert "1.0.0" in item


def plain_loader() -> FixturePackage:
    """The plain shapes of the same payloads: the blob in a required `.js` file, and a direct
    `eval` over one decoded string."""
    blob = base64.b64encode(b"console.log('fixture payload ran')").decode()
    entry = entry_file("plain-loader") + b"require('./lib/table.js');\n"
    return two_versions("plain-loader", {"index.js": entry, "lib/table.js": b"exports.a = 1;\n"},
                        {"index.js": entry + f"eval(atob('{blob}'));\n".encode(),
                         "lib/table.js": obfuscated_blob("plain-loader")})


def clean_release() -> FixturePackage:
    """Every kind of file that runs, read whole, and nothing obfuscated: a 3 MB entry, an
    extensionless bin, a required `.dat`, an `exports` target and a postinstall's script."""
    def files(version: str) -> dict[str, bytes]:
        return {"index.js": hand_written(3_000_000) + f"exports.v = '{version}';\n".encode()
                + b"exports.table = require('./data/table.dat');\n",
                "bin/clean": b"#!/usr/bin/env node\n" + entry_file(f"clean {version}"),
                "data/table.dat": f"module.exports = ['{version}'];\n".encode(),
                "esm/index.mjs": f"export const version = '{version}';\n".encode(),
                "setup.js": b"console.log('fixture setup ran');\n"}
    manifest = {"bin": {"clean-kit": "bin/clean"},
                "exports": {".": {"import": "./esm/index.mjs", "require": "./index.js"}},
                "scripts": {"postinstall": "node setup.js"}}
    return two_versions("clean-kit", files("1.0.0"), files("1.0.1"), **manifest)


def test_the_plain_shapes_are_refused_as_before_and_a_clean_release_is_admitted(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(chalk_shape(), plain_loader(), clean_release())
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path)

    chalk = install(npm_client, proxy, {"colour-kit": "^5.6.0"})
    assert "E403" in chalk.stderr, chalk.stderr
    assert RULE in chalk.stderr
    evidence = refused(npm_client, proxy, "plain-loader")
    assert any(item.startswith("lib/table.js: obfuscator-style `_0x` identifiers")
               for item in evidence)
    assert any(item.startswith("index.js: eval or Function over a decoded string")
               for item in evidence)

    clean = install(npm_client, proxy, {"clean-kit": "^1.0.0"})
    assert clean.returncode == 0, clean.stderr
    assert npm_client.installed()["clean-kit"] == "1.0.1"
    assert not [event for event in proxy.events("release_signal_refused")
                if event["package"] == "clean-kit"]
    [checked] = [event for event in proxy.events("release_checked")
                 if event["package"] == "clean-kit"]
    assert checked["outcome"] == "clean"
