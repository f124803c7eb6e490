"""A mirrored version keeps its public publish time, with the public upstream up or down.

The private registry stamps the moment of mirroring into `time[version]`; served as is, every
mirrored version would look brand new, and an age gate (npm --before, yarn 4's default
`npmMinimalAgeGate`, mirrorgate's own minimum-age rule) would refuse it for a day. The job
carries the public time, the worker writes it into the mirror mark, the merge serves it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from mirrorgate.config import Secret
from mirrorgate.mirror import MirrorJob
from mirrorgate.npm.mirrormark import read_mark
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.registry import HttpRegistry, StoreRegistry
from mirrorgate.worker.target import MirrorTarget, PublishResult
from tests.serve.rig import FILE_STORE, RunningProxy, SharedPrivate, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package


@pytest.fixture
async def verdaccio_target(private_registry: SharedPrivate) -> AsyncIterator[MirrorTarget]:
    client = Upstream("private", private_registry.url, timeout=5, max_metadata_bytes=1 << 25,
                      token=Secret(private_registry.token))
    await client.start()
    yield MirrorTarget(HttpRegistry(client))
    await client.close()


async def served_times(proxy: RunningProxy, name: str) -> dict[str, str]:
    reply = await proxy.get(f"npm/{name}", Accept="application/json")
    assert reply.status == 200, reply.body[:300]
    times: dict[str, str] = orjson.loads(reply.body)["time"]
    return times


async def pull_and_mirror(proxy: RunningProxy, public: FixtureRegistry, target: MirrorTarget,
                          name: str, version: str) -> MirrorJob:
    """Pull a tarball through the proxy, then publish the job it enqueued, as the worker does."""
    assert (await proxy.get(f"npm/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz")).status == 200
    [job] = [job for job in await proxy.jobs() if job.version == version]
    tarball = public.package(name).version(version).tarball
    assert await target.publish(job, tarball) is PublishResult.PUBLISHED
    return job


async def test_a_version_mirrored_into_verdaccio_is_served_with_its_public_time(
        public_registry: FixtureRegistry, private_registry: SharedPrivate,
        verdaccio_target: MirrorTarget, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("@aged/verdaccio", ["1.0.0", "1.1.0"]))
    public_time = public_registry.packument("@aged/verdaccio")["time"]["1.0.0"]
    first = await start_proxy(public_registry.url, private=private_registry.url)

    job = await pull_and_mirror(first, public_registry, verdaccio_target,
                                "@aged/verdaccio", "1.0.0")

    assert job.published == public_time
    stored = private_registry.server.packument("@aged/verdaccio")
    assert stored is not None
    assert stored["time"]["1.0.0"] != public_time, "Verdaccio stamps its own publish moment"
    mark = read_mark(stored["versions"]["1.0.0"])
    assert mark is not None
    assert (mark.published, mark.integrity) == (public_time, job.artifact.digests[0].sri())
    again = await start_proxy(public_registry.url, private=private_registry.url)
    assert (await served_times(again, "@aged/verdaccio"))["1.0.0"] == public_time
    public_registry.stop()
    offline = await start_proxy(public_registry.url, private=private_registry.url)
    assert (await served_times(offline, "@aged/verdaccio"))["1.0.0"] == public_time


async def test_a_version_mirrored_into_the_file_store_is_served_with_its_public_time(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    public_registry.add(make_package("aged-store", ["1.0.0"]))
    public_time = public_registry.packument("aged-store")["time"]["1.0.0"]
    first = await start_proxy(public_registry.url, private=FILE_STORE)  # store-0
    target = MirrorTarget(StoreRegistry(FileStore(tmp_path / "store-0")))

    await pull_and_mirror(first, public_registry, target, "aged-store", "1.0.0")

    public_registry.stop()
    offline = await start_proxy(public_registry.url, private=f"file://{tmp_path / 'store-0'}")
    assert (await served_times(offline, "aged-store"))["1.0.0"] == public_time


async def test_a_first_party_version_keeps_the_private_registrys_own_time(
        public_registry: FixtureRegistry, private_registry: SharedPrivate,
        start_proxy: StartProxy) -> None:
    public_registry.add(make_package("first-party-time", ["1.0.0"]))
    ours = make_package("first-party-time", ["2.0.0"]).version("2.0.0")
    private_registry.publish(ours)
    stored = private_registry.server.packument("first-party-time")
    assert stored is not None
    proxy = await start_proxy(public_registry.url, private=private_registry.url)
    assert (await served_times(proxy, "first-party-time"))["2.0.0"] == stored["time"]["2.0.0"]


async def test_a_mark_on_a_public_manifest_never_sets_a_served_time(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # An impostor cannot make a fresh public release look old by forging a mark: only the
    # private registry's versions are read for one.
    package = make_package("forged-mark", ["1.0.0"])
    version = package.version("1.0.0")
    version.manifest["_mirrorgate"] = {"v": 1, "source": "public", "integrity": "sha512-x",
                                       "published": "2001-01-01T00:00:00.000Z"}
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)
    served = await served_times(proxy, "forged-mark")
    assert served["1.0.0"] == public_registry.packument("forged-mark")["time"]["1.0.0"]
