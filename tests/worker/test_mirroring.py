"""The worker mirrors admitted versions, exactly, into a real Verdaccio and into the file store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import LogCapture

from mirrorgate.npm.mirrormark import read_mark
from mirrorgate.npm.names import PackageName, parse_name
from mirrorgate.upstream.client import ABBREVIATED
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.registry import HttpRegistry, StoreRegistry
from mirrorgate.worker.target import MirrorTarget, PublishResult
from tests.e2e.sidecar import PublishGate
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixtureVersion, make_package, make_version
from tests.servers.verdaccio import Verdaccio
from tests.sri import sri
from tests.worker.rig import RigFactory, events, handled, job_from, with_target


def rich_package(name: str = "@acme/widget") -> list[FixtureVersion]:
    version = make_version(name, "1.4.2", {"left-pad": "^1.3.0", "@acme/core": "~2.0.0"},
                           bin={"widget": "bin/widget.js"}, engines={"node": ">=18"},
                           peerDependencies={"react": ">=17"},
                           optionalDependencies={"fsevents": "^2.3.0"},
                           files={"index.js": b"module.exports = 42;\n",
                                  "bin/widget.js": b"#!/usr/bin/env node\n"})
    return [version]


async def test_a_job_is_published_to_verdaccio_with_the_public_integrity_and_its_manifest(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    public_registry.add(make_package("@acme/widget", rich_package()))
    rig = await make_rig(target=verdaccio)
    job = job_from(public_registry, "@acme/widget", "1.4.2")
    await rig.queue.enqueue(job)

    assert await rig.handle_next() == "published"

    public_version = public_registry.packument("@acme/widget")["versions"]["1.4.2"]
    stored = verdaccio.packument("@acme/widget")
    assert stored is not None
    version = stored["versions"]["1.4.2"]
    assert version["dist"]["integrity"] == public_version["dist"]["integrity"]
    assert version["dist"]["shasum"] == public_version["dist"]["shasum"]
    for key in ("dependencies", "bin", "engines", "peerDependencies", "optionalDependencies"):
        assert version[key] == public_version[key], key
    assert stored["dist-tags"]["latest"] == "1.4.2"
    tarball = verdaccio.tarball("@acme/widget", "widget-1.4.2.tgz")
    assert tarball == public_registry.package("@acme/widget").version("1.4.2").tarball
    assert tarball is not None
    assert sri("sha512", tarball) == version["dist"]["integrity"]
    assert rig.outcomes("published") == 1
    assert await rig.queue.receive() == []  # acked: never comes back

    published = events(logs, "mirror_published")
    assert len(published) == 1
    assert published[0]["package"] == "@acme/widget"
    assert published[0]["version"] == "1.4.2"
    assert published[0]["message_id"]


async def test_a_job_is_written_to_the_file_store_with_the_public_integrity_and_its_manifest(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("@acme/widget", rich_package()))
    rig = await make_rig(target=tmp_path / "store")
    await rig.queue.enqueue(job_from(public_registry, "@acme/widget", "1.4.2"))

    assert await rig.handle_next() == "published"

    store = FileStore(tmp_path / "store")
    name = parse_name("@acme/widget")
    public_version = public_registry.packument("@acme/widget")["versions"]["1.4.2"]
    stored = await store.manifest(name, "1.4.2")
    assert stored is not None
    assert stored["dist"]["integrity"] == public_version["dist"]["integrity"]
    assert stored["dependencies"] == public_version["dependencies"]
    assert stored["bin"] == public_version["bin"]
    chunks = [chunk async for chunk in store.tarball_chunks(name, "widget-1.4.2.tgz")]
    assert b"".join(chunks) == public_registry.package("@acme/widget").version("1.4.2").tarball
    packument = await store.packument(name)
    assert packument is not None
    assert packument["dist-tags"]["latest"] == "1.4.2"


async def test_a_version_already_in_verdaccio_is_acked_without_fetching_the_tarball(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    verdaccio.publish(package.version("1.3.0").marked())  # mirrored earlier
    rig = await make_rig(target=verdaccio)
    public_registry.clear_requests()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "already_present"

    assert rig.tarball_gets() == []
    assert rig.outcomes("already_present") == 1
    assert events(logs, "mirror_already_present")[0]["fetched"] is False
    assert await rig.queue.receive() == []


async def test_a_version_already_in_the_file_store_is_acked_without_fetching_the_tarball(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    assert await rig.handle_next() == "published"
    public_registry.clear_requests()

    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    assert await rig.handle_next() == "already_present"
    assert rig.tarball_gets() == []


async def test_an_already_exists_answer_counts_once_the_stored_integrity_is_read_back(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    verdaccio.publish(package.version("1.3.0"))
    rig = await make_rig(target=verdaccio)
    target = rig.deps.target
    assert isinstance(target.registry, HttpRegistry)

    job = job_from(public_registry, "left-pad", "1.3.0")
    result = await target.publish(job, package.version("1.3.0").tarball)

    assert result is PublishResult.ALREADY_PRESENT


async def test_latest_never_moves_back_when_an_older_version_is_mirrored_after_a_newer_one(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    public_registry.add(make_package("alpha", ["1.0.0", "2.0.0", "2.1.0-rc.1", "3.0.0"]))
    rig = await make_rig(target=verdaccio)

    for version in ("2.0.0", "1.0.0", "2.1.0-rc.1"):
        await rig.queue.enqueue(job_from(public_registry, "alpha", version))
        assert await rig.handle_next() == "published"
        assert verdaccio.dist_tags("alpha")["latest"] == "2.0.0"

    await rig.queue.enqueue(job_from(public_registry, "alpha", "3.0.0"))
    assert await rig.handle_next() == "published"
    assert verdaccio.dist_tags("alpha")["latest"] == "3.0.0"
    assert verdaccio.versions("alpha") == ["1.0.0", "2.0.0", "2.1.0-rc.1", "3.0.0"]


async def test_a_verdaccio_on_its_default_legacy_tokens_is_mirrored_into_and_read_back_too(
        make_rig: RigFactory, public_registry: FixtureRegistry,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # The fixtures' Verdaccio signs JWTs (bcrypt per request is too slow to test with); a
    # Verdaccio left on its legacy tokens must still take the publish and the read-back.
    public_registry.add(make_package("legacy-token", ["1.0.0"]))
    with serving(Verdaccio(tmp_path_factory.mktemp("legacy"), tokens="legacy"),
                 "Verdaccio") as legacy:
        assert legacy.token.count(".") != 2, "a legacy token, not a JWT"
        rig = await make_rig(target=legacy)
        job = job_from(public_registry, "legacy-token", "1.0.0")
        await rig.queue.enqueue(job)
        assert await rig.handle_next() == "published"
        await rig.queue.enqueue(job)
        assert await rig.handle_next() == "already_present"  # the bytes read back and hashed
        served = legacy.download("legacy-token", "legacy-token-1.0.0.tgz")
    published = public_registry.package("legacy-token").version("1.0.0")
    assert sri("sha512", served) == published.integrity


async def test_the_mirror_mark_carries_publics_publish_time_never_the_jobs(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    # A queue writer could backdate a fresh release past every age gate; the worker takes the
    # time from the public packument it re-gates against.
    public_registry.add(make_package("backdated", ["1.0.0"]))
    public_time = public_registry.packument("backdated")["time"]["1.0.0"]
    rig = await make_rig(target=verdaccio)
    job = job_from(public_registry, "backdated", "1.0.0")
    await rig.queue.enqueue(dataclasses.replace(job, published="2001-01-01T00:00:00.000Z"))

    assert await rig.handle_next() == "published"

    stored = verdaccio.packument("backdated")
    assert stored is not None
    mark = read_mark(stored["versions"]["1.0.0"])
    assert mark is not None
    assert mark.published == public_time


class CountedStore(FileStore):
    """The real file store, counting how often a name's packument and a version's manifest
    are read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.packuments = 0
        self.manifests = 0

    def _read_packument(self, name: PackageName) -> dict[str, Any] | None:
        self.packuments += 1
        return super()._read_packument(name)

    async def manifest(self, name: PackageName, version: str) -> dict[str, Any] | None:
        self.manifests += 1
        return await super().manifest(name, version)


