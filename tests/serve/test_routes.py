"""Routes and names: scoped spellings everywhere, hostile paths refused before any upstream."""

from __future__ import annotations

import pytest

from tests.serve.rig import NPM_ACCEPT, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package

SCOPED_PACKUMENT_PATHS = ["npm/@scoped/pkg", "npm/@scoped%2fpkg", "npm/@scoped%2Fpkg"]


@pytest.mark.parametrize("path", SCOPED_PACKUMENT_PATHS)
async def test_a_scoped_packument_answers_under_every_spelling_of_its_name(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("@scoped/pkg", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url)

    full = await proxy.get(path)
    short = await proxy.get(path, Accept=NPM_ACCEPT)
    head = await proxy.request("HEAD", path)

    assert full.status == short.status == head.status == 200
    assert full.json()["name"] == short.json()["name"] == "@scoped/pkg"
    assert short.json()["versions"]["1.0.0"]["dist"]["tarball"] == (
        f"{proxy.registry}@scoped/pkg/-/pkg-1.0.0.tgz")
    assert head.body == b""
    assert public_registry.requests[0].path.lower() == "/@scoped%2fpkg"


@pytest.mark.parametrize("path", [
    "npm/@scoped/pkg/-/pkg-1.0.0.tgz",
    "npm/@scoped%2fpkg/-/pkg-1.0.0.tgz",
    "npm/@scoped%2Fpkg/-/pkg-1.0.0.tgz",
])
async def test_a_scoped_tarball_answers_under_every_spelling_of_its_name(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("@scoped/pkg", ["1.0.0"])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == 200
    assert answer.body == package.version("1.0.0").tarball


@pytest.mark.parametrize("path", [
    "npm/..%2f..%2fetc%2fpasswd",
    "npm/%2e%2e",
    "npm/%2E%2E%2Fsecrets",
    "npm/a%2fb",
    "npm/foo%5cbar",
    "npm/foo%00bar",
    "npm/foo%0d%0aSet-Cookie:x",
    "npm/%252e%252e",
    "npm/.hidden",
    "npm/_private",
    "npm/@scope",
    "npm/@scope%2f",
    "npm/@scope%2fa%2fb",
    "npm/" + "a" * 215,
    "npm/%ff%fe",
    "npm/pkg/-/..%2f..%2fx.tgz",
    "npm/pkg/..%2f..",
])
async def test_a_hostile_name_is_refused_with_a_json_400_and_never_reaches_an_upstream(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == 400
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"]
    assert public_registry.requests == []
    assert proxy.metric("mirrorgate_requests_total", route="unknown", status="400") == 1


@pytest.mark.parametrize("path", [  # `/` itself points a browser at the status page
    "npm", "npm/", "npm/-/v1/nothing", "npm/pkg/1.0.0/extra", "anything/else",
    "npm/pkg/-/file.tgz/more",
])
async def test_an_unknown_path_is_a_json_404(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == 404
    assert answer.headers["Content-Type"] == "application/json"
    assert "no such route" in answer.json()["error"]
    assert public_registry.requests == []


async def test_ping_answers_and_health_routes_live_at_the_root(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    ping = await proxy.get("npm/-/ping")
    ready = await proxy.get("readyz")
    metrics = await proxy.get("metrics")

    assert ping.status == 200
    assert ping.json() == {}
    assert ready.status == 200
    assert b"mirrorgate_requests_total" in metrics.body
    assert proxy.metric("mirrorgate_requests_total", route="ping", status="200") == 1


async def test_a_write_to_an_open_proxy_is_refused_because_publishing_needs_client_tokens(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # without a tokens file nobody is known, so nobody may write with mirrorgate's credential
    public_registry.add(make_package("readonly-one"))
    proxy = await start_proxy(public_registry.url)

    put = await proxy.request("PUT", "npm/readonly-one", headers={
        "Content-Type": "application/json"})
    patch = await proxy.request("PATCH", "npm/readonly-one")

    assert put.status == 403
    assert put.json()["reason"] == "no client tokens"
    assert "MIRRORGATE_CLIENT_TOKENS_FILE" in put.json()["error"]
    assert patch.status == 405
    assert patch.headers["Allow"] == "GET, HEAD, PUT, DELETE"
    assert public_registry.requests == []
    assert proxy.metric("mirrorgate_requests_total", route="write", status="403") == 1


@pytest.mark.parametrize(("path", "status"), [
    ("npm/tarball-one/-/other-1.0.0.tgz", 400),
    ("npm/tarball-one/-/tarball-one-1.0.0.zip", 400),
    ("npm/tarball-one/-/tarball-one-9.9.9.tgz", 404),
    ("npm/@scoped/pkg/-/tarball-one-1.0.0.tgz", 400),
])
async def test_a_tarball_filename_that_is_not_this_packages_version_is_refused(
    path: str, status: int, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("tarball-one"), make_package("@scoped/pkg"))
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == status
    assert answer.json()["error"]
    assert not any("/-/" in seen.path for seen in public_registry.requests)
