"""Faults injected into the fixture registry do what they say, as a real client sees them."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package
from tests.servers.processes import http_request
from tests.sri import sri

TARBALL = "alpha/-/alpha-1.0.0.tgz"


@pytest.fixture
def registry(public_registry: FixtureRegistry) -> FixtureRegistry:
    public_registry.add(make_package("alpha", ["1.0.0", "1.1.0"]),
                        make_package("alphabet", ["1.0.0"]))
    return public_registry


def test_a_status_fault_answers_its_status_and_headers_as_many_times_as_asked(
    registry: FixtureRegistry,
) -> None:
    registry.fault("/alpha", Fault(status=429, headers={"Retry-After": "1"}, times=2))
    for _ in range(2):
        reply = http_request("GET", registry.url + "alpha")
        assert reply.status == 429
        assert reply.headers["Retry-After"] == "1"
    assert http_request("GET", registry.url + "alpha").status == 200


def test_a_fault_covers_the_paths_under_its_prefix_but_not_a_longer_name(
    registry: FixtureRegistry,
) -> None:
    registry.fault("/alpha", Fault(status=500))
    assert http_request("GET", registry.url + "alpha").status == 500
    assert http_request("GET", registry.url + TARBALL).status == 500
    assert http_request("GET", registry.url + "alphabet").status == 200


def test_an_exact_fault_leaves_the_paths_under_it_alone(registry: FixtureRegistry) -> None:
    registry.fault("/alpha", Fault(status=503), exact=True)
    assert http_request("GET", registry.url + "alpha").status == 503
    assert http_request("GET", registry.url + TARBALL).status == 200
    registry.clear_faults()
    assert http_request("GET", registry.url + "alpha").status == 200


async def test_a_hang_outlasts_a_client_timeout_and_does_not_hold_up_stop(
    registry: FixtureRegistry,
) -> None:
    registry.fault("/alpha", Fault(delay=30))
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        with pytest.raises(asyncio.TimeoutError):
            async with client.get(registry.url + "alpha") as response:
                await response.read()
    started = time.monotonic()
    registry.stop()
    assert time.monotonic() - started < 3


async def test_a_truncated_tarball_is_detected_by_the_client(registry: FixtureRegistry) -> None:
    registry.fault("/" + TARBALL, Fault(truncate_after=20))
    full = registry.package("alpha").version("1.0.0").tarball
    async with aiohttp.ClientSession() as client, client.get(registry.url + TARBALL) as response:
        assert response.status == 200
        assert response.content_length == len(full)
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


async def test_a_tampered_tarball_does_not_match_the_advertised_integrity(
    registry: FixtureRegistry,
) -> None:
    honest = registry.package("alpha").version("1.0.0").tarball
    tampered = honest[:-1] + bytes([honest[-1] ^ 0xFF])
    registry.fault("/" + TARBALL, Fault(body=tampered))
    integrity = registry.packument("alpha")["versions"]["1.0.0"]["dist"]["integrity"]
    async with aiohttp.ClientSession() as client, client.get(registry.url + TARBALL) as response:
        assert response.status == 200
        body = await response.read()
    assert body == tampered
    assert sri("sha512", body) != integrity


async def test_a_slow_body_arrives_whole_but_late(registry: FixtureRegistry) -> None:
    registry.fault("/" + TARBALL, Fault(chunk_size=64, chunk_delay=0.05))
    full = registry.package("alpha").version("1.0.0").tarball
    started = time.monotonic()
    async with aiohttp.ClientSession() as client, client.get(registry.url + TARBALL) as response:
        body = await response.read()
    assert body == full
    assert time.monotonic() - started >= 0.05 * (len(full) // 64)


def test_a_raw_body_replaces_the_packument(registry: FixtureRegistry) -> None:
    nested = b"[" * 10_000 + b"]" * 10_000
    registry.fault("/alpha", Fault(body=nested, headers={"Content-Type": "application/json"}),
                   exact=True)
    reply = http_request("GET", registry.url + "alpha")
    assert reply.status == 200
    assert reply.body == nested
    assert reply.headers["Content-Type"] == "application/json"


def test_a_packument_can_change_between_two_fetches(registry: FixtureRegistry) -> None:
    package = registry.package("alpha")
    first = http_request("GET", registry.url + "alpha").json()
    lying = package.version("1.0.0").with_dist(integrity="sha512-" + "A" * 86 + "==")
    registry.add(package.with_version(lying))
    second = http_request("GET", registry.url + "alpha").json()
    assert (first["versions"]["1.0.0"]["dist"]["integrity"]
            != second["versions"]["1.0.0"]["dist"]["integrity"])
    assert http_request("GET", registry.url + TARBALL).body == package.version("1.0.0").tarball


def test_the_newest_matching_fault_wins(registry: FixtureRegistry) -> None:
    registry.fault("/", Fault(status=500))
    registry.fault("/alpha", Fault(status=502))
    assert http_request("GET", registry.url + "alpha").status == 502
    assert http_request("GET", registry.url + "alphabet").status == 500
    assert orjson.loads(http_request("GET", registry.url + "alphabet").body)["error"]