async def test_a_job_reads_the_file_stores_packument_once(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    # it was read for the first-party question, its version's manifest for "already held?",
    # and the whole packument again for dist-tags the store does not keep
    public_registry.add(make_package("read-once", ["1.0.0", "1.1.0"]))
    rig = await make_rig()
    store = CountedStore(tmp_path / "counted")
    worker = with_target(rig, MirrorTarget(StoreRegistry(store)))

    assert await handled(worker, job_from(public_registry, "read-once", "1.0.0")) == "published"
    assert (store.packuments, store.manifests) == (1, 0)
    assert await handled(worker, job_from(public_registry, "read-once", "1.1.0")) == "published"
    assert (store.packuments, store.manifests) == (2, 0)
    assert await handled(worker, job_from(public_registry, "read-once", "1.1.0")) \
        == "already_present"
    assert (store.packuments, store.manifests) == (3, 0)
    packument = await store.packument(parse_name("read-once"))
    assert packument is not None
    assert packument["dist-tags"] == {"latest": "1.1.0"}


async def test_a_job_reads_verdaccios_packument_once_and_its_tags_just_before_the_put(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio) -> None:
    # counted at the registry's door: the full packument once (first-party and "already
    # held?" were two reads), the abbreviated one for `latest` right before the publish
    public_registry.add(make_package("read-once", ["1.0.0", "2.0.0"]))
    with serving(PublishGate(verdaccio.url), "the publish gate") as door:
        rig = await make_rig(target=door.url, token=verdaccio.token)
        await rig.queue.enqueue(job_from(public_registry, "read-once", "2.0.0"))
        assert await rig.handle_next() == "published"
        first = door.seen
        await rig.queue.enqueue(job_from(public_registry, "read-once", "1.0.0"))
        assert await rig.handle_next() == "published"
        second = door.seen[len(first):]

    for seen in (first, second):
        assert [(method, accept) for method, path, accept in seen if path == "/read-once"] \
            == [("GET", "application/json"), ("GET", ABBREVIATED),
                ("PUT", "application/json")]
    assert verdaccio.dist_tags("read-once")["latest"] == "2.0.0"  # never moved back
