"""Failures that may pass are retried: the job is released, comes back, and is published once."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import LogCapture

from mirrorgate.config import Secret
from mirrorgate.integrity import TarballDigests
from mirrorgate.mirror import MirrorJob
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.upstream.registry import HttpRegistry, StoreRegistry
from mirrorgate.worker.target import MirrorTarget, PublishResult
from tests.servers.availability import serving
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.ports import free_port
from tests.servers.processes import until
from tests.servers.verdaccio import Verdaccio
from tests.worker.rig import RigFactory, events, job_from, running, with_target


async def test_a_public_500_is_retried_and_then_published_once(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    public_registry.fault(tarball_path("left-pad", "1.3.0"), Fault(status=500, times=1))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    async with running(rig.worker):
        await until(lambda: rig.outcomes("published") == 1)

    assert rig.outcomes("retried") == 1
    assert len(rig.tarball_gets()) == 2
    [retry] = events(logs, "mirror_retry")
    assert retry["reason"] == "public-failed"
    assert retry["package"] == "left-pad"
    assert (tmp_path / "store" / "left-pad" / "versions" / "1.3.0.json").is_file()
    assert await rig.queue.receive() == []


async def test_a_download_cut_short_is_retried_and_then_published_once(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    public_registry.fault(tarball_path("left-pad", "1.3.0"), Fault(truncate_after=100, times=1))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    async with running(rig.worker):
        await until(lambda: rig.outcomes("published") == 1)

    assert rig.outcomes("retried") == 1
    assert rig.tampered() == 0


async def test_a_target_that_is_down_is_retried_and_published_once_it_is_up(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    down = Verdaccio(tmp_path / "verdaccio", port=free_port())
    rig = await make_rig(target=down.url)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retried"  # nothing listens there yet

    with serving(down, "Verdaccio"):
        client = Upstream("target", down.url, timeout=5, max_metadata_bytes=1 << 20,
                          token=Secret(down.token))
        await client.start()
        try:
            worker = with_target(rig, MirrorTarget(HttpRegistry(client)))
            [message] = await rig.queue.receive()
            assert message.deliveries == 2
            assert await worker.handle(message) == "published"
            assert down.versions("left-pad") == ["1.3.0"]
        finally:
            await client.close()
    assert rig.outcomes("retried") == 1
    assert rig.outcomes("published") == 1
    assert len(rig.tarball_gets()) == 1  # the first attempt failed before any download


async def test_a_file_store_that_cannot_be_written_is_retried_until_it_can(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]))
    root = tmp_path / "store"
    root.write_text("a file where the store's directory should be")
    rig = await make_rig(target=root)
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))

    assert await rig.handle_next() == "retried"

    root.unlink()
    assert await rig.handle_next() == "published"
    assert rig.outcomes("published") == 1


class FailsOnce(MirrorTarget):
    """A real file-store target that raises an unexpected error on its first publish: the
    kind of bug the loop must survive."""

    def __init__(self, store: FileStore) -> None:
        super().__init__(StoreRegistry(store))
        self.failed = False

    async def publish(self, job: MirrorJob, tarball: bytes,
                      digests: TarballDigests | None = None, *,
                      unnamed: int | None = None) -> PublishResult:
        if not self.failed:
            self.failed = True
            raise RuntimeError("an unexpected bug")
        return await super().publish(job, tarball, digests, unnamed=unnamed)


async def test_an_unexpected_error_is_logged_with_the_job_and_the_loop_goes_on(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    public_registry.add(make_package("left-pad", ["1.3.0"]), make_package("zeta", ["1.0.0"]))
    rig = await make_rig()
    worker = with_target(rig, FailsOnce(FileStore(tmp_path / "store")))
    await rig.queue.enqueue(job_from(public_registry, "left-pad", "1.3.0"))
    await rig.queue.enqueue(job_from(public_registry, "zeta", "1.0.0"))

    async with running(worker):
        await until(lambda: rig.outcomes("published") == 2)

    [crash] = events(logs, "mirror_job_crashed")
    assert (crash["package"], crash["version"]) == ("left-pad", "1.3.0")
    assert crash["exc_info"]
    assert rig.outcomes("retried") == 1
