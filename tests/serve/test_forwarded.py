"""Headers from clients: the base URL of tarball URLs, `Vary`, and the cache's bound per base.

The attacks: a client sending `X-Forwarded-Host: evil.example` to have its host written into
the tarball URLs served (and, without `Vary`, kept by a shared cache for everyone), and a
client inventing `Host` values until one package's renderings evict every other package.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from mirrorgate.gate.packuments.entry import MAX_BASES
from tests.access.rig import bearer, tokens_file
from tests.serve.rig import NPM_ACCEPT, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
ELSEWHERE = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.0.2.7"))
HOSTILE = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
           "Forwarded": 'for=192.0.2.1;proto=https;host="evil.example"'}


def tarball_of(document: dict[str, object]) -> str:
    versions = document["versions"]
    assert isinstance(versions, dict)
    return str(versions["1.0.0"]["dist"]["tarball"])


async def test_forwarded_headers_from_a_peer_not_listed_are_ignored(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("fwd-a"))
    default = await start_proxy(public_registry.url)
    elsewhere = await start_proxy(public_registry.url, trusted_proxies=ELSEWHERE)

    for proxy in (default, elsewhere):
        packument = await proxy.request("GET", "npm/fwd-a", headers=HOSTILE)
        version = await proxy.request("GET", "npm/fwd-a/1.0.0", headers=HOSTILE)

        assert packument.status == 200
        assert tarball_of(packument.json()) == f"{proxy.registry}fwd-a/-/fwd-a-1.0.0.tgz"
        assert "evil.example" not in version.body.decode()
        assert version.json()["dist"]["tarball"].startswith(proxy.registry)


async def test_forwarded_headers_from_a_trusted_proxy_decide_the_base(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("fwd-b"))
    proxy = await start_proxy(public_registry.url, trusted_proxies=LOOPBACK)

    x_forwarded = await proxy.get("npm/fwd-b", X_Forwarded_Proto="https",
                                  X_Forwarded_Host="npm.example.com")
    forwarded = await proxy.get("npm/fwd-b",
                                Forwarded='for=192.0.2.1;proto=https;host="npm.example.org"')
    plain = await proxy.get("npm/fwd-b")

    assert tarball_of(x_forwarded.json()) == "https://npm.example.com/npm/fwd-b/-/fwd-b-1.0.0.tgz"
    assert tarball_of(forwarded.json()) == "https://npm.example.org/npm/fwd-b/-/fwd-b-1.0.0.tgz"
    assert tarball_of(plain.json()) == f"{proxy.registry}fwd-b/-/fwd-b-1.0.0.tgz"


async def test_the_public_url_wins_over_a_trusted_proxy_s_headers(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("fwd-c"))
    proxy = await start_proxy(public_registry.url, trusted_proxies=LOOPBACK,
                              public_url="https://npm.example.net/")

    answer = await proxy.request("GET", "npm/fwd-c", headers=HOSTILE)

    assert tarball_of(answer.json()) == "https://npm.example.net/npm/fwd-c/-/fwd-c-1.0.0.tgz"
    assert answer.headers["Vary"] == "Accept, Accept-Encoding"


async def test_vary_names_every_header_the_body_depends_on(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    public_registry.add(make_package("fwd-d"))
    by_host = await start_proxy(public_registry.url)
    behind_proxy = await start_proxy(public_registry.url, trusted_proxies=LOOPBACK)
    with_tokens = await start_proxy(public_registry.url,
                                    client_tokens_file=tokens_file(tmp_path, ci="t0k3n-ci-42"))
    auth = bearer("t0k3n-ci-42")

    host_only = await by_host.get("npm/fwd-d", Accept=NPM_ACCEPT)
    not_modified = await by_host.get("npm/fwd-d", Accept=NPM_ACCEPT,
                                     If_None_Match=host_only.headers["ETag"])
    version = await by_host.get("npm/fwd-d/1.0.0")
    proxied = await behind_proxy.get("npm/fwd-d")
    authenticated = await with_tokens.request("GET", "npm/fwd-d", headers=auth)

    assert host_only.headers["Vary"] == "Accept, Accept-Encoding, Host"
    assert not_modified.status == 304
    assert not_modified.headers["Vary"] == "Accept, Accept-Encoding, Host"
    assert version.headers["Vary"] == "Accept, Accept-Encoding, Host"
    assert proxied.headers["Vary"] == ("Accept, Accept-Encoding, Host, X-Forwarded-Proto, "
                                       "X-Forwarded-Host, Forwarded")
    assert authenticated.headers["Vary"] == "Accept, Accept-Encoding, Host, Authorization"


async def test_many_invented_host_values_evict_no_other_package(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # each rendering of `fwd-big` is ~40 KB: fifty hosts would hold ~4 MB in a 1 MiB cache
    versions = [f"1.0.{n}" for n in range(120)]
    public_registry.add(make_package("fwd-big", versions), make_package("fwd-small"))
    proxy = await start_proxy(public_registry.url, cache_max_bytes=1024 * 1024)
    assert (await proxy.get("npm/fwd-small")).status == 200
    assert (await proxy.get("npm/fwd-big")).status == 200

    for n in range(50):
        host = f"h{n}.invented.example"
        answer = await proxy.request("GET", "npm/fwd-big", headers={"Host": host})
        assert answer.status == 200
        assert f"http://{host}/npm/fwd-big/-/" in answer.body.decode()
    fetched = len(public_registry.requests)
    again = await proxy.get("npm/fwd-small")

    assert again.status == 200
    assert len(public_registry.requests) == fetched  # served from the cache, not refetched
    assert "fwd-small" in proxy.server.packuments.cache
    entry = proxy.server.packuments.cache.fresh("fwd-big")
    assert entry is not None
    assert len({base for _form, base in entry.value.renderings}) <= MAX_BASES
    assert proxy.server.packuments.cache.bytes <= 1024 * 1024
