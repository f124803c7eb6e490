"""Headers from clients, against the real `mirrorgate serve` with Verdaccio behind it.

The attacks: `X-Forwarded-Host: evil.example` written into the tarball URLs a client (and,
without `Vary`, a shared cache) is served; and a client inventing `Host` values until one
package's renderings evict every other package from the cache.
"""

from __future__ import annotations

from mirrorgate.access.tokens import new_token
from tests.access.rig import SecretDir, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package
from tests.servers.processes import MirrorgateProcess, Reply, http_request
from tests.servers.verdaccio import Verdaccio

HOSTILE = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
           "Forwarded": 'for=192.0.2.1;proto=https;host="evil.example"'}


def packument(proxy: MirrorgateProcess, name: str, headers: dict[str, str]) -> Reply:
    return http_request("GET", proxy.registry_url + name, headers=headers)


def tarball_url(reply: Reply) -> str:
    return str(reply.json()["versions"]["1.0.0"]["dist"]["tarball"])


def test_forwarded_headers_from_an_untrusted_peer_are_ignored(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir,
) -> None:
    token = new_token()
    secret_dir.clients(ci=token)
    verdaccio.publish_package(make_package("@corp/internal"))
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, secret_dir.path, token,
                          MIRRORGATE_TRUSTED_PROXIES="10.0.0.0/8")

    answer = packument(proxy, "@corp%2finternal",
                       {**HOSTILE, "Authorization": f"Bearer {token}"})

    assert answer.status == 200
    assert "evil.example" not in answer.body.decode()
    assert tarball_url(answer) == f"{proxy.registry_url}@corp/internal/-/internal-1.0.0.tgz"
    assert answer.headers["Vary"] == ("Accept, Accept-Encoding, Host, X-Forwarded-Proto, "
                                      "X-Forwarded-Host, Forwarded, Authorization")


def test_forwarded_headers_from_a_trusted_proxy_are_honoured(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio,
) -> None:
    verdaccio.publish_package(make_package("@corp/behind"))
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, None,
                          MIRRORGATE_TRUSTED_PROXIES="127.0.0.1, ::1")

    x_forwarded = packument(proxy, "@corp%2fbehind", {
        "X-Forwarded-Proto": "https", "X-Forwarded-Host": "npm.example.com"})
    forwarded = packument(proxy, "@corp%2fbehind",
                          {"Forwarded": 'for=192.0.2.1;proto=https;host="npm.example.org"'})

    assert tarball_url(x_forwarded) == "https://npm.example.com/npm/@corp/behind/-/behind-1.0.0.tgz"
    assert tarball_url(forwarded) == "https://npm.example.org/npm/@corp/behind/-/behind-1.0.0.tgz"


def test_many_distinct_host_values_evict_no_other_package(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio,
) -> None:
    # each rendering of `wide` is tens of KB: fifty hosts would need several MiB of a 1 MiB cache
    public_registry.add(make_package("wide", [f"1.0.{n}" for n in range(120)]))
    verdaccio.publish_package(make_package("@corp/kept"))
    proxy = start_guarded(guarded, guard, public_registry, verdaccio, None,
                          MIRRORGATE_CACHE_MAX_BYTES=str(1024 * 1024))
    assert packument(proxy, "@corp%2fkept", {}).status == 200

    for n in range(50):
        host = f"h{n}.invented.example"
        answer = packument(proxy, "wide", {"Host": host})
        assert answer.status == 200
        assert f"http://{host}/npm/wide/-/" in answer.body.decode()
    hits = proxy.metric("mirrorgate_cache_total", result="hit")
    misses = proxy.metric("mirrorgate_cache_total", result="miss")
    again = packument(proxy, "@corp%2fkept", {})

    assert again.status == 200
    assert proxy.metric("mirrorgate_cache_total", result="hit") == hits + 1
    assert proxy.metric("mirrorgate_cache_total", result="miss") == misses
