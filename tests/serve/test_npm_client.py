"""The real npm client through the proxy: a whole tree installs, a denied version is an E403.

npm runs as a subprocess started with `asyncio.create_subprocess_exec`, so the event loop that
serves the in-process proxy keeps running while npm waits on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mirrorgate.rules import parse_rules
from tests.serve.rig import SharedPrivate, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import install_script_version, make_package, standard_tree


@dataclass(frozen=True)
class NpmRun:
    code: int
    stdout: str
    stderr: str


NPM_RUN_LIMIT = 120.0
"""Seconds an npm run may take before it is killed and the test fails."""


async def npm(client: NpmClient, *args: str, registry: str) -> NpmRun:
    process = await asyncio.create_subprocess_exec(
        *client.argv(args, registry=registry), cwd=client.project,
        env=client.environment(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(NPM_RUN_LIMIT):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return NpmRun(process.returncode, stdout.decode(), stderr.decode())


async def test_npm_installs_a_six_package_tree_through_the_proxy_with_a_fresh_cache(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    zeta = next(package for package in tree.packages if package.name == "zeta")
    private_registry.publish_package(zeta)
    proxy = await start_proxy(public_registry.url)
    npm_client.write_project(tree.dependencies)

    run = await npm(npm_client, "install", registry=proxy.registry)

    assert run.code == 0, run.stderr
    assert npm_client.installed() == tree.resolved
    lock = npm_client.lockfile()["packages"]
    assert lock["node_modules/@fixture/beta"]["resolved"] == (
        f"{proxy.registry}@fixture/beta/-/beta-2.1.3.tgz")
    assert lock["node_modules/alpha"]["integrity"] == next(
        p for p in tree.packages if p.name == "alpha").version("1.2.0").integrity
    mirrored = sorted(f"{job.name}@{job.version}" for job in await proxy.jobs())
    assert mirrored == sorted(f"{name}@{version}" for name, version in tree.resolved.items()
                              if name != "zeta")
    assert not any(seen.path.startswith("/zeta/-/") for seen in public_registry.requests)


async def test_npm_reports_e403_with_the_reason_for_a_version_the_rules_denied(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("scripted", [
        "1.0.0", install_script_version("scripted", "1.1.0")]))
    rules = parse_rules("[install_scripts]\nblock = true\n", "rules.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)
    npm_client.write_project({})

    denied = await npm(npm_client, "install", "scripted@1.1.0", registry=proxy.registry)
    ranged = await npm(npm_client, "install", "scripted@^1.0.0", registry=proxy.registry)

    assert denied.code != 0
    assert "E403" in denied.stderr
    assert "Could not download scripted@1.1.0 due to policy violations" in denied.stderr
    assert "1.1.0 denied by install-scripts" in denied.stderr
    assert "ETARGET" not in denied.stderr
    assert ranged.code == 0, ranged.stderr
    assert npm_client.installed() == {"scripted": "1.0.0"}
