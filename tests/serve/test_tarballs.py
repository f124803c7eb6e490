"""Tarballs: private first, public admitted and streamed, the mirror job, refusals, aborts."""

from __future__ import annotations

import dataclasses

import aiohttp
import pytest
from structlog.testing import capture_logs

from mirrorgate.backends.memory import in_memory_double
from mirrorgate.mirror import MirrorJob, MirrorQueue, QueueStats, QueueTraits
from tests.serve.rig import FILE_STORE, SharedPrivate, StartProxy, publish_private
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.ports import free_port
from tests.sri import sri


@pytest.mark.parametrize("private", [None, FILE_STORE], ids=["verdaccio", "file-store"])
async def test_a_tarball_the_private_upstream_has_is_streamed_from_it_and_not_enqueued(
    public_registry: FixtureRegistry, private_registry: SharedPrivate, start_proxy: StartProxy,
    private: str | None,
) -> None:
    public_registry.add(make_package("private-first", ["1.0.0"]))
    ours = make_version("private-first", "1.0.0", description="rebuilt in house")
    proxy = await start_proxy(public_registry.url, private=private)
    await publish_private(proxy, private_registry, ours)

    answer = await proxy.get("npm/private-first/-/private-first-1.0.0.tgz")

    assert answer.status == 200
    assert answer.body == ours.tarball
    assert answer.body != public_registry.package("private-first").version("1.0.0").tarball
    # the packument is read first (the rules reach every version); no public tarball is asked
    assert [seen.path for seen in public_registry.requests if "/-/" in seen.path] == []
    assert await proxy.jobs() == []


