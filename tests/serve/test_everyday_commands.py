"""The everyday npm commands besides install, with the real npm client: `npm dist-tag ls` and
`npm search`, a refusal logged once, and the "wrong registry URL" hint only where it fits.

Search is tested against a public upstream that has it (a real Verdaccio, which answers
`/-/v1/search`) and one that has not (the fixture registry).
"""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from mirrorgate.rules import parse_rules
from tests.serve.rig import FILE_STORE, SharedPrivate, StartProxy, publish_private
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient, npm
from tests.servers.packages import make_package
from tests.servers.processes import http_request

DENY = parse_rules('[deny]\npackages = ["tagged@2.0.0", "findme-denied"]\n', "rules.toml")


async def test_npm_dist_tag_ls_shows_the_tags_of_the_served_packument_never_a_denied_version(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("tagged", ["1.0.0", "1.5.0", "2.0.0", "3.0.0-rc.1"],
                                     dist_tags={"latest": "2.0.0", "next": "3.0.0-rc.1",
                                                "legacy": "1.0.0"}))
    proxy = await start_proxy(public_registry.url, rules=DENY)

    run = await npm(npm_client, "dist-tag", "ls", "tagged", registry=proxy.registry)
    raw = await proxy.get("npm/-/package/tagged/dist-tags")

    assert run.code == 0, run.stderr
    # latest pointed at the denied 2.0.0: it moves to the highest admitted release
    assert sorted(run.stdout.split("\n")) == ["", "latest: 1.5.0", "legacy: 1.0.0",
                                              "next: 3.0.0-rc.1"]
    assert raw.json() == {"latest": "1.5.0", "next": "3.0.0-rc.1", "legacy": "1.0.0"}


async def test_dist_tags_of_a_scoped_package_and_of_a_missing_one(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("@fixture/tags", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url)

    scoped = await proxy.get("npm/-/package/@fixture%2ftags/dist-tags")
    missing = await proxy.get("npm/-/package/no-such-package/dist-tags")

    assert scoped.json() == {"latest": "1.0.0"}
    assert missing.status == 404
    assert "no admitted versions" in missing.json()["error"]


async def test_npm_search_shows_what_the_public_upstream_finds_less_what_the_rules_deny(
    private_registry: SharedPrivate, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    # Verdaccio stands in for the public registry here (it answers /-/v1/search); the private
    # side is an empty file store, so every result is gated as a public one
    private_registry.publish_package(make_package("findme-open", ["1.0.0"]))
    private_registry.publish_package(make_package("findme-denied", ["1.0.0"]))
    private_registry.publish_package(make_package("findme-tagged", ["1.0.0", "2.0.0"]))
    # Verdaccio dates each version at its publish, just now: the default cooldown is off
    rules = parse_rules('[age]\nminimum = "0"\n\n'
                        '[deny]\npackages = ["findme-denied", "findme-tagged@2.0.0"]\n',
                        "rules.toml")
    proxy = await start_proxy(private_registry.url, private=FILE_STORE, rules=rules)

    run = await npm(npm_client, "search", "findme", "--json", registry=proxy.registry)
    upstream = http_request("GET", private_registry.url + "-/v1/search?text=findme").json()

    assert run.code == 0, run.stderr
    found = {entry["name"]: entry["version"] for entry in json.loads(run.stdout)}
    assert {o["package"]["name"] for o in upstream["objects"]} >= {
        "findme-open", "findme-denied", "findme-tagged"}
    assert found == {"findme-open": "1.0.0", "findme-tagged": "1.0.0"}


async def test_npm_search_never_shows_an_impostors_words_under_a_first_party_name(
    private_registry: SharedPrivate, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    # dependency confusion by description: the public `acme-searched` (Verdaccio stands in for
    # the public registry) tells readers to install something else; the organisation owns
    # the name (its version is in the proxy's private file store), so its words are served
    private_registry.publish_package(make_package(
        "acme-searched", ["9.0.0"], description="IMPOSTOR: the real one is acme-searched-evil",
        homepage="http://127.0.0.1:9/evil", keywords=["impostor"]))
    proxy = await start_proxy(private_registry.url, private=FILE_STORE)
    await publish_private(proxy, private_registry, make_package(
        "acme-searched", ["1.0.0"], description="acme's own").version("1.0.0"))

    run = await npm(npm_client, "search", "acme-searched", "--json", registry=proxy.registry)
    raw = await proxy.get("npm/-/v1/search?text=acme-searched")

    assert run.code == 0, run.stderr
    [found] = [entry for entry in json.loads(run.stdout) if entry["name"] == "acme-searched"]
    assert found["version"] == "1.0.0"
    assert found["description"] == "acme's own"
    assert b"IMPOSTOR" not in raw.body
    assert b"impostor" not in raw.body
    assert b"/evil" not in raw.body


async def test_npm_search_without_search_upstream_is_a_501_that_says_so(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    proxy = await start_proxy(public_registry.url)

    run = await npm(npm_client, "search", "anything", registry=proxy.registry)
    answer = await proxy.get("npm/-/v1/search?text=anything")

    assert run.code != 0
    assert "501" in run.stderr
    assert answer.status == 501
    assert "offers no search" in answer.json()["error"]
    assert proxy.metric("mirrorgate_requests_total", route="search", status="501") == 2


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "npm/-/nothing-here", 404),
    ("PATCH", "npm/some-package", 405),
    ("GET", "npm/..%2fetc", 400),
    ("GET", "npm/-/v1/search?size=many", 400),
])
async def test_every_refusal_that_is_not_a_package_miss_is_logged_once(
    method: str, path: str, status: int, public_registry: FixtureRegistry,
    start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    with capture_logs() as logs:
        answer = await proxy.request(method, path)

    assert answer.status == status
    refused = [entry for entry in logs if entry["event"] == "request_refused"]
    assert [(entry["status"], entry["path"]) for entry in refused] == [
        (status, "/" + path.split("?")[0])]


async def test_a_package_miss_and_a_denied_tarball_are_not_logged_as_refusals(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("tagged", ["1.0.0", "2.0.0"]))
    proxy = await start_proxy(public_registry.url, rules=DENY)

    with capture_logs() as logs:
        missing = await proxy.get("npm/no-such-package")
        denied = await proxy.get("npm/tagged/-/tagged-2.0.0.tgz")

    assert (missing.status, denied.status) == (404, 403)
    assert [entry["event"] for entry in logs if entry["event"] in (
        "request_refused", "tarball_denied")] == ["tarball_denied"]


@pytest.mark.parametrize("path", [
    "lodash", "@scope%2fname", "lodash/-/lodash-4.17.21.tgz", "-/v1/search", "-/ping"])
async def test_a_registry_path_outside_npm_gets_the_hint_to_add_the_prefix(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == 404
    assert "point the client at http://HOST:PORT/npm/" in answer.json()["error"]


@pytest.mark.parametrize("path", ["favicon.ico", "wp-login.php", "npm/-/nothing-here",
                                  "npm/pkg/1.0.0/extra"])
async def test_a_path_no_client_would_send_gets_no_registry_hint(
    path: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get(path)

    assert answer.status == 404
    assert answer.json()["error"].startswith("no such route")
    assert "HOST:PORT" not in answer.json()["error"]
