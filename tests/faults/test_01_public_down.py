"""Row 1 of the faults table: the public upstream is down (connection refused).

> | 1 | public upstream down (connection refused) | private hits still served; a public-only
> package answers 502 with a JSON reason; no crash; the next request after it returns works |

The real `mirrorgate serve` runs over Verdaccio (the private upstream, holding one package) and
the fixture public registry, which is stopped (its port then refuses connections) and started
again on the same port.
"""

from __future__ import annotations

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version, tarball_path
from tests.servers.processes import MirrorgateProcess, Reply, http_request
from tests.servers.verdaccio import Verdaccio


def get(proxy: MirrorgateProcess, path: str) -> Reply:
    return http_request("GET", proxy.registry_url + path.lstrip("/"))


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry,
                verdaccio: Verdaccio) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                             "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token})


def assert_bad_gateway(reply: Reply, guard: SecretGuard, package: str) -> None:
    guard.seen(reply)
    assert reply.status == 502, reply.body[:300]
    assert reply.headers["Content-Type"] == "application/json"
    body = reply.json()
    assert body["upstream"] == "public"
    assert body["kind"] == "unreachable"
    assert body["reason"] == "the public upstream is unreachable"
    assert f"public upstream failed for {package}" in body["error"]


def test_private_hits_are_still_served_while_the_public_upstream_refuses_connections(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    npm_client: NpmClient,
) -> None:
    inhouse = make_version("inhouse", "1.0.0")
    verdaccio.publish(inhouse)
    proxy = start_proxy(guarded, public_registry, verdaccio)
    public_registry.stop()

    packument = get(proxy, "inhouse")
    tarball = get(proxy, tarball_path("inhouse", "1.0.0"))
    npm_client.write_project({"inhouse": "^1.0.0"})
    done = npm_client.install(registry=proxy.registry_url)

    assert packument.status == 200
    assert list(packument.json()["versions"]) == ["1.0.0"]
    assert tarball.status == 200
    assert tarball.body == inhouse.tarball
    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {"inhouse": "1.0.0"}
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason="unreachable") >= 1


def test_a_public_only_package_answers_502_with_a_json_reason_and_the_process_keeps_serving(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio,
) -> None:
    public_registry.add(make_package("outside", ["1.0.0"]))
    verdaccio.publish(make_version("inhouse", "1.0.0"))
    proxy = start_proxy(guarded, public_registry, verdaccio)
    public_registry.stop()

    for path in ("outside", "outside/1.0.0", tarball_path("outside", "1.0.0")):
        assert_bad_gateway(get(proxy, path), guard, "outside")

    assert proxy.returncode is None
    assert proxy.get("livez").status == 200
    assert get(proxy, "inhouse").status == 200
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="502") == 1
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="502") == 1
    failed = [line for line in proxy.events("upstream_failed") if line["upstream"] == "public"]
    assert failed
    assert {line["kind"] for line in failed} == {"unreachable"}


def test_the_next_request_after_the_public_upstream_returns_is_served(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio,
) -> None:
    package = make_package("outside", ["1.0.0"])
    public_registry.add(package)
    proxy = start_proxy(guarded, public_registry, verdaccio)
    public_registry.stop()
    assert_bad_gateway(get(proxy, "outside"), guard, "outside")
    assert_bad_gateway(get(proxy, tarball_path("outside", "1.0.0")), guard, "outside")

    public_registry.start()
    packument = get(proxy, "outside")
    tarball = get(proxy, tarball_path("outside", "1.0.0"))

    assert packument.status == 200
    assert list(packument.json()["versions"]) == ["1.0.0"]
    assert tarball.status == 200
    assert tarball.body == package.versions["1.0.0"].tarball
