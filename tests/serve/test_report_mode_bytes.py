"""Report mode reaches every read of a version's bytes, as it reaches the packument rules.

The failure this stops: an operator rolls `[install_scripts] block = true` out in report mode
to see what it would refuse, and the rule refuses all the same from the tarball's bytes: real
installs break (`npm install` of a package whose tarball the scan cannot read, or whose
`postinstall` the registry's manifest lists, cut mid-stream), and the reason calls a script
the manifest declares "manifest confusion". In report mode the version is served whole, and
what the rule would have refused is said: a `version_would_deny` line, the metric under
`mode="report"`, the status page's would-deny list. Enforce mode is unchanged
(tests/serve/test_manifest_confusion.py).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mirrorgate.rules import Rules, parse_rules
from mirrorgate.serve.ui.page import esc
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.package_managers import client
from tests.servers.packages import (
    FixturePackage,
    FixtureVersion,
    build_tarball,
    make_package,
    make_version,
    tarball_path,
)

FILE_MODE = parse_rules('mode = "report"\n\n[install_scripts]\nblock = true\n', "rules.toml")
TABLE_MODE = parse_rules('[install_scripts]\nblock = true\nmode = "report"\n', "rules.toml")
ENFORCE = parse_rules("[install_scripts]\nblock = true\n", "rules.toml")
BUNDLE = b"".join(b"var a%d = %d;\n" % (i, i * 7919) for i in range(20_000))


def hidden(name: str) -> FixturePackage:
    """The registry's manifest shows no scripts; the tarball's package.json has a postinstall."""
    inner = {"name": name, "version": "1.0.0", "scripts": {"postinstall": "node setup.js"}}
    tarball = build_tarball({"package.json": json.dumps(inner).encode(),
                             "setup.js": b"console.log('hi')\n", "dist/bundle.js": BUNDLE})
    return make_package(name, [make_version(name, "1.0.0", tarball=tarball)])


def declared(name: str) -> FixturePackage:
    """core-js@2.6.12's shape: the registry's manifest and the tarball's package.json both
    list the postinstall (a banner), as npm publishes them."""
    scripts = {"postinstall": "node -e \"try{require('./postinstall')}catch(e){}\""}
    inner = {"name": name, "version": "2.6.12", "scripts": scripts}
    tarball = build_tarball({"package.json": json.dumps(inner).encode(),
                             "postinstall.js": b"console.log('thank you')\n",
                             "library/fn/array.js": BUNDLE})
    return make_package(name, [make_version(name, "2.6.12", tarball=tarball, scripts=scripts)])


def unreadable(name: str) -> FixturePackage:
    """A tarball the scan cannot read (its gzip stream stops before its end): the digest the
    registry lists is of these very bytes."""
    whole = gzip.compress(json.dumps({"name": name, "version": "1.0.0"}).encode() + BUNDLE)
    return make_package(name, [make_version(name, "1.0.0", tarball=whole[:len(whole) // 2])])


def would_deny_lines(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == "version_would_deny"
            and line.get("where") == "tarball"]


def version_of(package: FixturePackage) -> FixtureVersion:
    [version] = package.versions.values()
    return version


@pytest.mark.parametrize("rules", [FILE_MODE, TABLE_MODE], ids=["the file's mode",
                                                                 "the table's mode"])
async def test_report_mode_serves_bytes_whose_own_package_json_runs_a_hidden_postinstall(
        rules: Rules, public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = hidden("hidden-report")
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=rules)
    path = "npm" + tarball_path(package.name, "1.0.0")

    with capture_logs() as logs:
        first = await proxy.get(path)
        again = await proxy.get(path)

    assert (first.status, first.body) == (200, version_of(package).tarball)
    assert (again.status, again.body) == (200, version_of(package).tarball)
    [line] = would_deny_lines(logs)  # said once: the same bytes are not read again
    assert line["rule"] == "install-scripts"
    assert "postinstall" in str(line["reason"])
    assert "as its registry manifest declares" not in str(line["reason"])  # confusion, this
    assert not [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts",
                        mode="report") == 1
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts",
                        mode="enforce") == 0
    page = (await proxy.get("ui/")).body.decode()
    assert "hidden-report@1.0.0" in page
    assert esc(f"install-scripts: {line['reason']}") in page
    assert len(await proxy.jobs()) == 1  # served whole, so mirrored as any admitted version


async def test_a_postinstall_the_registry_manifest_lists_is_not_called_manifest_confusion(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = declared("core-shape")
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=FILE_MODE)

    with capture_logs() as logs:
        listed = await proxy.get("npm/core-shape")
        served = await proxy.get("npm" + tarball_path(package.name, "2.6.12"))

    assert "2.6.12" in listed.json()["versions"]  # the manifest rule: a would-deny too
    assert (served.status, served.body) == (200, version_of(package).tarball)
    [line] = would_deny_lines(logs)
    assert line["reason"] == ("it runs code at install (postinstall), as its registry "
                              "manifest declares")
    assert all("does not show" not in str(entry.get("reason", "")) for entry in logs)


async def test_report_mode_serves_a_tarball_the_scan_cannot_read_and_says_why(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = unreadable("half-gzip")
    public_registry.add(package)
    path = "npm" + tarball_path(package.name, "1.0.0")
    enforcing = await start_proxy(public_registry.url, rules=ENFORCE)
    refused = await enforcing.get(path)
    reporting = await start_proxy(public_registry.url, rules=FILE_MODE)

    with capture_logs() as logs:
        served = await reporting.get(path)

    assert refused.status == 403  # enforce mode: unchanged, and now a 403, not a cut
    assert refused.json()["rule"] == "install-scripts"
    assert (served.status, served.body) == (200, version_of(package).tarball)
    said = {line["rule"]: line for line in would_deny_lines(logs)}
    assert "cannot be checked for install scripts" in str(said["install-scripts"]["reason"])
    # the default's release signals read every first pull (issue 55) and, in the file's
    # report mode, say theirs beside it: one line per rule
    assert sorted(said) == ["install-scripts", "unreadable-release", "young-package-capability"]
    assert len(would_deny_lines(logs)) == 3


async def test_npm_installs_in_report_mode_what_the_scan_would_refuse(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    public_registry.add(hidden("hidden-npm"), declared("declared-npm"))
    proxy = await start_proxy(public_registry.url, rules=FILE_MODE)
    npm = client("npm", tmp_path / "npm")
    npm.configure(proxy.registry)
    npm.write_project({"hidden-npm": "1.0.0", "declared-npm": "2.6.12"})

    done = await asyncio.to_thread(npm.install)

    assert done.returncode == 0, done.stderr
    assert npm.installed(["hidden-npm", "declared-npm"]) == {
        "hidden-npm": "1.0.0", "declared-npm": "2.6.12"}


async def test_release_unavailable_deny_in_report_mode_serves_the_version_and_says_so(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # the previous version cannot be fetched, so the release signals cannot finish; with
    # `unavailable = "deny"` that refuses in enforce mode, and is a would-deny in report mode
    public_registry.add(make_package("steady-lib", [make_version("steady-lib", "1.0.0"),
                                                    make_version("steady-lib", "1.0.1")]))
    public_registry.fault(tarball_path("steady-lib", "1.0.0"), Fault(status=503))
    rules = parse_rules('mode = "report"\n\n[age]\nminimum = "0"\n\n[release]\n'
                        'unavailable = "deny"\n', "rules.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)

    with capture_logs() as logs:
        served = await proxy.get("npm" + tarball_path("steady-lib", "1.0.1"))

    assert served.status == 200
    [line] = [entry for entry in logs if entry["event"] == "version_would_deny"]
    assert line["rule"] == "release-unchecked"
    assert "1.0.0's tarball could not be fetched" in str(line["reason"])
    assert proxy.metric("mirrorgate_rule_denials_total", rule="release-unchecked",
                        mode="report") == 1
    page = (await proxy.get("ui/")).body.decode()
    assert "release-unchecked: the release signals could not check it" in page


@pytest.mark.parametrize("rules", [
    FILE_MODE,
    parse_rules('mode = "report"\n\n[age]\nminimum = "0"\n\n[release]\n', "rules.toml"),
], ids=["install-scripts scan", "release signals"])
async def test_in_report_mode_nothing_is_held_until_the_last_byte(
        rules: Rules, public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # a rollout in report mode costs no time to first byte: only a verdict that may refuse
    # holds a tarball back (docs/serving.md#a-refusal-from-the-bytes)
    package = hidden("slow-report")
    public_registry.add(package)
    size = len(version_of(package).tarball)
    public_registry.fault(tarball_path(package.name, "1.0.0"),
                          Fault(chunk_size=size // 20 + 1, chunk_delay=0.25))  # 5 s in all
    proxy = await start_proxy(public_registry.url, rules=rules)
    loop = asyncio.get_running_loop()

    started = loop.time()
    async with proxy.session.get(proxy.url + "npm" + tarball_path(package.name, "1.0.0")) as got:
        first_byte = loop.time() - started
        body = await got.read()
    whole = loop.time() - started

    assert got.status == 200
    assert body == version_of(package).tarball
    assert first_byte < whole - 2.0  # the headers came while the upstream was still sending
