"""The cache seen through the proxy: warm hits, 304s, ETag revalidation, single flight."""

from __future__ import annotations

import asyncio

import pytest

from tests.metric_samples import metric_value, text_samples
from tests.serve.rig import FILE_STORE, NPM_ACCEPT, SharedPrivate, StartProxy, publish_private
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, make_version


def packument_requests(registry: FixtureRegistry, path: str) -> list[str | None]:
    """The If-None-Match of every packument request the registry saw for `path`."""
    return [seen.headers.get("If-None-Match") for seen in registry.requests
            if seen.path == path]


async def test_a_warm_packument_is_served_without_asking_the_upstream(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("warm-one"))
    proxy = await start_proxy(public_registry.url)

    answers = [await proxy.get("npm/warm-one", Accept=NPM_ACCEPT) for _ in range(5)]

    assert {answer.status for answer in answers} == {200}
    assert len({answer.body for answer in answers}) == 1
    assert len(packument_requests(public_registry, "/warm-one")) == 1
    assert proxy.metric("mirrorgate_cache_total", result="hit") == 4
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="200") == 5


async def test_the_metrics_page_counts_each_warm_hit_once_however_often_it_is_scraped(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # warm hits are tallied as plain ints and folded into the counters when the registry is
    # read: a scrape must see every hit before it, and a second scrape must not count them again
    public_registry.add(make_package("tallied-one"))
    proxy = await start_proxy(public_registry.url)

    async def scraped(name: str, **labels: str) -> float:
        page = await proxy.get("metrics")
        return metric_value(text_samples(page.body.decode()), name, **labels)

    first = await proxy.get("npm/tallied-one", Accept=NPM_ACCEPT)
    for _ in range(3):
        await proxy.get("npm/tallied-one", Accept=NPM_ACCEPT)
    once = await scraped("mirrorgate_requests_total", route="packument", status="200")
    twice = await scraped("mirrorgate_requests_total", route="packument", status="200")
    await proxy.get("npm/tallied-one", Accept=NPM_ACCEPT, If_None_Match=first.headers["ETag"])

    assert (once, twice) == (4, 4)
    assert await scraped("mirrorgate_cache_total", result="hit") == 4  # the 304 was one too
    assert await scraped("mirrorgate_requests_total", route="packument", status="304") == 1
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="200") == 4


async def test_long_negotiation_headers_are_read_without_the_memo_and_answered_alike(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # the warm path memoises on the headers it reads only while they are short (a client's
    # headers as memo keys are bounded in bytes): longer ones take the unmemoised reading,
    # which must negotiate the form and the coding exactly as the memoised one does
    public_registry.add(make_package("long-headers"))
    proxy = await start_proxy(public_registry.url)
    padding = ", ".join(f"text/x-filler-{n}; q=0.1" for n in range(40))
    long_accept = f"{NPM_ACCEPT}, {padding}"
    long_coding = ", ".join(f"x-filler-{n}; q=0.1" for n in range(20)) + ", gzip"
    assert len(long_accept) + len(long_coding) > 512

    answers = []
    for accept, coding in ((NPM_ACCEPT, "gzip"), (long_accept, long_coding),
                           (long_accept, long_coding), (long_accept, "identity")):
        answers.append(await proxy.request("GET", "npm/long-headers", decompress=False,
                                           headers={"Accept": accept, "Accept-Encoding": coding}))

    short, long_first, long_warm, long_plain = answers
    for answer in (long_first, long_warm):
        assert answer.status == 200
        assert answer.headers["Content-Type"] == short.headers["Content-Type"]
        assert answer.headers["Content-Encoding"] == "gzip"
        assert answer.body == short.body
    assert "Content-Encoding" not in long_plain.headers
    assert long_plain.headers["ETag"] == short.headers["ETag"]
    assert proxy.metric("mirrorgate_cache_total", result="hit") == 3  # each a warm hit


async def test_a_matching_if_none_match_answers_304_and_gzip_is_sent_when_accepted(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("etag-one"))
    proxy = await start_proxy(public_registry.url)

    first = await proxy.request("GET", "npm/etag-one", decompress=False,
                                headers={"Accept-Encoding": "gzip", "Accept": NPM_ACCEPT})
    etag = first.headers["ETag"]
    again = await proxy.get("npm/etag-one", Accept=NPM_ACCEPT, If_None_Match=etag)
    other_form = await proxy.get("npm/etag-one", If_None_Match=etag)
    plain = await proxy.request("GET", "npm/etag-one",
                                headers={"Accept-Encoding": "identity", "Accept": NPM_ACCEPT})

    assert first.headers["Content-Encoding"] == "gzip"
    assert first.body[:2] == b"\x1f\x8b"
    assert again.status == 304
    assert again.body == b""
    assert again.headers["ETag"] == etag
    assert other_form.status == 200
    assert "Content-Encoding" not in plain.headers
    assert plain.headers["ETag"] == etag
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="304") == 1


