"""Tarballs reach the client byte for byte: the sha512 of what it received is the integrity
the version was published with, served from Verdaccio, from the file store and from a public
upstream that content-codes whatever it is asked.

The attack (or accident) stopped: a coded body relayed as the tarball, without its header.
Every client here asks as npm does (gzip accepted) and reads the raw body, so a proxy that
passed a coding on, with or without `Content-Encoding`, fails the hash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.upstream.filestore import FileStore
from tests.serve.rig import FILE_STORE, RunningProxy, SharedPrivate, StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry, Manners
from tests.servers.packages import FixtureVersion, make_package, make_version
from tests.servers.processes import Reply
from tests.sri import sri

SIZES = (1_500, 40_000, 3_000_000)
"""Just over the 1 KB where registries start to content-code, a common size, several MB."""



def versions(name: str) -> list[FixtureVersion]:
    return [make_version(name, f"1.0.{index}", size=size) for index, size in enumerate(SIZES)]


async def raw_tarball(proxy: RunningProxy, version: FixtureVersion) -> Reply:
    """The tarball as a client that accepts gzip receives it, before any decoding."""
    return await proxy.request("GET", f"npm/{version.name}/-/{version.filename}",
                               headers={"Accept-Encoding": "gzip, deflate, br"},
                               decompress=False)


def assert_stored_bytes(reply: Reply, version: FixtureVersion) -> None:
    assert reply.status == 200
    assert "Content-Encoding" not in reply.headers, "a tarball is never passed on coded"
    assert sri("sha512", reply.body) == version.integrity, f"{version.filename}: other bytes"
    assert reply.body == version.tarball


async def test_tarballs_from_verdaccio_arrive_byte_for_byte(
        public_registry: FixtureRegistry, private_registry: SharedPrivate,
        start_proxy: StartProxy) -> None:
    ours = versions("@bytes/verdaccio-held")
    for version in ours:
        private_registry.publish(version)
    proxy = await start_proxy(public_registry.url, private=private_registry.url)

    for version in ours:
        assert_stored_bytes(await raw_tarball(proxy, version), version)
    # the gate reads the packument first (public's too, until the name is known first-party);
    # no tarball is ever asked of public for a version the private side serves
    assert [seen.path for seen in public_registry.requests if "/-/" in seen.path] == []


async def test_tarballs_from_the_file_store_arrive_byte_for_byte(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    ours = versions("@bytes/store-held")
    store = FileStore(tmp_path / "store-0")  # the first proxy's private store
    name = parse_name("@bytes/store-held")
    for version in ours:
        manifest = version.document("http://127.0.0.1:9/")
        assert await store.put(name, version.version, version.filename, manifest,
                               version.tarball)
    proxy = await start_proxy(public_registry.url, private=FILE_STORE)

    for version in ours:
        assert_stored_bytes(await raw_tarball(proxy, version), version)
    assert [seen.path for seen in public_registry.requests if "/-/" in seen.path] == []


@pytest.mark.parametrize("manners", [
    Manners(gzip="always"),
    Manners(gzip="always", chunked=True, trickle=0.001, piece=64 * 1024),
], ids=["gzip", "gzip-chunked-trickling"])
async def test_tarballs_from_a_public_upstream_that_gzips_anyway_arrive_byte_for_byte(
        start_proxy: StartProxy, manners: Manners) -> None:
    package = make_package("coded-upstream", versions("coded-upstream"))
    with FixtureRegistry(package, manners=manners) as public:
        proxy = await start_proxy(public.url)
        for version in package.versions.values():
            assert_stored_bytes(await raw_tarball(proxy, version), version)
        assert {seen.headers.get("Accept-Encoding") for seen in public.requests
                if "/-/" in seen.path} == {"identity"}
    jobs = await proxy.jobs()
    assert sorted(job.version for job in jobs) == ["1.0.0", "1.0.1", "1.0.2"]
    sizes = {job.version: job.artifact.size for job in jobs}
    assert sizes == {version.version: len(version.tarball)  # never the coded length
                     for version in package.versions.values()}
    assert proxy.metric("mirrorgate_upstream_decoded_total", upstream="public",
                        coding="gzip") == len(SIZES)


async def test_a_private_tarball_in_a_coding_mirrorgate_cannot_decode_falls_back_to_public(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = make_package("brotli-private", versions("brotli-private")[:1])
    public_registry.add(package)
    # a mirrored copy (marked): public is its fallback; a first-party version would have none
    mirrored = make_package("brotli-private", [package.version("1.0.0").marked()])
    with FixtureRegistry(mirrored, manners=Manners(gzip="never")) as private:
        private.fault("/brotli-private/-/", Fault(body=b"\x8b\x02\x80not brotli\x03",
                                                   headers={"Content-Encoding": "br"}))
        proxy = await start_proxy(public_registry.url, private=private.url)
        reply = await raw_tarball(proxy, package.version("1.0.0"))
    assert_stored_bytes(reply, package.version("1.0.0"))
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="private",
                        reason="invalid") == 1

