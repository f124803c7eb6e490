"""`mirrorgate prewarm` as an operator runs it: the real command, a lockfile the real npm wrote,
real Verdaccio, and the install that must then work without the public registry.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from tests.commands.mirrored import locked_by_npm, published_tree, run_command
from tests.e2e.sidecar import registry_environment
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.sqs_server import SqsServer, sqs_environment
from tests.servers.verdaccio import Verdaccio

JOB_KEY = "prewarm-test-key-0123456789abcdef0123456789"


def test_prewarm_fills_verdaccio_and_npm_ci_then_works_with_the_public_registry_stopped(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    env = registry_environment(public_registry, verdaccio)

    done = run_command(["prewarm", str(lockfile), "--json"], env, tmp_path)

    assert done.returncode == 0, done.stderr
    report = done.json()
    assert report["command"] == "prewarm"
    assert report["exit_code"] == 0
    assert report["summary"] == {"published": len(tree.resolved)}
    assert done.statuses() == {f"{n}@{v}": "published" for n, v in tree.resolved.items()}
    assert all(r["where"].startswith(f"{lockfile}:") for r in report["results"])
    for name, version in tree.resolved.items():
        assert version in verdaccio.versions(name)

    public_registry.stop()
    proxy = mirrorgate("serve", env)
    npm_client.clear_cache()
    shutil.rmtree(npm_client.project / "node_modules")
    installed = npm_client.ci(registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == tree.resolved

    again = run_command(["prewarm", str(lockfile), "--json"],
                        {**env, "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.json()["summary"] == {"already_present": len(tree.resolved)}


def test_prewarm_on_sqs_signs_its_jobs_and_wait_sees_the_sidecar_worker_publish_them(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, sqs_server: SqsServer, tmp_path: Path,
) -> None:
    """The worker holds the job key, so it retires any unsigned job before a request leaves:
    every version published proves prewarm signed what it enqueued."""
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    queue = asyncio.run(sqs_server.create_queue(visibility=10))
    env = {**registry_environment(public_registry, verdaccio),
           **sqs_environment(sqs_server, queue.url), "MIRRORGATE_JOB_KEY": JOB_KEY}
    mirrorgate("worker", env)

    done = run_command(["prewarm", str(lockfile), "--wait", "--timeout", "60", "--json"],
                       env, tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.statuses() == {f"{n}@{v}": "published" for n, v in tree.resolved.items()}
    assert JOB_KEY not in done.stdout + done.stderr
    for name, version in tree.resolved.items():
        assert version in verdaccio.versions(name)


def test_without_wait_a_network_queue_is_only_handed_the_jobs_and_the_exit_is_0(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    sqs_server: SqsServer, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    queue = asyncio.run(sqs_server.create_queue(visibility=10))
    env = {**registry_environment(public_registry, verdaccio),
           **sqs_environment(sqs_server, queue.url)}

    done = run_command(["prewarm", str(lockfile)], env, tmp_path)

    assert done.returncode == 0, done.stderr
    assert f"enqueued  {len(tree.resolved)}" in done.stdout
    assert "prewarm: 0 finding(s)" in done.stdout
    assert verdaccio.versions("zeta") == []  # nobody ran a worker
