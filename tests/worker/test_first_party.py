"""The worker and ownership: it never publishes a public version into a first-party name.

The attack: a job for the organisation's own name (enqueued by an older proxy, forged, or from
a public impostor) would put the impostor into the private registry, where it stays and
reaches everyone who reads that registry directly, and could move its `latest`.
"""

from __future__ import annotations

from pathlib import Path

from structlog.testing import LogCapture

from mirrorgate.npm.names import parse_name
from mirrorgate.npm.ownership import first_party_versions
from mirrorgate.rules import parse_rules
from mirrorgate.upstream.filestore import FileStore
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.verdaccio import Verdaccio
from tests.worker.rig import RigFactory, events, job_from


async def test_a_job_for_a_first_party_name_in_verdaccio_is_retired_and_nothing_moves(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    public_registry.add(make_package("acme-utils", ["0.0.1", "1.2.1", "99.0.0"]))
    verdaccio.publish(make_version("acme-utils", "1.2.0", description="ours"))
    rig = await make_rig(target=verdaccio)
    outcomes = []
    for impostor in ("0.0.1", "1.2.1", "99.0.0"):  # lower, in range, higher
        await rig.queue.enqueue(job_from(public_registry, "acme-utils", impostor))
        outcomes.append(await rig.handle_next())

    assert outcomes == ["retired"] * 3

    assert rig.retired("first-party") == 3
    assert verdaccio.versions("acme-utils") == ["1.2.0"]
    assert verdaccio.dist_tags("acme-utils") == {"latest": "1.2.0"}
    assert rig.tarball_gets() == []
    assert {line["reason"] for line in events(logs, "mirror_retired")} == {"first-party"}


async def test_a_job_for_a_first_party_name_in_the_file_store_is_retired(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("acme-store", ["2.0.0"]))
    ours = make_version("acme-store", "1.0.0")
    store = FileStore(tmp_path / "store")
    await store.put(parse_name("acme-store"), "1.0.0", ours.filename,
                    ours.document("http://127.0.0.1:9/"), ours.tarball)
    rig = await make_rig(target=tmp_path / "store")
    await rig.queue.enqueue(job_from(public_registry, "acme-store", "2.0.0"))

    assert await rig.handle_next() == "retired"
    assert rig.retired("first-party") == 1
    assert await store.manifest(parse_name("acme-store"), "2.0.0") is None


async def test_what_the_worker_mirrors_is_recognised_as_mirrored_so_new_versions_still_flow(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    # Depends on the worker writing the mirror mark (issue 11): without it, a mirrored name
    # would read as first-party and its next public version would be refused.
    public_registry.add(make_package("flows-on", ["1.0.0"]))
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "flows-on", "1.0.0"))
    assert await rig.handle_next() == "published"
    assert first_party_versions(verdaccio.packument("flows-on")) == []

    public_registry.add(make_package("flows-on", ["1.0.0", "1.1.0"]))
    await rig.queue.enqueue(job_from(public_registry, "flows-on", "1.1.0"))

    assert await rig.handle_next() == "published"
    assert verdaccio.versions("flows-on") == ["1.0.0", "1.1.0"]
    assert verdaccio.tarball("flows-on", "flows-on-1.1.0.tgz") is not None


async def test_a_job_for_a_name_the_rules_own_is_retired_before_public_is_asked(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    public_registry.add(make_package("@owned/impostor", ["9.9.9"]))
    job = job_from(public_registry, "@owned/impostor", "9.9.9")
    rig = await make_rig(target=verdaccio, rules=parse_rules('[private]\nnames = ["@owned/*"]'))
    public_registry.clear_requests()
    await rig.queue.enqueue(job)

    assert await rig.handle_next() == "retired"
    assert rig.retired("first-party") == 1
    assert public_registry.requests == []  # not even the re-gate's packument read
    assert verdaccio.versions("@owned/impostor") == []
