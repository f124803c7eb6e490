"""What a release's code can do, on the default policy: each incident shape of 2018-2026,
rebuilt on a real predecessor's files (tests/npm/fixtures/releases), is refused through the
real npm client, a real `mirrorgate serve` with no rules file and Verdaccio as the private
registry, and a clean release of the same kind beside it is admitted
(docs/serving.md#what-a-releases-code-can-do).

Every version is two days old: past the default one-day cooldown (a compromise found after a
day, or never), inside the week a quarantine holds. No payload runs: npm installs with scripts
off, and their hosts are `.test` names.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_release_attacks import install, start
from tests.npm.test_capabilities import real
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import minified_bundle, obfuscated_blob
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, FixtureVersion, make_package, make_version
from tests.servers.payloads import (
    dll,
    dropper,
    flatmap_payload,
    interceptor,
    key_stealer,
    obfuscated_stage,
    own_walk,
    platform_runner,
    platform_script,
    protest_writer,
    rundll32_runner,
    stealer,
    telemetry,
    webhook_stealer,
    wiper,
    worm_bundle,
    worm_dropper,
)
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.verdaccio import Verdaccio

GAINED = "new-capability"
ALONE = "young-package-capability"


def _ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def _release(name: str, number: str, base: str, published: datetime,
             changed: dict[str, bytes] | None = None, **fields: Any) -> FixtureVersion:
    """A release of `name` made of the real release `base`'s files (its package.json's
    `main`, `exports` and `type` kept), `changed` over them."""
    files = real(base)
    manifest = json.loads(files.pop("package.json"))
    kept = {key: manifest[key] for key in ("main", "exports", "type", "imports")
            if key in manifest}
    return make_version(name, number, files={**files, **(changed or {})}, published=published,
                        **{**kept, **fields})


def _two(name: str, base: str, changed: dict[str, bytes], **fields: Any) -> FixturePackage:
    """`1.0.0`, the real release as it was (a year old), and `1.0.1` two days old with
    `changed`."""
    return make_package(name, [_release(name, "1.0.0", base, _ago(365)),
                               _release(name, "1.0.1", base, _ago(2), changed, **fields)])


def _appended(base: str, file: str, payload: bytes) -> dict[str, bytes]:
    return {file: real(base)[file] + payload}


def _imported(base: str, entry: str, file: str, code: bytes) -> dict[str, bytes]:
    """`file` added, and imported by the (ES module) entry file."""
    return {**_appended(base, entry, f"\nimport './{file.rsplit('/', 1)[-1]}';\n".encode()),
            file: code}


def _compile(name: str, base: str) -> FixturePackage:
    """coa 2.0.3 and rc 1.2.9 (November 2021, the same hands, the same day): a new preinstall,
    `start /B node compile.js & node compile.js`, runs an obfuscated compile.js that runs
    compile.bat, which downloads a DLL and registers it."""
    return _two(name, base, {"compile.js": obfuscated_blob("compile") + platform_runner("compile"),
                             "compile.bat": platform_script(windows=True)},
                scripts={"preinstall": "start /B node compile.js & node compile.js"})


def _built(name: str, base: str) -> FixturePackage:
    """Their twin: a new preinstall, `node compile.js`, building a file in its own folder."""
    build = (b"const fs = require('fs'), path = require('path');\n"
             b"fs.writeFileSync(path.join(__dirname, 'compiled.js'), 'module.exports = {};');\n")
    return _two(name, base, {"compile.js": build}, scripts={"preinstall": "node compile.js"})


NOTICE = b"console.log('thanks for installing: see the changelog for what is new');\n"

# (the refused shape, the clean release of the same kind beside it, the file its evidence names)
Shape = tuple[Callable[[str], FixturePackage], Callable[[str], FixturePackage], str]
SHAPES: dict[str, Shape] = {
    # a new postinstall running a 300 KB bundle that spawns and downloads; beside it, a new
    # postinstall running a 300 KB build bundle that does neither
    "shai-hulud-1": (
        lambda n: _two(n, "chalk-5.6.0", {"bundle.js": worm_bundle()},
                       scripts={"postinstall": "node bundle.js"}),
        lambda n: _two(n, "chalk-5.6.0", {"bundle.js": minified_bundle(300_000)},
                       scripts={"postinstall": "node bundle.js"}),
        "bundle.js"),
    # a new preinstall fetching a runtime and spawning it; beside it, one that prints a line
    "shai-hulud-2": (
        lambda n: _two(n, "chalk-5.6.0", {"setup_bun.js": worm_dropper()},
                       scripts={"preinstall": "node setup_bun.js"}),
        lambda n: _two(n, "chalk-5.6.0", {"setup.js": b"console.log('thanks for installing');\n"},
                       scripts={"preinstall": "node setup.js"}),
        "setup_bun.js"),
    # the obfuscated interceptor appended to the entry file; beside it, a new helper appended
    "chalk-debug": (
        lambda n: _two(n, "debug-4.4.1", _appended("debug-4.4.1", "src/index.js",
                                                   interceptor(n))),
        lambda n: _two(n, "debug-4.4.1", _appended(
            "debug-4.4.1", "src/index.js", b"\nmodule.exports.version = '1.0.1';\n")),
        "src/index.js"),
    # `~/.npmrc` and the environment posted from code that runs at load; beside it, one more
    # variable read by name
    "token-stealer": (
        lambda n: _two(n, "debug-4.4.1", _appended("debug-4.4.1", "src/node.js", stealer())),
        lambda n: _two(n, "debug-4.4.1", _appended(
            "debug-4.4.1", "src/node.js",
            b"\nexports.noColor = process.env.NO_COLOR !== undefined;\n")),
        "src/node.js"),
    # a payload decrypted with the package's description and compiled at require; beside it,
    # a hex table decoded as data
    "flatmap-stream": (
        lambda n: _two(n, "debug-4.4.1", _appended("debug-4.4.1", "src/index.js",
                                                   flatmap_payload())),
        lambda n: _two(n, "debug-4.4.1", _appended(
            "debug-4.4.1", "src/index.js",
            b"\nmodule.exports.table = Buffer.from('00ff10', 'hex');\n")),
        "src/index.js"),
    # node-ipc 10.1.1: its entry imports a new file overwriting every file under `../` and
    # more, each path hidden in base64; beside it, the same walk over its own folder
    "node-ipc": (
        lambda n: _two(n, "chalk-5.6.0", _imported("chalk-5.6.0", "source/index.js",
                                                   "source/ssl-geospec.js", wiper())),
        lambda n: _two(n, "chalk-5.6.0", _imported("chalk-5.6.0", "source/index.js",
                                                   "source/cache.js", own_walk())),
        "source/ssl-geospec.js"),
    # no install script: the stealer in `main` of an established package
    "payload-in-main": (
        lambda n: _two(n, "chalk-5.6.0", _appended("chalk-5.6.0", "source/index.js",
                                                   stealer())),
        lambda n: _two(n, "chalk-5.6.0", _appended(
            "chalk-5.6.0", "source/index.js", b"\nexport const level = 1;\n")),
        "source/index.js"),
    # @solana/web3.js 1.95.6: keys sent from a bundle that always reached the network, to a
    # host it never named; beside it, the same call to a host the bundle names
    "solana-web3": (
        lambda n: _two(n, "axios-1.7.9", _appended("axios-1.7.9", "dist/node/axios.cjs",
                                                   key_stealer())),
        lambda n: _two(n, "axios-1.7.9", _appended(
            "axios-1.7.9", "dist/node/axios.cjs",
            key_stealer("https://github.com/axios/axios/queue"))),
        "dist/node/axios.cjs"),
    # ua-parser-js 0.7.29 (October 2021): a new preinstall, `start /B node preinstall.js &
    # node preinstall.js`, whose preinstall.js runs the platform's preinstall.sh or .bat, which
    # download a miner (and a password stealer) and start it; beside it, a new preinstall,
    # `node preinstall.js`, printing a line
    "ua-parser-js": (
        lambda n: _two(n, "debug-4.4.1", {"preinstall.js": platform_runner("preinstall"),
                                          "preinstall.sh": platform_script(windows=False),
                                          "preinstall.bat": platform_script(windows=True)},
                       scripts={"preinstall": "start /B node preinstall.js & node preinstall.js"}),
        lambda n: _two(n, "debug-4.4.1", {"preinstall.js": NOTICE},
                       scripts={"preinstall": "node preinstall.js"}),
        "preinstall.js"),
    # coa and rc: the same shape on two predecessors; beside each, a preinstall that builds
    # in its own folder
    "coa": (lambda n: _compile(n, "colors-1.4.0"), lambda n: _built(n, "colors-1.4.0"),
            "compile.js"),
    "rc": (lambda n: _compile(n, "debug-4.4.1"), lambda n: _built(n, "debug-4.4.1"),
           "compile.js"),
    # nx 21.5.0 (August 2025, s1ngularity): a new postinstall, `node telemetry.js`, driving the
    # local AI command-line tools, reading the environment and `gh auth token`, writing the
    # inventory and posting it; beside it, a telemetry.js that reads one variable by name and
    # prints a line
    "nx": (
        lambda n: _two(n, "axios-1.7.9", {"telemetry.js": telemetry()},
                       scripts={"postinstall": "node telemetry.js"}),
        lambda n: _two(n, "axios-1.7.9", {"telemetry.js": (
            b"if (!process.env.NX_NO_CLOUD) console.log('try `nx connect`');\n")},
                       scripts={"postinstall": "node telemetry.js"}),
        "telemetry.js"),
    # eslint-config-prettier 10.1.6 (July 2025, Scavenger): a new install hook, `node
    # install.js`, running the node-gyp.dll shipped beside it through rundll32 on Windows;
    # beside it, an install.js that prints a line on Windows
    "eslint-config-prettier": (
        lambda n: _two(n, "colors-1.4.0", {"install.js": rundll32_runner(),
                                           "node-gyp.dll": dll("node-gyp.dll", 120_000)},
                       scripts={"install": "node install.js"}),
        lambda n: _two(n, "colors-1.4.0", {"install.js": (
            b"if (process.platform === 'win32') console.log('see the docs on line endings');\n")},
                       scripts={"install": "node install.js"}),
        "install.js"),
    # @rspack/core 1.1.7 (December 2024): a new postinstall, `node support.js`, downloading a
    # miner and running it; beside it, a support.js printing a line
    "rspack": (
        lambda n: _two(n, "chalk-5.6.0", {"support.js": dropper()},
                       scripts={"postinstall": "node support.js"}),
        lambda n: _two(n, "chalk-5.6.0", {"support.js": NOTICE},
                       scripts={"postinstall": "node support.js"}),
        "support.js"),
    # the Bitwarden CLI 2026.4.0 (April 2026): a new preinstall, `node bw_setup.js`, fetching
    # the Bun runtime to run bw1.js, 600 KB obfuscated; beside it, a bw_setup.js checking
    # node's version beside a 600 KB minified bw1.js
    "bitwarden-cli": (
        lambda n: _two(n, "debug-4.4.1", {"bw_setup.js": worm_dropper("bw1.js"),
                                          "bw1.js": obfuscated_stage("bw1", 600_000)},
                       scripts={"preinstall": "node bw_setup.js"}),
        lambda n: _two(n, "debug-4.4.1", {"bw_setup.js": (
            b"if (Number(process.versions.node.split('.')[0]) < 18) console.warn('node 18+');\n"),
                                          "bw1.js": minified_bundle(600_000)},
                       scripts={"preinstall": "node bw_setup.js"}),
        "bw_setup.js"),
    # SAP CAP's @cap-js/sqlite 2.2.2 (April 2026): the same loader as an ES module, `node
    # setup.mjs`, over execution.js; beside it, a setup.mjs printing a line
    "sap-cap": (
        lambda n: _two(n, "chalk-5.6.0", {"setup.mjs": worm_dropper("execution.js", esm=True),
                                          "execution.js": obfuscated_stage("execution", 600_000)},
                       scripts={"preinstall": "node setup.mjs"}),
        lambda n: _two(n, "chalk-5.6.0", {"setup.mjs": NOTICE,
                                          "execution.js": minified_bundle(600_000)},
                       scripts={"preinstall": "node setup.mjs"}),
        "setup.mjs"),
}


def refused(npm: NpmClient, proxy: MirrorgateProcess, verdaccio: Verdaccio, name: str,
            rule: str, compared_with: str | None, version: str = "1.0.1") -> dict[str, Any]:
    """Install `name@^1.0.0`: E403 naming `rule`, `version` never mirrored. The refusal's
    log line."""
    first = install(npm, proxy, {name: "^1.0.0"})
    assert first.returncode != 0, first.stdout
    assert "E403" in first.stderr, first.stderr
    assert rule in first.stderr
    [refusal] = [event for event in proxy.events("release_signal_refused")
                 if event["package"] == name]
    assert (refusal["version"], refusal["rule"], refusal["security"]) == (version, rule, True)
    assert refusal["compared_with"] == compared_with
    assert "quarantined until " in refusal["reason"]
    assert version not in verdaccio.versions(name)
    return refusal


def admitted(npm: NpmClient, proxy: MirrorgateProcess, verdaccio: Verdaccio, name: str,
             version: str) -> subprocess.CompletedProcess[str]:
    answer = install(npm, proxy, {name: "^1.0.0"})
    assert answer.returncode == 0, answer.stderr
    assert npm.installed()[name] == version
    wait_for(lambda: version in verdaccio.versions(name), timeout=60,
             message=f"the worker to mirror {name}@{version}")
    return answer


def refused_beside_a_twin(shape: str, bad: Callable[[str], FixturePackage],
                          good: Callable[[str], FixturePackage], public_registry: FixtureRegistry,
                          verdaccio: Verdaccio, npm_client: NpmClient,
                          mirrorgate: MirrorgateFactory, tmp_path: Path) -> list[str]:
    """`bad` refused on the default policy, `good` (its twin) admitted beside it, and the
    next install of the same range resolving to the release before `bad`: the refusal's
    evidence."""
    name = f"{shape}-host"
    public_registry.add(bad(name), good(f"{shape}-twin"))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, name, GAINED, "1.0.0")
    admitted(npm_client, proxy, verdaccio, f"{shape}-twin", "1.0.1")
    admitted(npm_client, proxy, verdaccio, name, "1.0.0")
    evidence: list[str] = refusal["evidence"]
    return evidence


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_incident_shape_is_refused_by_default_and_a_clean_release_beside_it_admitted(
    shape: str, public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    bad, good, file = SHAPES[shape]

    evidence = refused_beside_a_twin(shape, bad, good, public_registry, verdaccio, npm_client,
                                     mirrorgate, tmp_path)

    assert any(f"{file}:" in item for item in evidence), evidence
    assert evidence[-1].startswith("1.0.0 could use at install: ")


def test_the_sleeper_a_month_old_packages_new_postinstall_that_downloads_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # first published 40 days ago, quiet since; its 2-day-old release adds a postinstall
    # running a real download-and-run script (esbuild 0.24.0's install.js). Beside it, a
    # package of the same age whose new postinstall builds inside its own folder.
    esbuild = real("esbuild-0.24.0")
    build = b"require('fs').writeFileSync(require('path').join(__dirname, 'built.txt'), 'ok');\n"
    for name, script in (("sleeper", esbuild["install.js"]), ("sleeper-twin", build)):
        public_registry.add(make_package(name, [
            _release(name, "1.0.0", "chalk-5.6.0", _ago(40)),
            _release(name, "1.0.1", "chalk-5.6.0", _ago(2), {"install.js": script},
                     scripts={"postinstall": "node install.js"})]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, "sleeper", GAINED, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "sleeper-twin", "1.0.1")

    assert any(item.startswith("install-time code gains network") and "install.js:" in item
               for item in refusal["evidence"])


def _added_dependency(name: str, dependency: str, script: bytes | None) -> list[FixturePackage]:
    """axios 1.14.1's shape (March 2026): `name` 1.0.0 a year old with no dependencies, 1.0.1
    two days old adding `dependency@^4.2.1`, a package first published three days ago (4.2.0,
    crypto code, here debug 4.4.1's) whose 4.2.1 a day later runs `script` at postinstall
    (none: a plain release)."""
    fields: dict[str, Any] = ({} if script is None
                              else {"scripts": {"postinstall": "node setup.js"}})
    return [
        make_package(name, [_release(name, "1.0.0", "axios-1.7.9", _ago(365)),
                            _release(name, "1.0.1", "axios-1.7.9", _ago(2),
                                     dependencies={dependency: "^4.2.1"})]),
        make_package(dependency, [
            _release(dependency, "4.2.0", "debug-4.4.1", _ago(3)),
            _release(dependency, "4.2.1", "debug-4.4.1", _ago(2),
                     {} if script is None else {"setup.js": script}, **fields)])]


def test_a_new_young_dependency_whose_postinstall_is_a_dropper_fails_the_install(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # axios 1.14.1: the release itself changes no code but adds `plain-crypto-js`, whose
    # 4.2.1 runs a dropper at postinstall (fetch the platform's remote-access tool, run it,
    # delete itself). The refusal falls on the young dependency's own release, which gains
    # the network and processes at install over its clean 4.2.0 (the decoy published the
    # day before), and the install fails. Beside it, a release adding a young dependency
    # whose 4.2.1 is a plain library installs, with its new dependency
    public_registry.add(*_added_dependency("axios-host", "plain-crypto-js", dropper()),
                        *_added_dependency("axios-twin", "clean-crypto-js", None))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    failed = install(npm_client, proxy, {"axios-host": "^1.0.0"})
    assert failed.returncode != 0, failed.stdout
    assert "E403" in failed.stderr, failed.stderr
    [refusal] = proxy.events("release_signal_refused")
    assert (refusal["package"], refusal["version"], refusal["rule"]) == (
        "plain-crypto-js", "4.2.1", GAINED)
    assert refusal["compared_with"] == "4.2.0"
    assert any(item.startswith("install-time code gains network") and "setup.js:" in item
               for item in refusal["evidence"]), refusal["evidence"]
    assert "4.2.1" not in verdaccio.versions("plain-crypto-js")

    admitted(npm_client, proxy, verdaccio, "axios-twin", "1.0.1")
    assert npm_client.installed()["clean-crypto-js"] == "4.2.1"


def test_a_young_packages_first_release_whose_main_sends_the_environment_is_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # a new package, no install script: its main reads `~/.npmrc` and the environment and
    # posts them. Nothing to compare with: judged by what its code can do. Beside it, a new
    # package whose main is a real library that reaches the network (axios 1.7.9's bundle)
    public_registry.add(
        make_package("fresh-stealer", [make_version(
            "fresh-stealer", "1.0.0", files={"index.js": stealer()}, published=_ago(2))]),
        make_package("fresh-client", [_release("fresh-client", "1.0.0", "axios-1.7.9",
                                               _ago(2), main="dist/node/axios.cjs")]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, "fresh-stealer", ALONE, None, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "fresh-client", "1.0.0")

    assert "the package was first published " in refusal["reason"]
    assert any(item.startswith("load-time code can use, together, network")
               for item in refusal["evidence"])


def test_young_packages_first_releases_that_post_tokens_or_write_into_the_desktop_are_refused(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # an0n-chat-lib 0.1.0: its main reads the browsers' Discord tokens and posts them with
    # discord.js's WebhookClient, nothing at install; peacenotwar 9.1.1: its ES module writes
    # into the Desktop and OneDrive folders at load. Beside them, first releases of the same
    # kinds: a discord.js bot that reads nothing outside, and a scaffolder whose bin writes
    # into the project it is run in
    bot = (b"const { Client } = require('discord.js');\n"
           b"module.exports = (token) => new Client({ intents: [] }).login(token);\n")
    scaffold = (b"#!/usr/bin/env node\nconst fs = require('fs'), path = require('path');\n"
                b"fs.writeFileSync(path.join(process.cwd(), 'index.js'), '');\n")
    public_registry.add(
        make_package("chat-kit", [make_version(
            "chat-kit", "1.0.0", files={"build/stealer.js": webhook_stealer()},
            main="build/stealer.js", published=_ago(2))]),
        make_package("peace-kit", [make_version(
            "peace-kit", "1.0.0", files={"index.js": protest_writer()}, type="module",
            published=_ago(2))]),
        make_package("chat-bot", [make_version(
            "chat-bot", "1.0.0", files={"index.js": bot}, published=_ago(2))]),
        make_package("scaffold-kit", [make_version(
            "scaffold-kit", "1.0.0", files={"index.js": b"module.exports = {};\n",
                                            "cli.js": scaffold},
            bin={"scaffold-kit": "cli.js"}, published=_ago(2))]))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    stolen = refused(npm_client, proxy, verdaccio, "chat-kit", ALONE, None, "1.0.0")
    written = refused(npm_client, proxy, verdaccio, "peace-kit", ALONE, None, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "chat-bot", "1.0.0")
    admitted(npm_client, proxy, verdaccio, "scaffold-kit", "1.0.0")

    assert any(item.startswith("load-time code can use, together, network")
               and "discord.js" in item for item in stolen["evidence"])
    assert any(item.startswith("load-time code can use writes-home") and "index.js:9" in item
               for item in written["evidence"])


# --- sabotage: a maintainer's release that takes from its users, gaining no capability ------

LIBERTY = (b"\nconst am = require('./custom/american');\n"
           b"for (let i = 666; i < Infinity; i++) {\n"
           b"  console.log(am('LIBERTY LIBERTY LIBERTY'));\n}\n")


def _emptied(name: str, kept: dict[str, bytes], **fields: Any) -> FixturePackage:
    """`1.0.0`, faker 5.5.3's entry as it was (a year old), and `1.0.1` two days old holding
    only `kept` besides its package.json (faker 6.6.6: every file of the library removed)."""
    return make_package(name, [
        _release(name, "1.0.0", "faker-5.5.3", _ago(365)),
        make_version(name, "1.0.1", files=kept, published=_ago(2), **fields)])


# (the refused shape, the clean release of the same kind beside it, what its evidence says)
SABOTAGE: dict[str, Shape] = {
    # colors 1.4.44-liberty-2: a loop with no way out appended to the entry, so `require`
    # never returns; beside it, a bounded loop appended
    "colors": (
        lambda n: _two(n, "colors-1.4.0", {
            **_appended("colors-1.4.0", "lib/index.js", LIBERTY),
            "lib/custom/american.js": b"module.exports = function (t) { return t; };\n"}),
        lambda n: _two(n, "colors-1.4.0", _appended(
            "colors-1.4.0", "lib/index.js",
            b"\nfor (let i = 0; i < 3; i++) { colors.enable(); }\n")),
        "load-time code gains endless-loop (never finishes loading (a loop at module scope "
        "with no way out)): lib/index.js:16 `for (let i = 666; i < Infinity; i++)"),
    # faker 6.6.6 as published: `main` still names `index.js`, which it no longer ships;
    # beside it, a release moving its entry to a file it ships
    "faker": (
        lambda n: _emptied(n, {"Readme.md": b"# What really happened with Aaron Swartz?\n"}),
        lambda n: _emptied(n, {"main.js": real("faker-5.5.3")["index.js"]}, main="main.js"),
        "index.js `named by main, exports or bin, not shipped`; the release before loaded index.js "
        "(196 bytes of code)"),
    # faker's rebuilt shape: an `index.js` of one comment; beside it, a one-line entry
    "faker-endgame": (
        lambda n: _emptied(n, {"index.js": b"// endgame\n"}),
        lambda n: _emptied(n, {"index.js": b"module.exports = require('./lib');\n",
                               "lib/index.js": real("faker-5.5.3")["lib/index.js"]}),
        "index.js `comments only, no code`"),
}


@pytest.mark.parametrize("shape", sorted(SABOTAGE))
def test_a_sabotage_release_is_refused_by_default_and_a_clean_release_beside_it_admitted(
    shape: str, public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    bad, good, said = SABOTAGE[shape]

    evidence = refused_beside_a_twin(shape, bad, good, public_registry, verdaccio, npm_client,
                                     mirrorgate, tmp_path)

    assert any(said in item for item in evidence), evidence


def _hook_in_registry_only(name: str, script: bytes) -> FixturePackage:
    """`1.0.0`, real chalk, and `1.0.1` whose registry manifest runs `node lib/setup.js` at
    postinstall while its tarball's package.json runs nothing: npm and yarn differ in which
    they run, so both count."""
    release = _release(name, "1.0.1", "chalk-5.6.0", _ago(2), {"lib/setup.js": script},
                       scripts={"postinstall": "node lib/setup.js"})
    own = {key: value for key, value in release.manifest.items() if key != "scripts"}
    release = dataclasses.replace(release, files={**release.files,
                                                  "package.json": json.dumps(own).encode()})
    return make_package(name, [_release(name, "1.0.0", "chalk-5.6.0", _ago(365)), release])


def test_a_file_only_the_registry_manifests_hook_runs_is_read_where_it_runs(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the default reading reads only the files that run, which the tarball's package.json
    # alone does not say: a dropper only the registry manifest's postinstall runs is read
    # (its line in the evidence, not "not read"), and the same hook over a file that prints
    # a line is admitted beside it (were the hook's file not read, it would be refused too)
    public_registry.add(
        _hook_in_registry_only("registry-hook", worm_dropper()),
        _hook_in_registry_only("registry-hook-twin", b"console.log('thanks for installing');\n"))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, "registry-hook", GAINED, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "registry-hook-twin", "1.0.1")
    evidence: list[str] = refusal["evidence"]
    assert any("lib/setup.js:" in item for item in evidence), evidence
