"""Past the bound of writes the gate must keep, the proxy refuses what would add one.

The state store takes no writes (another process holds the SQLite file's write lock); what
the gate must keep (withdrawals, first-party names, refusals, waivers) waits in a buffer that
never drops one. Once it is full, a request whose answer would need one more is answered 503
with Retry-After, and no stale entry from before stands in for it: the takedown is never known
here and forgotten at the next restart. Here the bound is lowered to one write, reached by one
first-party name learned from the private registry (a fixture registry: it must hold mirrored
copies, marked).
"""

from __future__ import annotations

from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.store.conftest import Place

V100 = make_version("full-gone", "1.0.0")
V101 = make_version("full-gone", "1.0.1")


async def test_a_takedown_that_cannot_be_kept_is_refused_503_not_served_from_a_stale_entry(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("full-gone", [V100, V101]),
                        make_package("full-plain", ["2.0.0"]))
    with FixtureRegistry(make_package("full-gone", [V100.marked(), V101.marked()]),
                         make_package("full-ours", ["1.0.0"])) as private:
        proxy = await start_proxy(public_registry.url, private=private.url, cache_ttl=60.0)
        assert sorted((await proxy.get("npm/full-gone")).json()["versions"]) == [
            "1.0.0", "1.0.1"]
        facts = proxy.proxy.gate.facts
        facts.max_kept = 1
        place = Place("sqlite", f"sqlite:{proxy.proxy.settings.data_dir / 'state.sqlite3'}")
        with place.away():
            assert (await proxy.get("npm/full-ours")).status == 200  # one kept write waits
            public_registry.add(make_package("full-gone", [V100]))  # 1.0.1 taken down
            proxy.clock.advance(61)
            packument = await proxy.get("npm/full-gone")
            tarball = await proxy.get("npm/full-gone/-/full-gone-1.0.1.tgz")
            plain = await proxy.get("npm/full-plain")  # nothing to keep: served as ever
        await proxy.written()
        proxy.clock.advance(61)
        after = await proxy.get("npm/full-gone/-/full-gone-1.0.1.tgz")

    assert packument.status == 503
    assert packument.headers["Retry-After"] == "30"
    assert "cannot record what it learned" in packument.json()["error"]
    assert tarball.status == 503
    assert plain.status == 200
    assert proxy.metric("mirrorgate_store_writes_refused_total") >= 2
    assert proxy.metric("mirrorgate_store_writes_dropped_total") == 0
    assert after.status == 403  # learned again once the store took what waited
    assert "public-withdrawn" in after.body.decode()
