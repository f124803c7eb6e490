"""The fixture public registry answers the npm read protocol, from its own thread."""

from __future__ import annotations

import gzip
import hashlib
import socket

import aiohttp
import pytest

from tests.servers.fixture_registry import ABBREVIATED, FixtureRegistry, Manners
from tests.servers.packages import (
    install_script_version,
    make_package,
    no_digest_version,
    sha1_only_version,
    standard_tree,
)
from tests.servers.processes import http_request
from tests.sri import sri


@pytest.fixture
def registry(public_registry: FixtureRegistry) -> FixtureRegistry:
    public_registry.add(*standard_tree().packages)
    return public_registry


async def test_a_full_packument_has_every_version_its_times_and_tarball_urls_on_the_registry(
    registry: FixtureRegistry,
) -> None:
    async with aiohttp.ClientSession() as client, client.get(registry.url + "alpha") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")
        document = await response.json()
    assert document["_id"] == document["name"] == "alpha"
    assert document["dist-tags"] == {"latest": "2.0.0"}
    assert list(document["versions"]) == ["1.0.0", "1.2.0", "2.0.0"]
    assert set(document["time"]) == {"created", "modified", "1.0.0", "1.2.0", "2.0.0"}
    assert document["readme"]
    assert document["maintainers"]
    tarball = document["versions"]["1.2.0"]["dist"]["tarball"]
    assert tarball == registry.url + "alpha/-/alpha-1.2.0.tgz"


async def test_an_abbreviated_packument_answers_npms_install_accept_header(
    registry: FixtureRegistry,
) -> None:
    accept = f"{ABBREVIATED}; q=1.0, application/json; q=0.8, */*"
    async with aiohttp.ClientSession() as client, client.get(
        registry.url + "alpha", headers={"Accept": accept}
    ) as response:
        assert response.headers["Content-Type"] == ABBREVIATED
        document = await response.json(content_type=None)
    assert set(document) == {"name", "modified", "dist-tags", "versions"}
    assert "readme" not in document["versions"]["1.2.0"]
    assert document["versions"]["1.2.0"]["dependencies"] == {"gamma": "^3.0.0",
                                                            "delta": "~0.4.0"}


async def test_every_served_tarball_matches_the_integrity_and_shasum_advertised(
    registry: FixtureRegistry,
) -> None:
    async with aiohttp.ClientSession() as client:
        for package in standard_tree().packages:
            document = registry.packument(package.name)
            for version in document["versions"].values():
                dist = version["dist"]
                async with client.get(dist["tarball"]) as response:
                    assert response.status == 200
                    body = await response.read()
                assert dist["integrity"] == sri("sha512", body)
                assert dist["shasum"] == hashlib.sha1(body, usedforsecurity=False).hexdigest()


@pytest.mark.parametrize("path", ["@fixture/beta", "@fixture%2fbeta", "@fixture%2Fbeta"])
def test_a_scoped_package_answers_at_every_spelling_of_its_name(
    registry: FixtureRegistry, path: str,
) -> None:
    reply = http_request("GET", registry.url + path)
    assert reply.status == 200
    assert reply.json()["name"] == "@fixture/beta"
    tarball = http_request("GET", registry.url + "@fixture/beta/-/beta-2.1.3.tgz")
    assert tarball.body == registry.package("@fixture/beta").version("2.1.3").tarball


def test_an_unchanged_packument_or_tarball_answers_304_to_its_etag(
    registry: FixtureRegistry,
) -> None:
    for path in ("gamma", "gamma/-/gamma-3.1.0.tgz"):
        first = http_request("GET", registry.url + path)
        again = http_request("GET", registry.url + path,
                             headers={"If-None-Match": first.headers["ETag"]})
        assert again.status == 304
        assert again.body == b""
    abbreviated = http_request("GET", registry.url + "gamma", headers={"Accept": ABBREVIATED})
    assert abbreviated.headers["ETag"] != first.headers["ETag"]


def test_head_answers_the_length_without_a_body(registry: FixtureRegistry) -> None:
    full = http_request("GET", registry.url + "delta/-/delta-0.4.2.tgz")
    head = http_request("HEAD", registry.url + "delta/-/delta-0.4.2.tgz")
    assert head.status == 200
    assert head.body == b""
    assert int(head.headers["Content-Length"]) == len(full.body)


@pytest.mark.parametrize("path", ["nope", "@fixture%2fnope", "alpha/-/alpha-9.9.9.tgz",
                                  "nope/-/nope-1.0.0.tgz", "alpha/9.9.9"])
