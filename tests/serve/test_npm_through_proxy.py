"""The real npm client through the proxy: a whole tree installs, a denied version is an E403.

npm runs as a subprocess started with `asyncio.create_subprocess_exec`, so the event loop that
serves the in-process proxy keeps running while npm waits on it.
"""

from __future__ import annotations

from mirrorgate.rules import parse_rules
from tests.serve.rig import RunningProxy, SharedPrivate, StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient, npm
from tests.servers.packages import install_script_version, make_package, standard_tree
from tests.servers.verdaccio import Verdaccio


async def test_npm_installs_a_six_package_tree_through_the_proxy_with_a_fresh_cache(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    zeta = next(package for package in tree.packages if package.name == "zeta")
    private_registry.publish_package(zeta)
    proxy = await start_proxy(public_registry.url)
    npm_client.write_project(tree.dependencies)

    run = await npm(npm_client, "install", registry=proxy.registry)

    assert run.code == 0, run.stderr
    assert npm_client.installed() == tree.resolved
    lock = npm_client.lockfile()["packages"]
    assert lock["node_modules/@fixture/beta"]["resolved"] == (
        f"{proxy.registry}@fixture/beta/-/beta-2.1.3.tgz")
    assert lock["node_modules/alpha"]["integrity"] == next(
        p for p in tree.packages if p.name == "alpha").version("1.2.0").integrity
    mirrored = sorted(f"{job.name}@{job.version}" for job in await proxy.jobs())
    assert mirrored == sorted(f"{name}@{version}" for name, version in tree.resolved.items()
                              if name != "zeta")
    assert not any(seen.path.startswith("/zeta/-/") for seen in public_registry.requests)


def private_calls(proxy: RunningProxy, kind: str) -> float:
    value = proxy.metrics.registry.get_sample_value(
        "mirrorgate_upstream_seconds_count", {"upstream": "private", "kind": kind})
    return 0.0 if value is None else value


async def test_a_cold_install_asks_the_private_upstream_once_per_name(
    verdaccio: Verdaccio, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    # Six names, one of them (zeta) held privately: six packument reads, and a tarball read
    # only for the version the private packument listed, not one more per public tarball.
    # A Verdaccio and a public registry of its own: the tree's names are other tests' too.
    tree = standard_tree()
    zeta = next(package for package in tree.packages if package.name == "zeta")
    verdaccio.publish_package(zeta)
    with FixtureRegistry(*[package for package in tree.packages if package.name != "zeta"]
                         ) as public:
        proxy = await start_proxy(public.url, private=verdaccio.url)
        npm_client.write_project(tree.dependencies)

        run = await npm(npm_client, "install", registry=proxy.registry)

    assert run.code == 0, run.stderr
    assert npm_client.installed() == tree.resolved
    assert private_calls(proxy, "metadata") == len(tree.packages)
    assert private_calls(proxy, "tarball") == 1  # zeta's
    assert proxy.metric("mirrorgate_private_skipped_total") == len(tree.packages) - 1


async def test_a_tarball_costs_the_private_upstream_its_packument_and_nothing_more(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    # The gate is read before any tarball (so a deny rule reaches every version): with no
    # fresh packument at hand the route fills one, whose private answer says public-only.
    public_registry.add(make_package("unlisted-yet", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url, private=private_registry.url, cache_ttl=60.0)

    assert (await proxy.get("npm/unlisted-yet/-/unlisted-yet-1.0.0.tgz")).status == 200
    assert (private_calls(proxy, "tarball"), private_calls(proxy, "metadata")) == (0, 1)
    assert (await proxy.get("npm/unlisted-yet/-/unlisted-yet-1.0.0.tgz")).status == 200
    assert (private_calls(proxy, "tarball"), private_calls(proxy, "metadata")) == (0, 1)
    proxy.clock.advance(61)
    assert (await proxy.get("npm/unlisted-yet/-/unlisted-yet-1.0.0.tgz")).status == 200
    assert (private_calls(proxy, "tarball"), private_calls(proxy, "metadata")) == (0, 2)
    assert proxy.metric("mirrorgate_private_skipped_total") == 3


async def test_a_packument_built_while_private_failed_never_skips_private(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("private-flaky", ["1.0.0"])
    public_registry.add(package)
    with FixtureRegistry(package) as private:
        private.fault("/private-flaky", Fault(status=503, times=1), exact=True)
        proxy = await start_proxy(public_registry.url, private=private.url)
        assert (await proxy.get("npm/private-flaky")).status == 200  # public half only
        private.clear_requests()
        answer = await proxy.get("npm/private-flaky/-/private-flaky-1.0.0.tgz")
        assert answer.status == 200
        assert [seen.path for seen in private.requests] == [
            "/private-flaky/-/private-flaky-1.0.0.tgz"]
    assert proxy.metric("mirrorgate_private_skipped_total") == 0


async def test_npm_reports_e403_with_the_reason_for_a_version_the_rules_denied(
    public_registry: FixtureRegistry, start_proxy: StartProxy, npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("scripted", [
        "1.0.0", install_script_version("scripted", "1.1.0")]))
    rules = parse_rules("[install_scripts]\nblock = true\n", "rules.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)
    npm_client.write_project({})

    denied = await npm(npm_client, "install", "scripted@1.1.0", registry=proxy.registry)
    ranged = await npm(npm_client, "install", "scripted@^1.0.0", registry=proxy.registry)

    assert denied.code != 0
    assert "E403" in denied.stderr
    assert "Could not download scripted@1.1.0 due to policy violations" in denied.stderr
    assert "- 1.1.0 (install-scripts): " in denied.stderr
    assert "ETARGET" not in denied.stderr
    assert ranged.code == 0, ranged.stderr
    assert npm_client.installed() == {"scripted": "1.0.0"}


async def test_a_version_mirrored_since_its_packument_was_filled_survives_a_public_outage(
    private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    # Seen by hand: `npm install` (public up, the worker mirrors every tarball) then, within the
    # packument TTL, the public registry goes down and `npm ci` fails with E502 on a version
    # the private registry already holds: the cached packument said "public-only", so the
    # tarball route skipped private and had nowhere else to go.
    package = make_package("mirrored-since-fill", ["1.0.0"])
    version = package.version("1.0.0")
    with FixtureRegistry(package) as public:
        proxy = await start_proxy(public.url, cache_ttl=60.0)
        tarball = "npm/mirrored-since-fill/-/mirrored-since-fill-1.0.0.tgz"
        assert (await proxy.get(tarball)).status == 200  # served from public, enqueued
        private_registry.publish(version.marked())  # what the worker does with the job
    # public is down now; the packument is still fresh and still says "public-only"
    answer = await proxy.get(tarball)
    assert answer.status == 200, answer.body[:300]
    assert answer.body == version.tarball
    assert proxy.metric("mirrorgate_private_skipped_total") == 2
