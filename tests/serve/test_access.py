"""Client tokens on the proxy: the anonymous reader is refused, a known client is let in.

The attack this stops: anyone who can reach the port reading every private packument and
tarball, carried by mirrorgate's own private token. With a tokens file, every /npm/ request and
/metrics need a client token; /livez and /readyz stay open for the kubelet.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from tests.access.rig import bearer, tokens_file
from tests.serve.rig import RunningProxy, StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package

TOKEN = "mgc_client-token-for-ci-1d9e7b"  # noqa: S105 - a test token
OTHER = "mgc_someone-elses-token-55aa01"






def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


@pytest.fixture
async def guarded_proxy(public_registry: FixtureRegistry, start_proxy: StartProxy,
                        tmp_path: Path) -> RunningProxy:
    public_registry.add(make_package("leftpad", ["1.0.0"]))
    return await start_proxy(public_registry.url,
                             client_tokens_file=tokens_file(tmp_path, ci=TOKEN))


@pytest.mark.parametrize("path", ["npm/leftpad", "npm/leftpad/1.0.0",
                                  "npm/leftpad/-/leftpad-1.0.0.tgz", "npm/-/ping",
                                  "npm/-/whoami", "npm/-/v1/search", "metrics", "nowhere"])
async def test_an_anonymous_request_is_refused_with_401_and_a_bearer_challenge(
    path: str, guarded_proxy: RunningProxy, public_registry: FixtureRegistry,
) -> None:
    answer = await guarded_proxy.request("GET", path)

    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="mirrorgate"'
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["reason"] == "no token"
    assert "_authToken" in answer.json()["error"]
    assert public_registry.requests == []
    assert guarded_proxy.metric("mirrorgate_refusals_total", reason="no_client_token") == 1


@pytest.mark.parametrize("headers", [
    bearer(OTHER), basic("ci", OTHER), bearer(TOKEN[:-1]), bearer(TOKEN + "x"),
    {"Authorization": TOKEN}, basic(TOKEN, "x"),
    {"Authorization": "Bearer sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()},
])
async def test_a_wrong_token_is_refused_with_401(
    headers: dict[str, str], guarded_proxy: RunningProxy, public_registry: FixtureRegistry,
) -> None:
    answer = await guarded_proxy.request("GET", "npm/leftpad", headers=headers)

    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="mirrorgate"'
    assert answer.json()["reason"] in ("unknown token", "no token")
    assert TOKEN not in answer.body.decode()
    assert public_registry.requests == []


@pytest.mark.parametrize("headers", [bearer(TOKEN), basic("anyone", TOKEN), basic("", TOKEN)])
async def test_a_known_token_as_bearer_or_as_basic_s_password_is_served(
    headers: dict[str, str], guarded_proxy: RunningProxy,
) -> None:
    packument = await guarded_proxy.request("GET", "npm/leftpad", headers=headers)
    tarball = await guarded_proxy.request("GET", "npm/leftpad/-/leftpad-1.0.0.tgz",
                                          headers=headers)
    whoami = await guarded_proxy.request("GET", "npm/-/whoami", headers=headers)
    ping = await guarded_proxy.request("GET", "npm/-/ping?write=true", headers=headers)

    assert packument.status == tarball.status == 200
    assert whoami.status == 200
    assert whoami.json() == {"username": "ci"}
    assert ping.status == 200
    assert ping.json() == {}


async def test_a_warm_packument_still_needs_a_token(guarded_proxy: RunningProxy) -> None:
    served = await guarded_proxy.request("GET", "npm/leftpad", headers=bearer(TOKEN))
    anonymous = await guarded_proxy.request("GET", "npm/leftpad")

    assert served.status == 200
    assert anonymous.status == 401
    assert anonymous.body.find(b"leftpad") == -1


async def test_health_routes_stay_open_for_the_kubelet(guarded_proxy: RunningProxy) -> None:
    assert (await guarded_proxy.request("GET", "livez")).status == 200
    assert (await guarded_proxy.request("GET", "readyz")).status == 200
    assert (await guarded_proxy.request("GET", "metrics", headers=bearer(TOKEN))).status == 200


async def test_metrics_opens_without_a_token_only_when_told_to(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    proxy = await start_proxy(public_registry.url, metrics_open=True,
                              client_tokens_file=tokens_file(tmp_path, ci=TOKEN))

    assert (await proxy.request("GET", "metrics")).status == 200
    assert (await proxy.request("GET", "npm/-/ping")).status == 401


async def test_without_a_tokens_file_the_proxy_stays_open(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("leftpad", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url)

    assert (await proxy.request("GET", "npm/leftpad")).status == 200
    assert (await proxy.request("GET", "npm/leftpad", headers=bearer(OTHER))).status == 200
    assert (await proxy.request("GET", "metrics")).status == 200
    whoami = await proxy.request("GET", "npm/-/whoami")
    assert whoami.status == 401
    assert "MIRRORGATE_CLIENT_TOKENS_FILE" in whoami.json()["error"]