def test_unknown_packages_versions_and_tarballs_answer_404_json(
    registry: FixtureRegistry, path: str,
) -> None:
    reply = http_request("GET", registry.url + path)
    assert reply.status == 404
    assert "error" in reply.json()


def test_a_package_added_while_running_is_served_at_once(registry: FixtureRegistry) -> None:
    assert http_request("GET", registry.url + "late").status == 404
    registry.add(make_package("late", ["1.0.0"]))
    first = http_request("GET", registry.url + "late")
    assert first.json()["dist-tags"]["latest"] == "1.0.0"
    registry.add(make_package("late", ["1.0.0", "1.1.0"]))
    second = http_request("GET", registry.url + "late")
    assert second.json()["dist-tags"]["latest"] == "1.1.0"
    assert second.headers["ETag"] != first.headers["ETag"]


def test_special_versions_are_served_as_built(public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("special", [
        "1.0.0", no_digest_version("special", "1.1.0"), sha1_only_version("special", "1.2.0"),
        install_script_version("special", "1.3.0"), "2.0.0-rc.1",
    ]))
    document = http_request("GET", public_registry.url + "special").json()
    versions = document["versions"]
    assert {"integrity", "shasum"} <= set(versions["1.0.0"]["dist"])
    assert not {"integrity", "shasum"} & set(versions["1.1.0"]["dist"])
    assert "integrity" not in versions["1.2.0"]["dist"]
    assert versions["1.3.0"]["hasInstallScript"] is True
    assert document["dist-tags"] == {"latest": "1.3.0", "next": "2.0.0-rc.1"}


def test_requests_are_recorded_with_method_raw_path_and_headers(
    registry: FixtureRegistry,
) -> None:
    http_request("GET", registry.url + "@fixture%2fbeta", headers={"X-Probe": "one"})
    http_request("HEAD", registry.url + "alpha/-/alpha-1.0.0.tgz")
    seen = registry.requests
    assert [(r.method, r.path) for r in seen] == [("GET", "/@fixture%2fbeta"),
                                                  ("HEAD", "/alpha/-/alpha-1.0.0.tgz")]
    assert seen[0].headers["x-probe"] == "one"
    registry.clear_requests()
    assert registry.requests == []


def test_a_stopped_registry_refuses_connections_and_starts_again_on_the_same_port(
    registry: FixtureRegistry,
) -> None:
    url = registry.url
    registry.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", registry.port), 1).close()
    registry.start()
    assert registry.url == url
    assert http_request("GET", url + "alpha").status == 200


def test_a_port_already_taken_fails_start_with_the_bind_error(
    registry: FixtureRegistry,
) -> None:
    with pytest.raises(OSError, match="in use"):
        FixtureRegistry(port=registry.port).start()


async def test_the_registry_answers_while_the_tests_own_loop_is_blocked(
    registry: FixtureRegistry,
) -> None:
    # a blocking call on the test's loop (as subprocess.run(["npm", ...]) is) still gets its
    # answer: the registry runs on a loop of its own
    assert http_request("GET", registry.url + "alpha", timeout=5).status == 200


def _raw(url: str, accept_encoding: str) -> tuple[dict[str, str], bytes]:
    reply = http_request("GET", url, headers={"Accept-Encoding": accept_encoding})
    assert reply.status == 200
    return {key.lower(): value for key, value in reply.headers.items()}, reply.body


def test_by_default_it_gzips_documents_and_tarballs_over_1_kb_for_a_client_that_accepts_it(
    registry: FixtureRegistry,
) -> None:
    tarball = registry.package("alpha").version("1.2.0").tarball
    url = registry.tarball_url("alpha", "1.2.0")
    coded_headers, coded = _raw(url, "gzip, deflate")
    plain_headers, plain = _raw(url, "identity")
    assert coded_headers["content-encoding"] == "gzip"
    assert gzip.decompress(coded) == tarball != coded
    assert "content-encoding" not in plain_headers
    assert plain == tarball
    document_headers, _body = _raw(registry.url + "alpha", "gzip")
    assert document_headers["content-encoding"] == "gzip"


def test_its_manners_can_code_regardless_chunk_and_trickle(registry: FixtureRegistry) -> None:
    registry.manners = Manners(gzip="always", chunked=True, trickle=0.01, piece=4096)
    tarball = registry.package("alpha").version("1.2.0").tarball
    headers, body = _raw(registry.tarball_url("alpha", "1.2.0"), "identity")
    assert headers["content-encoding"] == "gzip"
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    assert gzip.decompress(body) == tarball
