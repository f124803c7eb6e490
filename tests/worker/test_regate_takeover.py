"""The worker's re-gate applies the takeover signals and registry signatures as serving does.

A job for a version the proxy would hold back (a new publisher, a tampered signature) is
refused by the worker too, before any tarball is fetched; a validly signed one is mirrored
with its signatures.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from structlog.testing import LogCapture

from mirrorgate.npm.names import parse_name
from mirrorgate.rules import parse_rules
from mirrorgate.upstream.filestore import FileStore
from tests.rules.signing import SigningKey, serve_keys, signed, takeover
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.worker.rig import RigFactory, assert_refused, events, job_from


async def test_a_job_for_a_version_from_a_new_publisher_is_refused_by_the_worker(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("taken", takeover("taken", "1.0.3",
                                                       age=timedelta(hours=1))))
    # an hour old: the one-day default cooldown is off, so the publisher rule is what denies
    rig = await make_rig(rules=parse_rules('[age]\nminimum = "0"\n\n'
                                           '[publisher]\nchange = "quarantine"\n'))
    await rig.queue.enqueue(job_from(public_registry, "taken", "1.0.3"))

    line = await assert_refused(rig, logs, tmp_path / "store", "denied", "taken")
    assert line["rule"] == "publisher-change"


async def test_a_job_whose_signature_does_not_verify_is_refused_and_a_signed_one_mirrored(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    key = SigningKey()
    serve_keys(public_registry, key)
    genuine = signed(key, "sig-worker", "1.0.0")
    tampered = make_version("sig-worker", "1.0.1", files={"index.js": b"steal()"},
                            dist={"signatures": signed(key, "sig-worker", "1.0.1")
                                  .dist("")["signatures"]})
    public_registry.add(make_package("sig-worker", [genuine, tampered]))
    rig = await make_rig(rules=parse_rules("[signatures]\nverify = true\n"))
    await rig.queue.enqueue(job_from(public_registry, "sig-worker", "1.0.1"))

    assert await rig.handle_next() == "retired"
    assert rig.retired("denied") == 1
    assert [path for path in rig.tarball_gets() if path.endswith(".tgz")] == []
    assert await FileStore(tmp_path / "store").packument(parse_name("sig-worker")) is None
    (line,) = events(logs, "mirror_job_refused")
    assert line["rule"] == "registry-signature"

    await rig.queue.enqueue(job_from(public_registry, "sig-worker", "1.0.0"))
    assert await rig.handle_next() == "published"
    stored = await FileStore(tmp_path / "store").packument(parse_name("sig-worker"))
    assert stored is not None
    assert stored["versions"]["1.0.0"]["dist"]["signatures"] == genuine.dist("")["signatures"]
