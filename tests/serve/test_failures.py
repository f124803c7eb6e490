"""Upstream failures and bounds: 502, 503 with Retry-After, 504, and serving what survives."""

from __future__ import annotations

import orjson
import pytest
from structlog.testing import capture_logs

from tests.serve.rig import NPM_ACCEPT, SharedPrivate, StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.ports import free_port


@pytest.mark.parametrize(("fault", "status", "retry_after"), [
    (Fault(status=500), 502, None),
    (Fault(status=503, headers={"Retry-After": "7"}), 503, "7"),
    (Fault(status=429, headers={"Retry-After": "12"}), 503, "12"),
    (Fault(status=503), 503, "30"),
    (Fault(body=b"<html>not json</html>"), 502, None),
    (Fault(body=b"[1, 2, 3]"), 502, None),
    (Fault(body=b"[" * 2000 + b"]" * 2000), 502, None),
    (Fault(body=b'{"error": "rate limited"}'), 502, None),
    (Fault(body=b"{}"), 502, None),
], ids=["500", "503", "429", "503-no-retry-after", "not-json", "not-an-object", "too-deep",
        "a-200-rate-limited", "a-200-empty-object"])
async def test_a_failing_public_upstream_maps_to_the_clients_status(
    fault: Fault, status: int, retry_after: str | None,
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("failing-one"))
    public_registry.fault("/failing-one", fault, exact=True)
    proxy = await start_proxy(public_registry.url)

    with capture_logs() as logs:
        answer = await proxy.get("npm/failing-one", Accept=NPM_ACCEPT)

    assert answer.status == status
    assert answer.headers["Content-Type"] == "application/json"
    assert "public upstream failed for failing-one" in answer.json()["error"]
    assert answer.headers.get("Retry-After") == retry_after
    assert [entry["upstream"] for entry in logs if entry["event"] == "upstream_failed"] == [
        "public"]


async def test_an_unreachable_public_upstream_is_a_502(start_proxy: StartProxy) -> None:
    proxy = await start_proxy(f"http://127.0.0.1:{free_port()}/")

    answer = await proxy.get("npm/anything")

    assert answer.status == 502
    assert answer.json()["kind"] == "unreachable"


async def test_a_public_upstream_slower_than_its_timeout_is_a_504(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("slow-one"))
    public_registry.fault("/slow-one", Fault(delay=2.0), exact=True)
    proxy = await start_proxy(public_registry.url, upstream_timeout=0.2)

    answer = await proxy.get("npm/slow-one")

    assert answer.status == 504
    assert answer.json()["kind"] == "timeout"


async def test_a_request_longer_than_the_request_timeout_is_a_504(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("stalled-one"))
    public_registry.fault("/stalled-one", Fault(delay=2.0), exact=True)
    proxy = await start_proxy(public_registry.url, request_timeout=0.2)

    answer = await proxy.get("npm/stalled-one")

    assert answer.status == 504
    assert "MIRRORGATE_REQUEST_TIMEOUT" in answer.json()["error"]
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="504") == 1


async def test_a_packument_larger_than_the_metadata_cap_is_a_502(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("huge-one", [f"1.0.{i}" for i in range(40)]))
    proxy = await start_proxy(public_registry.url, max_metadata_bytes=4096)

    answer = await proxy.get("npm/huge-one")

    assert answer.status == 502
    assert answer.json()["kind"] == "too-large"


async def test_a_packument_listing_200000_versions_is_refused_and_the_process_keeps_serving(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    versions = {f"0.{i // 1000}.{i % 1000}": {"name": "many-one", "version": "x"}
                for i in range(200_000)}
    body = orjson.dumps({"name": "many-one", "versions": versions})
    public_registry.add(make_package("many-one"), make_package("small-one"))
    public_registry.fault("/many-one", Fault(body=body), exact=True)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/many-one")
    other = await proxy.get("npm/small-one")

    assert answer.status == 502
    assert "200000 versions" in answer.json()["error"]
    assert other.status == 200
    assert proxy.metric("mirrorgate_refusals_total", reason="too_many_versions") == 1


async def test_when_only_the_public_upstream_fails_the_private_versions_are_served(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("half-down", ["1.0.0", "2.0.0"]))
    private_registry.publish(make_version("half-down", "1.0.0").marked())
    public_registry.fault("/half-down", Fault(status=500), exact=True)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/half-down")
    proxy.clock.advance(6)
    public_registry.clear_faults()
    recovered = await proxy.get("npm/half-down")

    assert answer.status == 200
    assert list(answer.json()["versions"]) == ["1.0.0"]
    assert answer.json()["dist-tags"] == {"latest": "1.0.0"}
    assert sorted(recovered.json()["versions"]) == ["1.0.0", "2.0.0"]


async def test_when_only_the_private_upstream_fails_the_public_versions_are_served(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("private-down", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url, private=f"http://127.0.0.1:{free_port()}/")

    with capture_logs() as logs:
        answer = await proxy.get("npm/private-down")

    assert answer.status == 200
    assert list(answer.json()["versions"]) == ["1.0.0"]
    assert [entry["upstream"] for entry in logs if entry["event"] == "upstream_failed"] == [
        "private"]


async def test_a_version_key_that_is_not_a_version_is_skipped_not_served(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    good = make_package("odd-keys", ["1.0.0"])
    document = good.packument(public_registry.url)
    document["versions"]["../../evil"] = dict(document["versions"]["1.0.0"])
    document["versions"]["2.0.0"] = "not an object"
    public_registry.add(good)
    public_registry.fault("/odd-keys", Fault(body=orjson.dumps(document)), exact=True)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/odd-keys")

    assert answer.status == 200
    assert list(answer.json()["versions"]) == ["1.0.0"]
    assert proxy.metric("mirrorgate_refusals_total", reason="bad_version_key") == 2


@pytest.mark.parametrize("answer", [b'{"error": "rate limited"}', b"{}"],
                         ids=["rate limited", "empty object"])
async def test_a_200_that_is_no_packument_serves_the_cached_one_then_the_outage_after_too(
    answer: bytes, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # a public-only name: a rate limiter's 200 read as public's answer would empty it
    public_registry.add(make_package("cached-one", ["1.0.0", "1.1.0"]))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)
    assert sorted((await proxy.get("npm/cached-one")).json()["versions"]) == ["1.0.0", "1.1.0"]
    public_registry.fault("/cached-one", Fault(body=answer), exact=True)
    proxy.clock.advance(61)

    with capture_logs() as logs:
        during = await proxy.get("npm/cached-one")
    public_registry.clear_faults()
    public_registry.fault("/cached-one", Fault(status=503), exact=True)
    proxy.clock.advance(10)
    after = await proxy.get("npm/cached-one")

    assert sorted(during.json()["versions"]) == ["1.0.0", "1.1.0"]  # stale-if-error
    assert sorted(after.json()["versions"]) == ["1.0.0", "1.1.0"]
    [line] = [entry for entry in logs if entry["event"] == "upstream_not_a_packument"]
    assert line["package"] == "cached-one"
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason="not-packument") == 1
