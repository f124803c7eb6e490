"""The pull log's record of a tarball answer, written by the route itself: a tarball served
from public is a pull from "public"; a transfer cut because its bytes did not match what was
admitted installed nothing, and is logged refused with the cause; a HEAD is no pull."""

from __future__ import annotations

from mirrorgate.gate.pulls.log import PullLog
from tests.serve.rig import FILE_STORE, StartProxy
from tests.serve.test_notifications import EVIL, cut
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import until


async def test_a_served_tarball_is_a_public_pull_and_a_cut_transfer_a_refusal_with_its_cause(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("plain-bytes", ["1.0.0"]),
                        make_package("bent-bytes", ["1.0.0"]))
    public_registry.fault(tarball_path("bent-bytes", "1.0.0"), Fault(body=EVIL))
    proxy = await start_proxy(public_registry.url, private=FILE_STORE)
    facts = proxy.proxy.gate.facts
    pulls = PullLog(facts, retention_days=90)
    proxy.server.tarballs.pulls = pulls  # as `mirrorgate serve` wires it (`process`)

    assert (await proxy.get("npm" + tarball_path("plain-bytes", "1.0.0"))).status == 200
    await cut(proxy, "bent-bytes")  # the attacker's bytes: the transfer ends short
    head = await proxy.request("HEAD", "npm" + tarball_path("plain-bytes", "1.0.0"))
    assert head.status == 200
    await until(lambda: pulls.buffered == 2)
    assert await pulls.flush() == 2

    assert facts.store is not None
    found = await facts.store.pulls(limit=10)
    assert [(p.client, p.name, p.version, p.source) for p in found] == [
        ("anonymous", "plain-bytes", "1.0.0", "public")]
    [refused] = await facts.store.refused(limit=10)
    assert (refused.client, refused.name, refused.version, refused.sources) == (
        "anonymous", "bent-bytes", "1.0.0", ("refused:tampered",))
    assert all(i.startswith("sha512-") for i in (found[0].integrity, *refused.integrity))
