"""The worker verifies the bytes as stored, whatever content coding an upstream answers in.

A content-coded answer is never judged tampered (a false critical alert per version), and the
"already present" read-back of a Verdaccio-held tarball hashes the bytes Verdaccio serves, so
a registry whose metadata claims the right integrity over other bytes is caught.
"""

from __future__ import annotations

from structlog.testing import LogCapture

from tests.servers.fixture_registry import Fault, FixtureRegistry, Manners
from tests.servers.packages import make_package, make_version
from tests.servers.verdaccio import Verdaccio
from tests.sri import sri
from tests.worker.rig import RigFactory, events, job_from


async def test_a_tarball_the_public_upstream_gzips_anyway_is_verified_and_published_exactly(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    version = make_version("@coded/widget", "2.0.0", size=2_000_000)
    public_registry.add(make_package("@coded/widget", [version]))
    public_registry.manners = Manners(gzip="always", chunked=True)
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "@coded/widget", "2.0.0"))

    assert await rig.handle_next() == "published"

    assert rig.tampered() == 0
    assert events(logs, "mirror_tampered") == []
    served = verdaccio.download("@coded/widget", "widget-2.0.0.tgz")  # read back over HTTP
    assert sri("sha512", served) == version.integrity
    assert rig.metrics.registry.get_sample_value(
        "mirrorgate_upstream_decoded_total", {"upstream": "public", "coding": "gzip"}) == 1


async def test_a_public_tarball_in_a_coding_that_cannot_be_decoded_is_retired_not_tampered(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    public_registry.add(make_package("brotli-coded", ["1.0.0"]))
    public_registry.fault("/brotli-coded/-/", Fault(body=b"\x8b\x02\x80x\x03",
                                                    headers={"Content-Encoding": "br"}))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "brotli-coded", "1.0.0"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("public-coding") == 1
    assert rig.tampered() == 0
    [line] = events(logs, "mirror_retired")
    assert "'br'" in line["detail"]


async def test_the_already_present_read_back_of_a_verdaccio_held_tarball_agrees_on_the_digest(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    package = make_package("held", [make_version("held", "1.0.0", size=500_000)])
    public_registry.add(package)
    verdaccio.publish(package.version("1.0.0").marked())  # mirrored earlier: it carries the mark
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "held", "1.0.0"))

    assert await rig.handle_next() == "already_present"

    assert rig.tarball_gets() == []
    assert events(logs, "mirror_target_conflict") == []


async def test_a_target_whose_metadata_claims_the_integrity_over_other_bytes_is_a_conflict(
        make_rig: RigFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
        logs: LogCapture) -> None:
    # Verdaccio checks `dist.shasum` but stores whatever `dist.integrity` a publisher sends: an
    # impostor publishes its own bytes under the public version's sha512, which a metadata-only
    # check (sha512 being the strongest digest both carry) would accept.
    public_registry.add(make_package("claimed", ["1.0.0"]))
    real = public_registry.package("claimed").version("1.0.0")
    # (marked as a mirrored copy, or the name would simply be first-party and refused as such)
    impostor = make_version("claimed", "1.0.0", files={"index.js": b"evil();\n"}).with_dist(
        integrity=real.integrity).marked()
    verdaccio.publish(impostor)
    rig = await make_rig(target=verdaccio)
    await rig.queue.enqueue(job_from(public_registry, "claimed", "1.0.0"))

    assert await rig.handle_next() == "retired"

    assert rig.retired("target-conflict") == 1
    [line] = events(logs, "mirror_target_conflict")
    assert line["stored"] == impostor.integrity  # the digest of the bytes it really serves