async def test_after_the_ttl_the_packument_is_revalidated_with_the_upstreams_etag(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("revalidate-one"))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)
    before = await proxy.get("npm/revalidate-one")

    proxy.clock.advance(61)
    after = await proxy.get("npm/revalidate-one")

    sent = packument_requests(public_registry, "/revalidate-one")
    assert sent[0] is None
    assert sent[1] is not None
    assert sent[1].startswith('"')
    assert after.headers["ETag"] == before.headers["ETag"]
    assert proxy.metric("mirrorgate_cache_total", result="refresh") == 1


async def test_a_new_upstream_version_appears_once_the_ttl_has_passed(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("changing-one", ["1.0.0"])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)
    await proxy.get("npm/changing-one")
    public_registry.add(package.with_version(make_version("changing-one", "1.1.0")))

    within = (await proxy.get("npm/changing-one")).json()
    proxy.clock.advance(61)
    after = (await proxy.get("npm/changing-one")).json()

    assert list(within["versions"]) == ["1.0.0"]
    assert list(after["versions"]) == ["1.0.0", "1.1.0"]
    assert after["dist-tags"]["latest"] == "1.1.0"


async def test_concurrent_first_requests_for_a_package_make_one_upstream_fetch(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("flight-one"))
    public_registry.fault("/flight-one", Fault(delay=0.3), exact=True)
    proxy = await start_proxy(public_registry.url)

    answers = await asyncio.gather(*(proxy.get("npm/flight-one", Accept=NPM_ACCEPT)
                                     for _ in range(20)))

    assert {answer.status for answer in answers} == {200}
    assert len(packument_requests(public_registry, "/flight-one")) == 1


async def test_a_cached_packument_is_still_served_when_revalidation_fails(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("stale-one"))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)
    before = await proxy.get("npm/stale-one")
    public_registry.fault("/stale-one", Fault(status=500), exact=True)

    proxy.clock.advance(61)
    after = await proxy.get("npm/stale-one")

    assert after.status == 200
    assert after.body == before.body
    assert proxy.metric("mirrorgate_cache_total", result="stale") == 1


@pytest.mark.parametrize("private", [None, FILE_STORE], ids=["verdaccio", "file-store"])
async def test_the_private_answer_is_cached_and_a_change_there_rebuilds_the_packument(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    private: str | None,
) -> None:
    # 1.5.0 is on public from the start; the worker's copy lands in the private registry
    # within the TTL (a mirrored version public does not list would be a withdrawal,
    # docs/withdrawals.md), with bytes of its own: the private copy is the one served
    public_registry.add(make_package("private-change", ["1.0.0", "1.5.0", "2.0.0"]))
    proxy = await start_proxy(public_registry.url, private=private, cache_ttl=60.0)
    first = (await proxy.get("npm/private-change")).json()
    await publish_private(proxy, private_registry,
                          make_version("private-change", "1.5.0", description="ours").marked())
    within = (await proxy.get("npm/private-change")).json()
    proxy.clock.advance(61)
    after = (await proxy.get("npm/private-change")).json()

    assert sorted(first["versions"]) == sorted(after["versions"]) == ["1.0.0", "1.5.0", "2.0.0"]
    assert first["versions"]["1.5.0"]["description"] != "ours"
    assert within == first
    assert after["versions"]["1.5.0"]["description"] == "ours"
    revalidations = packument_requests(public_registry, "/private-change")
    assert len(revalidations) == 3
    assert revalidations[1] is not None
    assert revalidations[2] is None