async def test_an_admitted_public_tarball_is_streamed_and_a_job_carries_what_was_admitted(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("@jobs/admitted", ["1.0.0", "1.1.0"], readme="# long readme")
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/@jobs/admitted/-/admitted-1.1.0.tgz")
    jobs = await proxy.jobs()

    version = package.version("1.1.0")
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "application/octet-stream"
    assert answer.body == version.tarball
    assert len(jobs) == 1
    job = jobs[0]
    assert (job.name, job.version) == ("@jobs/admitted", "1.1.0")
    assert job.artifact.tarball_url == public_registry.tarball_url("@jobs/admitted", "1.1.0")
    assert job.artifact.filename == "admitted-1.1.0.tgz"
    assert job.artifact.size == len(version.tarball)
    assert [digest.sri() for digest in job.artifact.digests] == [
        version.integrity, sri("sha1", version.tarball)]
    assert job.manifest["dist"]["tarball"] == job.artifact.tarball_url
    assert job.manifest["dependencies"] == version.manifest["dependencies"]
    assert "readme" not in job.manifest
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1


async def test_a_head_request_answers_the_size_and_never_enqueues(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("head-only", ["1.0.0"])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.request("HEAD", "npm/head-only/-/head-only-1.0.0.tgz")

    assert answer.status == 200
    assert answer.body == b""
    assert int(answer.headers["Content-Length"]) == len(package.version("1.0.0").tarball)
    assert await proxy.jobs() == []
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0


async def test_a_denied_tarball_is_a_403_a_person_can_read_and_nothing_is_fetched(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("no-digest", [
        "1.0.0", make_version("no-digest", "1.1.0", digests="none")]))
    proxy = await start_proxy(public_registry.url)

    with capture_logs() as logs:
        answer = await proxy.get("npm/no-digest/-/no-digest-1.1.0.tgz")

    assert answer.status == 403
    body = answer.json()
    assert body["error"].startswith("mirrorgate denied no-digest@1.1.0 by its "
                                    "integrity-presence rule: ")
    assert body["rule"] == "integrity-presence"
    assert (body["package"], body["version"]) == ("no-digest", "1.1.0")
    assert "carries no digest" in body["reason"]
    assert not any("/-/" in seen.path for seen in public_registry.requests)
    assert [entry["rule"] for entry in logs if entry["event"] == "tarball_denied"] == [
        "integrity-presence"]
    assert await proxy.jobs() == []


@pytest.mark.parametrize(("tarball", "kind"), [
    ("http://169.254.169.254/latest/meta-data.tgz", "internal-address"),
    ("http://mirror.example.com/off-origin/-/off-origin-1.1.0.tgz", "off-origin"),
    ("file:///etc/passwd", "scheme"),
])
async def test_a_tarball_url_off_the_public_origin_is_never_followed(
    tarball: str, kind: str, public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("off-origin", [
        "1.0.0", make_version("off-origin", "1.1.0", dist={"tarball": tarball})]))
    proxy = await start_proxy(public_registry.url)

    with capture_logs() as logs:
        full = (await proxy.get("npm/off-origin")).json()
        answer = await proxy.get("npm/off-origin/-/off-origin-1.1.0.tgz")

    assert list(full["versions"]) == ["1.0.0"]
    restricted = full["policyRestrictions"]
    assert "- 1.1.0 (tarball-origin): " in restricted["message"]
    assert restricted["versions"]["1.1.0"]["dist"]["tarball"].startswith(proxy.registry)
    assert answer.status == 403
    assert answer.json()["rule"] == "tarball-origin"
    refused = [entry for entry in logs if entry["event"] == "tarball_url_refused"]
    assert [(entry["version"], entry["kind"]) for entry in refused] == [("1.1.0", kind)]
    assert proxy.metric("mirrorgate_refusals_total", reason="tarball_url") == 1


async def test_an_upstream_that_breaks_mid_tarball_gives_the_client_a_failed_transfer(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("cut-short", ["1.0.0"], files={"big.bin": bytes(range(256)) * 800})
    public_registry.add(package)
    public_registry.fault("/cut-short/-/cut-short-1.0.0.tgz", Fault(truncate_after=1000))
    proxy = await start_proxy(public_registry.url)

    with pytest.raises(aiohttp.ClientPayloadError):
        await proxy.get("npm/cut-short/-/cut-short-1.0.0.tgz")

    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="aborted") == 1


async def test_a_failing_private_upstream_is_logged_and_the_tarball_comes_from_public(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("fallback-one", ["1.0.0"])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url,
                              private=f"http://127.0.0.1:{free_port()}/")

    with capture_logs() as logs:
        answer = await proxy.get("npm/fallback-one/-/fallback-one-1.0.0.tgz")

    assert answer.status == 200
    assert answer.body == package.version("1.0.0").tarball
    failed = [entry for entry in logs if entry["event"] == "upstream_failed"]
    assert failed
    assert {entry["upstream"] for entry in failed} == {"private"}
    assert len(await proxy.jobs()) == 1


def failing_queue() -> MirrorQueue:
    """A queue whose enqueue raises, against its contract: the response must not care."""
    double = in_memory_double()

    async def enqueue(_job: MirrorJob) -> bool:
        raise RuntimeError("queue exploded")

    return dataclasses.replace(double, traits=QueueTraits("broken", crosses_processes=False,
                                                          redelivers=False),
                               enqueue=enqueue, stats=QueueStats)


async def test_a_queue_that_fails_never_fails_the_tarball_response(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    package = make_package("queue-broken", ["1.0.0"])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, queue=failing_queue())

    with capture_logs() as logs:
        answer = await proxy.get("npm/queue-broken/-/queue-broken-1.0.0.tgz")
        await proxy.get("npm/-/ping")

    assert answer.status == 200
    assert answer.body == package.version("1.0.0").tarball
    assert [entry["event"] for entry in logs if entry["event"] == "enqueue_failed"] == [
        "enqueue_failed"]
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0


async def test_a_tarball_the_public_upstream_lost_is_a_404(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("lost-one", ["1.0.0"]))
    public_registry.fault("/lost-one/-/lost-one-1.0.0.tgz", Fault(status=404))
    proxy = await start_proxy(public_registry.url)

    answer = await proxy.get("npm/lost-one/-/lost-one-1.0.0.tgz")

    assert answer.status == 404
    assert "no tarball" in answer.json()["error"]
    assert await proxy.jobs() == []



async def test_a_copy_mirrored_since_the_fill_is_served_when_public_lost_the_tarball(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # the packument, filled before the worker mirrored the version, calls it public-only;
    # public then answers 404 for the tarball (the package removed there): the mirror's copy
    # is what an install gets, verified against the admitted digest, never a 404
    version = make_version("moved-on", "1.0.0")
    public_registry.add(make_package("moved-on", [version]))
    with FixtureRegistry() as private:
        proxy = await start_proxy(public_registry.url, private=private.url)
        assert (await proxy.get("npm/moved-on")).status == 200
        private.add(make_package("moved-on", [version.marked()]))
        public_registry.fault("/moved-on/-/moved-on-1.0.0.tgz", Fault(status=404))

        answer = await proxy.get("npm/moved-on/-/moved-on-1.0.0.tgz")

    assert answer.status == 200
    assert answer.body == version.tarball


async def test_a_version_pulled_again_within_the_window_is_enqueued_once(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    public_registry.add(make_package("pulled-twice", ["1.0.0"]))
    proxy = await start_proxy(public_registry.url)
    path = "npm/pulled-twice/-/pulled-twice-1.0.0.tgz"

    first, again = await proxy.get(path), await proxy.get(path)
    within = len(await proxy.jobs())
    proxy.clock.advance(301)
    later = await proxy.get(path)

    assert first.status == again.status == later.status == 200
    assert within == 1
    assert len(await proxy.jobs()) == 2
