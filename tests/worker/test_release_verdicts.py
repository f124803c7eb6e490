"""The worker judges a job's version by its release verdict, and reads and judges the bytes
first when there is none (docs/verdicts.md): a job nobody's pull judged (a sidecar's, one
written by anyone with send rights to the queue) never publishes a version the proxy would
refuse. The attack: the Shai-Hulud shape's 1.4.3 enqueued straight onto the queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.rules import DEFAULT_RULES, LiveRules, parse_rules
from mirrorgate.rules.release import ReleaseVerdict
from mirrorgate.upstream.filestore import FileStore
from tests.serve.rig import RunningProxy, make_settings, open_proxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.incidents import chalk_shape, shai_hulud_shape
from tests.servers.packages import make_package, make_version, tarball_path
from tests.worker.rig import handled, in_process_worker, job_from

RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")


@pytest.fixture
async def proxy(public_registry: FixtureRegistry, tmp_path: Path) -> AsyncIterator[RunningProxy]:
    """A proxy as `mirrorgate serve` builds it with its worker, the release signals on."""
    private = tmp_path / "private"
    settings = make_settings(public_registry.url, f"file://{private}", tmp_path / "data")
    stack = await open_proxy(settings, store=private, rules=RULES, queue=None,
                             worker_beside=True)
    yield stack.running
    await stack.close()


async def test_a_job_for_a_version_never_judged_is_judged_first_and_a_refusal_retires_it(
        public_registry: FixtureRegistry, proxy: RunningProxy, tmp_path: Path) -> None:
    public_registry.add(shai_hulud_shape())
    worker = in_process_worker(proxy, tmp_path / "store")

    outcome = await handled(worker, job_from(public_registry, "worm-host", "1.4.3"))

    assert outcome == "retired"
    assert await FileStore(tmp_path / "store").packument(parse_name("worm-host")) is None
    verdict = proxy.server.gate.release.remembered(
        "worm-host", "1.4.3", public_registry.package("worm-host").version("1.4.3").integrity)
    assert verdict is not None  # kept: the proxy refuses it at once, without a read
    assert (verdict.rule, verdict.compared_with) == ("new-install-script", "1.4.2")
    public_registry.clear_requests()
    refused = await proxy.get("npm" + tarball_path("worm-host", "1.4.3"))
    assert refused.status == 403
    assert not any(seen.path.endswith(".tgz") for seen in public_registry.requests)

    clean = await handled(worker, job_from(public_registry, "worm-host", "1.4.2"))
    assert clean == "published"  # the clean release of the same package


@pytest.fixture
async def default_proxy(public_registry: FixtureRegistry,
                        tmp_path: Path) -> AsyncIterator[RunningProxy]:
    """As `mirrorgate serve` with no rules file: the capability signals and
    unreadable-release are on."""
    private = tmp_path / "private"
    settings = make_settings(public_registry.url, f"file://{private}", tmp_path / "data")
    stack = await open_proxy(settings, store=private, rules=DEFAULT_RULES, queue=None,
                             worker_beside=True)
    yield stack.running
    await stack.close()


def gaining_the_network_and_old_native(public_registry: FixtureRegistry) -> None:
    """`fresh-setup`, a week old, whose 1.0.1 adds `node setup.js` at install, which loads
    `https`; `old-native` (first published in 2020), whose postinstall prints a line."""
    now = datetime.now(UTC)
    files = {"index.js": b"module.exports = 1;\n", "setup.js": b"require('https');\n"}
    public_registry.add(make_package("fresh-setup", [
        make_version("fresh-setup", "1.0.0", files=files, published=now - timedelta(days=7)),
        make_version("fresh-setup", "1.0.1", files=files, published=now - timedelta(days=2),
                     scripts={"postinstall": "node setup.js"})]))
    public_registry.add(make_package("old-native", ["1.0.0"], install_script=True))


async def test_with_no_rules_file_an_install_script_gaining_the_network_is_judged_and_retired(
        public_registry: FixtureRegistry, default_proxy: RunningProxy, tmp_path: Path) -> None:
    # fresh-setup@1.0.1 enqueued by hand: the default's own signals judge it before
    # anything is published, as the relay would
    gaining_the_network_and_old_native(public_registry)
    worker = in_process_worker(default_proxy, tmp_path / "store")

    refused = await handled(worker, job_from(public_registry, "fresh-setup", "1.0.1"))
    public_registry.clear_requests()
    old = await handled(worker, job_from(public_registry, "old-native", "1.0.0"))

    assert refused == "retired"
    verdict = default_proxy.server.gate.release.remembered(
        "fresh-setup", "1.0.1",
        public_registry.package("fresh-setup").version("1.0.1").integrity)
    assert verdict is not None
    # its install code gains the network over 1.0.0's; the package being a week old, the
    # same code judged alone is held too
    assert (verdict.rule, verdict.compared_with) == ("new-capability", "1.0.0")
    assert {"new-capability", "young-package-capability"} <= {
        found.signal for found in verdict.fired}
    # an old package (first published in 2020) whose postinstall prints a line is read and
    # gains nothing: published. The judge reads the bytes the worker downloaded and verified,
    # so the job's tarball is fetched once (a second download could bring other bytes than
    # those judged, and escapes the worker's MIRRORGATE_MAX_TARBALL_BYTES)
    assert old == "published"
    assert default_proxy.server.gate.release.remembered(
        "old-native", "1.0.0",
        public_registry.package("old-native").version("1.0.0").integrity) is not None
    assert [seen.path for seen in public_registry.requests
            if seen.path.endswith(".tgz")] == [tarball_path("old-native", "1.0.0")]
    # nor is its packument gated whole: the re-gate and the verdict read the version alone
    assert "old-native" not in default_proxy.server.packuments.cache
    assert "old-native@1.0.0" in default_proxy.server.packuments.alone


async def test_a_sidecar_judges_a_release_nobody_pulled_on_its_one_download_of_the_bytes(
        public_registry: FixtureRegistry, default_proxy: RunningProxy, tmp_path: Path) -> None:
    # The attack: a job for a release no pull judged (1.0.1's install code gains the
    # network), written straight onto a sidecar worker's queue. Its judge reads the bytes the
    # worker downloaded and verified against the job's digest, by the re-gate's own gating:
    # retired all the same, and never a second download of its own (other bytes than those
    # verified, under another cap than MIRRORGATE_MAX_TARBALL_BYTES). The control: an old
    # package's clean release, published on one packument and one tarball request.
    gaining_the_network_and_old_native(public_registry)
    worker = in_process_worker(default_proxy, tmp_path / "store", alone=True)

    refused = await handled(worker, job_from(public_registry, "fresh-setup", "1.0.1"))
    read_for_it = tarballs_asked(public_registry)
    public_registry.clear_requests()
    old = await handled(worker, job_from(public_registry, "old-native", "1.0.0"))

    assert refused == "retired"
    judge = default_proxy.server.gate.release
    verdict = judge.remembered("fresh-setup", "1.0.1",
                               public_registry.package("fresh-setup").version("1.0.1").integrity)
    assert verdict is not None
    assert (verdict.rule, verdict.compared_with) == ("new-capability", "1.0.0")
    # its own bytes once (the worker's download), the release it is compared with once
    assert read_for_it == [tarball_path("fresh-setup", "1.0.1"),
                           tarball_path("fresh-setup", "1.0.0")]
    assert not (tmp_path / "store" / "fresh-setup").exists()
    assert old == "published"
    assert judge.remembered("old-native", "1.0.0",
                            public_registry.package("old-native").version("1.0.0").integrity
                            ) is not None
    assert [seen.path for seen in public_registry.requests] == [
        "/old-native", tarball_path("old-native", "1.0.0")]


def tarballs_asked(public: FixtureRegistry) -> list[str]:
    return [seen.path for seen in public.requests if seen.path.endswith(".tgz")]


async def test_a_job_after_an_unchecked_pull_judges_again_without_fetching_the_bytes_again(
        public_registry: FixtureRegistry, proxy: RunningProxy) -> None:
    # 5.6.1 appends an obfuscated blob; 5.6.0, its baseline, fails at the pull (an outage):
    # served unchecked, no verdict kept. The worker's job seconds later judges it again (the
    # outage may be over), reading the bytes the relay read, not downloading them again.
    package = chalk_shape()
    public_registry.add(package)
    public_registry.fault(tarball_path(package.name, "5.6.0"), Fault(status=503))
    served = await proxy.get("npm" + tarball_path(package.name, "5.6.1"))
    assert served.status == 200
    judge = proxy.server.gate.release
    bytes_ = package.version("5.6.1").integrity
    assert judge.remembered(package.name, "5.6.1", bytes_) is None  # unchecked: not kept
    public_registry.clear_faults()
    public_registry.clear_requests()

    verdict = await judge.verdict_for(parse_name(package.name), "5.6.1", bytes_)

    assert isinstance(verdict, ReleaseVerdict)  # as strict as a pull judging it again
    assert (verdict.rule, verdict.compared_with) == ("obfuscated-code", "5.6.0")
    assert tarballs_asked(public_registry) == [tarball_path(package.name, "5.6.0")]


async def test_in_report_mode_a_job_after_an_unchecked_pull_reads_nothing_again_until_a_reload(
        public_registry: FixtureRegistry, tmp_path: Path) -> None:
    # report mode refuses nothing: the pull served 5.6.1 unchecked and said so; judging it
    # again for the job could only say so again. A reload to enforce judges it again.
    package = chalk_shape()
    public_registry.add(package)
    public_registry.fault(tarball_path(package.name, "5.6.0"), Fault(status=503))
    path = tmp_path / "rules.toml"
    path.write_text('mode = "report"\n\n[age]\nminimum = "0"\n\n[release]\n',
                    encoding="utf-8")
    rules = LiveRules.load(path)
    private = tmp_path / "private"
    settings = make_settings(public_registry.url, f"file://{private}", tmp_path / "data")
    stack = await open_proxy(settings, store=private, rules=rules, queue=None,
                             worker_beside=True)
    try:
        proxy = stack.running
        served = await proxy.get("npm" + tarball_path(package.name, "5.6.1"))
        assert served.status == 200
        public_registry.clear_requests()
        worker = in_process_worker(proxy, tmp_path / "store")

        outcome = await handled(worker, job_from(public_registry, package.name, "5.6.1"))

        assert outcome == "published"
        assert tarball_path(package.name, "5.6.0") not in tarballs_asked(public_registry)
        judge = proxy.server.gate.release
        path.write_text('[age]\nminimum = "0"\n\n[release]\n', encoding="utf-8")
        assert rules.reload()
        public_registry.clear_faults()
        verdict = await judge.verdict_for(parse_name(package.name), "5.6.1",
                                          package.version("5.6.1").integrity)
        assert isinstance(verdict, ReleaseVerdict)
        assert (verdict.rule, verdict.compared_with) == ("obfuscated-code", "5.6.0")
        assert verdict.in_force(judge.now())
    finally:
        await stack.close()
