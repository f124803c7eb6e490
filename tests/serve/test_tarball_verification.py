"""Public tarballs are verified while they stream, and only a whole, matching pull is enqueued.

The attacks: a public upstream (or anything between it and the proxy) swapping the bytes of an
admitted version, which must never complete for any client, even one that checks no
integrity; and a client that asks and hangs up at once, which must not make the worker
download and publish a tarball nobody received.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest
from structlog.testing import capture_logs

from mirrorgate.rules import parse_rules
from mirrorgate.rules.releasetable import RELEASE_SIGNALS
from mirrorgate.serve import relayhash
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package

BIG = {"payload.bin": os.urandom(400_000)}
"""Incompressible, so the tarball spans several relayed chunks."""
LARGE = os.urandom(3_000_000)
STREAMED = parse_rules("[release]\n" + "".join(f'{signal.replace("-", "_")} = "off"\n'
                                               for signal in RELEASE_SIGNALS), "streamed.toml")
"""The release signals off: a first pull streams as it arrives (with the default's
capability signals a tarball under 16 MiB is withheld until its verdict, so a tampered one
is cut before its first byte: tests/serve/test_release_signals.py)."""


async def received_until_cut(url: str) -> tuple[int, bytes, BaseException | None]:
    """GET `url` reading chunk by chunk: the status, every byte that arrived, and the error
    that ended the transfer (None when it completed)."""
    got = bytearray()
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        try:
            async for chunk in response.content.iter_any():
                got.extend(chunk)
        except aiohttp.ClientPayloadError as error:
            return response.status, bytes(got), error
        return response.status, bytes(got), None


async def test_a_tampered_public_tarball_is_cut_before_its_last_chunk_and_never_enqueued(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("swapped", ["1.0.0"], files=BIG)
    public_registry.add(package)
    real = package.version("1.0.0").tarball
    evil = real[:-2000] + bytes(2000)  # same length, the end replaced
    public_registry.fault("/swapped/-/swapped-1.0.0.tgz", Fault(body=evil, chunk_size=65536))
    proxy = await start_proxy(public_registry.url, rules=STREAMED)

    with capture_logs() as logs:
        status, got, error = await received_until_cut(
            proxy.url + "npm/swapped/-/swapped-1.0.0.tgz")

    assert status == 200
    assert error is not None
    assert 0 < len(got) < len(evil)
    assert got == evil[:len(got)]
    (line,) = [entry for entry in logs if entry["event"] == "tarball_digest_mismatch"]
    assert line["security"] is True
    assert line["expected"] == package.version("1.0.0").integrity
    assert line["withheld"] == len(evil) - len(got)
    assert proxy.metric("mirrorgate_tampered_total") == 1
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="tampered") == 1
    assert await proxy.jobs() == []
    # and the status page's overview lists it among the recent tamper events
    assert [e.subject for e in proxy.metrics.events.latest("tampered")] == ["swapped@1.0.0"]


async def test_a_tampered_large_tarball_hashed_off_the_loop_is_still_cut_before_its_end(
    public_registry: FixtureRegistry, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3 MB: hashed in batches on a thread while the relay runs ahead (as on any machine with
    a second CPU, `relayhash`); the end still waits for the hash."""
    monkeypatch.setattr(relayhash, "_spare_cpu", lambda: True)
    package = make_package("swapped-large", ["1.0.0"], files={"payload.bin": LARGE})
    public_registry.add(package)
    real = package.version("1.0.0").tarball
    evil = bytearray(real)
    evil[len(real) // 3] ^= 0x01  # one bit, early, in a part the thread hashes
    public_registry.fault("/swapped-large/-/swapped-large-1.0.0.tgz",
                          Fault(body=bytes(evil), chunk_size=65536))
    proxy = await start_proxy(public_registry.url, rules=STREAMED)

    with capture_logs() as logs:
        status, got, error = await received_until_cut(
            proxy.url + "npm/swapped-large/-/swapped-large-1.0.0.tgz")

    assert status == 200
    assert error is not None
    assert 0 < len(got) < len(evil)
    assert got == evil[:len(got)]
    (line,) = [entry for entry in logs if entry["event"] == "tarball_digest_mismatch"]
    # the download's last chunk never left; the client, reading the spool at its own pace,
    # may have been further behind still when the cut came
    assert 0 < line["withheld"] <= len(evil) - len(got)
    assert proxy.metric("mirrorgate_tampered_total") == 1
    assert await proxy.jobs() == []


async def test_a_matching_large_tarball_hashed_off_the_loop_arrives_whole(
    public_registry: FixtureRegistry, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relayhash, "_spare_cpu", lambda: True)
    package = make_package("whole-large", ["1.0.0"], files={"payload.bin": LARGE})
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)

    status, got, error = await received_until_cut(
        proxy.url + "npm/whole-large/-/whole-large-1.0.0.tgz")

    assert (status, error) == (200, None)
    assert got == package.version("1.0.0").tarball
    (job,) = await proxy.jobs()
    assert job.artifact.size == len(got)


async def test_a_matching_public_tarball_arrives_whole_and_is_enqueued_with_its_size(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("whole", ["1.0.0"], files=BIG)
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)

    status, got, error = await received_until_cut(proxy.url + "npm/whole/-/whole-1.0.0.tgz")

    assert (status, error) == (200, None)
    assert got == package.version("1.0.0").tarball
    (job,) = await proxy.jobs()
    assert job.artifact.size == len(got)
    assert proxy.metric("mirrorgate_tampered_total") == 0


async def test_a_client_that_hangs_up_after_the_headers_causes_no_job(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("asked-and-gone", ["1.0.0"], files=BIG)
    public_registry.add(package)
    public_registry.fault("/asked-and-gone/-/asked-and-gone-1.0.0.tgz",
                          Fault(body=package.version("1.0.0").tarball, chunk_size=16_384,
                                chunk_delay=0.02))
    proxy = await start_proxy(public_registry.url, rules=STREAMED)

    async with aiohttp.ClientSession() as session:
        response = await session.get(proxy.url + "npm/asked-and-gone/-/asked-and-gone-1.0.0.tgz")
        assert response.status == 200
        response.close()  # hang up with the body still coming

    for _ in range(500):
        if proxy.metric("mirrorgate_requests_total", route="tarball", status="client_gone"):
            break
        await asyncio.sleep(0.02)
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="client_gone") == 1
    assert await proxy.jobs() == []
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0


async def test_a_public_tarball_cut_off_mid_stream_is_never_enqueued(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("cut-early", ["1.0.0"], files=BIG))
    public_registry.fault("/cut-early/-/cut-early-1.0.0.tgz", Fault(truncate_after=100_000))
    proxy = await start_proxy(public_registry.url)

    with pytest.raises(aiohttp.ClientPayloadError):
        await proxy.get("npm/cut-early/-/cut-early-1.0.0.tgz")

    assert await proxy.jobs() == []
    assert proxy.metric("mirrorgate_tampered_total") == 0
