"""Row 12 of the faults table: a tarball bigger than the worker will mirror.

> | 12 | an oversized tarball for the worker (above `MIRRORGATE_MAX_TARBALL_BYTES`) | not
> published; retired with a reason; the worker keeps running |

The cap is set small (64 KiB) and the tarball made bigger. Two ways to be too big: the public
upstream says so up front (a truthful Content-Length: the fixture registry), or it does not say
and keeps sending (chunked, no Content-Length, never ending: a small `ThreadedApp` upstream
written here, which counts what it managed to send). Either way the job is retired
`oversized`, nothing reaches the store, and the next job is published. The default's
capability signals read a never-judged job's release on the worker's own download, so the
endless body is cut at the worker's cap before anything reads it (a reading that fetched for
itself would run on under its own bound and timeout).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web

from mirrorgate.integrity import digests_from_dist
from mirrorgate.mirror import MirrorArtifact, MirrorJob
from tests.faults.guarded import GuardedFactory
from tests.faults.worker_jobs import (
    logged,
    send_to_sqs,
    stored_tarball,
    stored_version,
)
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixturePackage, make_package, tarball_filename, tarball_path
from tests.servers.processes import http_request, wait_for
from tests.servers.sqs_server import SqsServer, sqs_environment
from tests.servers.threaded import ThreadedApp

CAP = 64 * 1024
ENDLESS_CHUNK = 16 * 1024
ENDLESS_GIVES_UP_AFTER = 256 * 1024 * 1024
"""The endless upstream stops here if nobody hangs up first (a worker that never stopped)."""


def test_a_tarball_declared_above_the_cap_is_retired_unpublished_and_the_worker_keeps_running(
    guarded: GuardedFactory, public_registry: FixtureRegistry,
) -> None:
    blob = random.Random(12).randbytes(200_000)  # incompressible: the tarball stays that big
    hefty = make_package("hefty", ["1.0.0"], files={"index.js": b"module.exports = 1;\n",
                                                    "blob.bin": blob})
    slim = make_package("slim", ["1.0.0"])
    public_registry.add(hefty, slim)
    assert len(hefty.versions["1.0.0"].tarball) > 3 * CAP
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_MAX_TARBALL_BYTES": str(CAP)})

    served = http_request("GET", proxy.registry_url.rstrip("/") + tarball_path("hefty", "1.0.0"))
    wait_for(lambda: proxy.metric("mirrorgate_jobs_retired_total", reason="oversized") == 1,
             timeout=15, message="the oversized job to be retired")
    after = http_request("GET", proxy.registry_url.rstrip("/") + tarball_path("slim", "1.0.0"))
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=15, message="the next job to be published")

    assert served.status == 200  # the cap is the worker's: the client still gets its tarball
    assert served.body == hefty.versions["1.0.0"].tarball
    assert after.status == 200
    assert stored_version(proxy, "hefty", "1.0.0") is None
    assert stored_tarball(proxy, "hefty", "1.0.0") is None
    assert stored_tarball(proxy, "slim", "1.0.0") == slim.versions["1.0.0"].tarball
    [line] = logged(proxy, "mirror_retired")
    assert line["reason"] == "oversized"
    assert line["package"] == "hefty"
    assert f"declares {len(hefty.versions['1.0.0'].tarball)} bytes" in line["detail"]
    assert "MIRRORGATE_MAX_TARBALL_BYTES" in line["detail"]
    assert proxy.metric("mirrorgate_jobs_total", outcome="retired") == 1
    assert proxy.returncode is None


class EndlessUpstream(ThreadedApp):
    """A public upstream on 127.0.0.1 serving the packuments of `packages` (so the worker's
    re-gate finds each version listed) and their tarballs, except
    `/endless/-/endless-1.0.0.tgz`, which is sent chunked, with no Content-Length, for ever
    (until the client hangs up). `sent` is what the endless answer managed to write."""

    def __init__(self, *packages: FixturePackage) -> None:
        super().__init__(self._build, name="endless")
        self.packages = {package.name: package for package in packages}
        self.sent = 0
        self.hung_up = threading.Event()

    def _build(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._answer)
        return app

    def job(self, name: str) -> MirrorJob:
        """The job the proxy would enqueue for `name`@1.0.0 as this upstream lists it."""
        manifest = self.packages[name].packument(self.url)["versions"]["1.0.0"]
        dist = manifest["dist"]
        return MirrorJob(name, "1.0.0", MirrorArtifact(
            dist["tarball"], tarball_filename(name, "1.0.0"), None, digests_from_dist(dist)),
            manifest)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        package = self.packages.get(request.path.lstrip("/"))
        if package is not None:
            return web.json_response(package.packument(self.url))
        if request.path != tarball_path("endless", "1.0.0"):
            for candidate in self.packages.values():
                if request.path == tarball_path(candidate.name, "1.0.0"):
                    return web.Response(body=candidate.versions["1.0.0"].tarball,
                                        content_type="application/octet-stream")
            return web.json_response({"error": "Not found"}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = random.Random(1).randbytes(ENDLESS_CHUNK)
        try:
            while self.sent < ENDLESS_GIVES_UP_AFTER:
                await response.write(chunk)
                self.sent += len(chunk)
                await asyncio.sleep(0)
        except (ConnectionError, RuntimeError):
            self.hung_up.set()
        return response


@pytest.fixture
def endless() -> Iterator[EndlessUpstream]:
    with serving(EndlessUpstream(make_package("endless", ["1.0.0"]),
                                 make_package("slim", ["1.0.0"])),
                 "the endless upstream") as upstream:
        yield upstream


async def test_a_tarball_that_never_ends_is_cut_off_at_the_cap_and_retired(
    guarded: GuardedFactory, endless: EndlessUpstream, sqs_server: SqsServer,
) -> None:
    slim = endless.packages["slim"]
    queue = await sqs_server.create_queue(visibility=10)
    worker = guarded("worker", {"MIRRORGATE_PUBLIC_UPSTREAM": endless.url,
                                "MIRRORGATE_MAX_TARBALL_BYTES": str(CAP),
                                **sqs_environment(sqs_server, queue.url)})
    good = endless.job("slim")
    unbounded = endless.job("endless")  # listed, admitted; its tarball never ends

    await send_to_sqs(sqs_server, queue.url, unbounded)
    wait_for(lambda: worker.metric("mirrorgate_jobs_retired_total", reason="oversized") == 1,
             timeout=15, message="the endless download to be cut off and retired")
    await send_to_sqs(sqs_server, queue.url, good)
    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=15, message="the next job to be published")

    assert endless.hung_up.wait(5), "the worker never hung up on the endless tarball"
    assert endless.sent < 16 * 1024 * 1024, f"the upstream got {endless.sent} bytes out"
    [line] = logged(worker, "mirror_retired")
    assert line["reason"] == "oversized"
    assert line["package"] == "endless"
    assert "ran past" in line["detail"]
    assert "MIRRORGATE_MAX_TARBALL_BYTES" in line["detail"]
    assert stored_version(worker, "endless", "1.0.0") is None
    assert stored_tarball(worker, "slim", "1.0.0") == slim.versions["1.0.0"].tarball
    assert worker.returncode is None
    assert worker.get("livez").status == 200
