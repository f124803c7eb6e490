"""`mirrorgate prewarm`'s core: every admitted locked version mirrored before anyone installs it.

Real parts throughout: the fixture public registry, the embedded file store or a real
Verdaccio as the private registry, the configured queue and the real worker. What is asserted
is what the private registry holds afterwards, not only what prewarm says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from mirrorgate.commands.parts import open_command_queue, open_parts
from mirrorgate.commands.prewarm import Outcome, follow_target, follow_worker, merge, plan
from mirrorgate.npm.mirrormark import read_mark
from mirrorgate.process import CommandMirroring
from tests.commands.mirrored import by_label, prewarm_with_the_worker, published_tree, settings_for
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.verdaccio import Verdaccio


async def test_with_the_memory_queue_prewarm_runs_the_worker_and_the_store_holds_every_version(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path)
    assert settings.queue.provider == "memory"

    results = await prewarm_with_the_worker(settings, list(tree.resolved.items()))

    assert {r.label: r.outcome for r in results} == {
        f"{name}@{version}": Outcome.PUBLISHED for name, version in tree.resolved.items()}
    store = tmp_path / "store"
    for name, version in tree.resolved.items():
        manifest: dict[str, Any] = orjson.loads(
            (store / name / "versions" / f"{version}.json").read_bytes())
        mark = read_mark(manifest)
        assert mark is not None
        assert mark.integrity == manifest["dist"]["integrity"]
        assert public_registry.package(name).version(version).integrity == mark.integrity
        bare = name.rsplit("/", 1)[-1]
        tarball = (store / name / "tarballs" / f"{bare}-{version}.tgz").read_bytes()
        assert tarball == public_registry.package(name).version(version).tarball

    again = await prewarm_with_the_worker(settings, list(tree.resolved.items()))
    assert {r.outcome for r in again} == {Outcome.ALREADY_PRESENT}


async def test_a_denied_version_is_refused_with_its_reason_and_never_enqueued(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    published_tree(public_registry)
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\npackages = ["gamma@3.1.0"]\n', encoding="utf-8")
    settings = settings_for(public_registry, tmp_path / "data",
                            MIRRORGATE_RULES_FILE=str(rules))
    locked = [("gamma", "3.1.0"), ("zeta", "1.0.1"), ("zeta", "9.9.9"), ("no-such-pkg", "1.0.0")]

    async with open_parts(settings, mirroring=CommandMirroring) as parts, \
            open_command_queue(settings) as queue:
        planned = await plan(locked, source=parts.source, queue=queue)
        assert [job.label for job in planned.jobs] == ["zeta@1.0.1"]
        followed = await follow_worker(planned.jobs, queue, parts.mirroring(), within=30)
    results = by_label(merge(planned, followed))

    assert results["gamma@3.1.0"].outcome is Outcome.REFUSED
    assert "deny" in results["gamma@3.1.0"].detail
    assert results["zeta@1.0.1"].outcome is Outcome.PUBLISHED
    assert results["zeta@9.9.9"].outcome is Outcome.NOT_FOUND
    assert results["no-such-pkg@1.0.0"].outcome is Outcome.NOT_FOUND
    assert not (tmp_path / "data" / "store" / "gamma").exists()


async def test_bytes_tampered_on_the_public_side_are_refused_by_the_worker_prewarm_runs(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    """The attack: public serves other bytes than the integrity its packument publishes. The
    worker prewarm runs verifies them as it downloads them, before the default's capability
    signals read them (they read those very bytes, never a download of their own): tampering,
    said as such; nothing reaches the store."""
    tree = published_tree(public_registry)
    delta = public_registry.package("delta")
    public_registry.add(delta.with_version(delta.version("0.4.2").with_dist(
        integrity=tree.packages[0].version("1.0.0").integrity)))
    settings = settings_for(public_registry, tmp_path)

    results = by_label(await prewarm_with_the_worker(settings, [("delta", "0.4.2")]))

    assert results["delta@0.4.2"].outcome is Outcome.REFUSED
    assert "did not match the admitted digest" in results["delta@0.4.2"].detail
    assert not (tmp_path / "store" / "delta" / "versions").exists()


async def test_with_a_registry_target_wait_sees_each_version_arrive(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    """`--wait` with a queue another process drains: followed by watching Verdaccio gain
    each version with its admitted bytes (here a worker on the same queue stands in for
    the sidecar, started only after prewarm has enqueued everything)."""
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path, MIRRORGATE_PRIVATE_UPSTREAM=verdaccio.url,
                            MIRRORGATE_PRIVATE_TOKEN=verdaccio.token)
    locked = list(tree.resolved.items())
    async with open_parts(settings, mirroring=CommandMirroring) as parts, \
            open_command_queue(settings) as queue:
        planned = await plan(locked, source=parts.source, queue=queue)
        assert len(planned.jobs) == len(locked)
        nothing_yet = await follow_target(planned.jobs, parts.mirroring(), within=0)
        assert {r.outcome for r in nothing_yet} == {Outcome.PENDING}
        await follow_worker(planned.jobs, queue, parts.mirroring(), within=30)
        seen = await follow_target(planned.jobs, parts.mirroring(), within=10, poll=0.2)
    assert {r.label: r.outcome for r in seen} == {
        f"{name}@{version}": Outcome.PUBLISHED for name, version in locked}
    for name, version in locked:
        assert version in verdaccio.versions(name)
