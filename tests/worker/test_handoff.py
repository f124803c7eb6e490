"""One download per version: the worker beside the proxy takes the bytes the proxy verified.

In `mirrorgate serve` with its worker, a public tarball a client pulls is downloaded, hashed
and spooled by the relay; the worker used to download it again to mirror it (twice the egress
of a cold install). The proxy now hands the verified bytes over with the job (`handoff`), with
the digest its relay matched: the worker takes that sha512 from the in-process handoff alone and
checks what it reads back with the sha1 the publish needs anyway. The attacks: bytes that
changed between the proxy's hash and the worker's read (in the handoff's file, a bug, another
job's bytes under the same URL) are never published; a forged job for the handed version with
other digests takes nothing; a job whose re-gated digest is not the one the bytes were checked
against downloads afresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mirrorgate import handoff as handoff_module
from mirrorgate import integrity
from mirrorgate.handoff import Handoff
from mirrorgate.integrity import Digest, parse_integrity
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import DEFAULT_RULES, LiveRules, Rules
from mirrorgate.upstream.filestore import FileStore
from mirrorgate.worker.loop import Worker
from tests.clock import ManualClock
from tests.serve.rig import ProxyStack, RunningProxy, make_settings, open_proxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package, make_version, tarball_path
from tests.servers.processes import http_request, wait_for
from tests.worker.rig import handled, in_process_worker

MIB = 1024 * 1024


def tarball_gets(public: FixtureRegistry, name: str, version: str) -> list[str]:
    """The User-Agent of every request for the version's tarball (the pool it came from)."""
    path = tarball_path(name, version)
    return [seen.headers.get("User-Agent", "") for seen in public.requests if seen.path == path]


# --- the handoff itself ---------------------------------------------------------------

SHA = Digest("sha512", "A" * 86 + "==")
OTHER = Digest("sha512", "B" * 86 + "==")


def taken(handoff: Handoff, url: str) -> bytes:
    """The bytes a job for `url` takes, whose digest is `SHA`."""
    handed = handoff.take(url, (SHA,))
    assert handed is not None
    assert handed.matched == SHA  # the relay's claim, carried with them
    handed.close()
    return handed.body


def test_an_offer_past_the_bound_is_refused_and_the_oldest_are_kept(tmp_path: Path) -> None:
    """The worker takes jobs oldest first: when full, the newest offer is the one refused."""
    handoff = Handoff(tmp_path, 3 * MIB)
    assert handoff.offer("u1", b"x" * MIB, SHA)
    assert handoff.offer("u2", b"x" * (2 * MIB), SHA)
    assert not handoff.offer("u3", b"x", SHA)
    assert handoff.held_bytes == 3 * MIB
    assert taken(handoff, "u1") == b"x" * MIB
    assert handoff.offer("u3", b"x", SHA)  # taking gave the room back
    assert handoff.held_bytes == 2 * MIB + 1


def test_bytes_no_job_takes_are_gone_after_ten_minutes(tmp_path: Path) -> None:
    """A job the queue lost costs a later download, never memory for good."""
    clock = ManualClock()
    handoff = Handoff(tmp_path, MIB, clock=clock)
    handoff.offer("lost", b"x" * 1000, SHA)
    clock.advance(599)
    assert handoff.room_for(MIB - 1000)
    assert not handoff.room_for(MIB - 999)
    clock.advance(2)
    assert handoff.room_for(MIB)
    assert len(handoff) == 0
    assert handoff.take("lost", (SHA,)) is None


def test_bytes_checked_against_another_digest_are_not_handed_to_the_job(
        tmp_path: Path) -> None:
    """Public's metadata changed between the pull and the job: the job's (re-gated) digest
    is not the one the proxy matched, so the worker downloads what public describes now."""
    handoff = Handoff(tmp_path, MIB)
    handoff.offer("changed", b"old bytes", SHA)
    assert handoff.take("changed", (OTHER,)) is None
    assert len(handoff) == 0
    assert handoff.held_bytes == 0


def test_a_job_the_queue_did_not_take_gives_its_bytes_back(tmp_path: Path) -> None:
    handoff = Handoff(tmp_path, MIB)
    handoff.offer("dropped", b"x" * 10, SHA)
    handoff.discard("dropped")
    assert handoff.held_bytes == 0
    assert handoff.take("dropped", (SHA,)) is None


def test_each_tarball_waits_in_an_unnamed_file_of_its_own_until_taken_or_dropped(
        tmp_path: Path) -> None:
    """On disk, so a worker a minute behind a cold install costs no memory; unnamed, so a
    crash leaves nothing to clean up and no other process can open them; one a tarball, so
    the file taken can become the stored tarball."""
    handoff = Handoff(tmp_path, MIB)
    for index in range(5):
        assert handoff.offer(f"u{index}", bytes([index]) * 60, SHA)
    assert handoff.files == 5
    assert len(handoff_files(tmp_path)) == 5
    assert os.listdir(tmp_path) == []
    handed = handoff.take("u0", (SHA,))
    assert handed is not None
    assert handed.body == bytes([0]) * 60
    assert handoff.files == 4
    assert handed.unnamed is not None
    assert os.pread(handed.unnamed, 60, 0) == handed.body  # the taker's now
    handed.close()
    handoff.discard("u1")
    assert handoff.take("u2", (OTHER,)) is None  # taken under another digest: dropped
    assert handoff.files == 2
    assert len(handoff_files(tmp_path)) == 2
    handoff.close()
    assert handoff_files(tmp_path) == []


def test_offers_past_the_file_bound_are_refused(tmp_path: Path) -> None:
    """Each waiting tarball holds a descriptor: past `max_files` the worker downloads."""
    handoff = Handoff(tmp_path, MIB, max_files=3)
    assert all(handoff.offer(f"u{index}", b"x", SHA) for index in range(3))
    assert not handoff.offer("u3", b"x", SHA)
    assert taken(handoff, "u0") == b"x"
    assert handoff.offer("u3", b"x", SHA)


def test_the_file_bound_is_a_quarter_of_the_descriptors_the_process_may_open() -> None:
    """A cold install of 1,917 versions had its worker a thousand jobs behind: at 512 files
    (the bound before), 994 tarballs were downloaded twice. The process raises its soft limit
    to the hard one and the handoff takes a quarter of it, within its floor and ceiling."""
    assert handoff_module.files_for(1024) == handoff_module.MIN_FILES
    assert handoff_module.files_for(20_000) == 5_000
    assert handoff_module.files_for(1 << 20) == handoff_module.MAX_FILES


def test_the_process_raises_its_open_files_limit_to_the_hard_one() -> None:
    """Run in a child: a soft limit of 256 under the hard one is raised to it."""
    code = ("import resource; from mirrorgate import runtime; "
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)); "
            "print(runtime.open_files(), min(hard, runtime.OPEN_FILES_AT_MOST), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                               sys.path)}).stdout.split()
    assert found[0] == found[1] == found[2]
    assert int(found[0]) > 256


def test_an_unwritable_directory_means_downloads_not_a_failure(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    handoff = Handoff(blocked / "handoff", MIB)
    assert not handoff.offer("u", b"x", SHA)
    assert handoff.take("u", (SHA,)) is None


# --- the worker beside the proxy, wired as `mirrorgate serve` wires it ------------------

StartServing = Callable[..., Awaitable[tuple[RunningProxy, Worker]]]


@pytest.fixture
async def start_serving(public_registry: FixtureRegistry,
                        tmp_path: Path) -> AsyncIterator[StartServing]:
    """A proxy and the worker beside it sharing one handoff, the file store as the mirror."""
    stacks: list[ProxyStack] = []

    async def start(rules: Rules | LiveRules = DEFAULT_RULES,
                    **overrides: Any) -> tuple[RunningProxy, Worker]:
        settings = make_settings(public_registry.url, f"file://{tmp_path / 'store'}",
                                 tmp_path / "data", **overrides)
        handoff = Handoff(tmp_path / "handoff", settings.handoff_max_bytes)
        stacks.append(await open_proxy(settings, store=tmp_path / "store", rules=rules,
                                       queue=None, worker_beside=True, handoff=handoff))
        proxy = stacks[-1].running
        return proxy, in_process_worker(proxy, tmp_path / "store", handoff=handoff)

    yield start
    for stack in stacks:
        await stack.close()


async def test_a_pulled_tarball_is_mirrored_without_a_second_public_download(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    public_registry.add(make_package("pulled-once", [make_version(
        "pulled-once", "1.0.0", size=900_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("pulled-once", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()

    assert await handled(worker, job) == "published"

    assert tarball_gets(public_registry, "pulled-once", "1.0.0") == ["mirrorgate (tarballs)"]
    assert proxy.metric("mirrorgate_handoffs_total", outcome="taken") == 1
    stored = await FileStore(tmp_path / "store").packument(parse_name("pulled-once"))
    assert stored is not None
    assert stored["versions"]["1.0.0"]["dist"]["integrity"] == (
        public_registry.packument("pulled-once")["versions"]["1.0.0"]["dist"]["integrity"])


async def test_the_stored_tarball_is_the_handoff_file_itself(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    """One write a version: the relay wrote the bytes into an unnamed file, the worker checked
    them there, and the file store links that very file in as the stored tarball (it used to
    read them back and write them again)."""
    public_registry.add(make_package("linked-in", [make_version(
        "linked-in", "1.0.0", size=900_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("linked-in", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    (fd,) = handoff_files(tmp_path / "handoff")
    relayed = os.fstat(fd).st_ino

    assert await handled(worker, job) == "published"

    stored = FileStore(tmp_path / "store").tarball_path(parse_name("linked-in"),
                                                        "linked-in-1.0.0.tgz")
    assert stored.stat().st_ino == relayed
    assert stored.read_bytes() == reply.body
    assert handoff_files(tmp_path / "handoff") == []  # the worker's descriptor closed too


async def test_a_handed_file_that_cannot_be_linked_is_written_into_the_store(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem without O_TMPFILE (the handoff's file named and unlinked at once, which
    no link brings back) or a handoff on another filesystem: the bytes are written, as before."""

    def unlinkable(directory: Path) -> int:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory) as handle:  # O_EXCL: never linkable
            return os.dup(handle.fileno())

    monkeypatch.setattr(handoff_module, "_unnamed", unlinkable)
    public_registry.add(make_package("written-in", [make_version(
        "written-in", "1.0.0", size=300_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("written-in", "1.0.0").lstrip("/"))
    (job,) = await proxy.jobs()
    (fd,) = handoff_files(tmp_path / "handoff")
    relayed = os.fstat(fd).st_ino

    assert await handled(worker, job) == "published"

    assert proxy.metric("mirrorgate_handoffs_total", outcome="taken") == 1
    stored = FileStore(tmp_path / "store").tarball_path(parse_name("written-in"),
                                                        "written-in-1.0.0.tgz")
    assert stored.stat().st_ino != relayed
    assert stored.read_bytes() == reply.body
    assert [path.name for path in stored.parent.iterdir()] == [stored.name]


async def test_bytes_changed_after_the_proxy_checked_them_are_never_published(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    """The attack: whatever sits between the relay's check and the publish (a bug in the
    hold, another version's bytes under the URL) cannot get other bytes mirrored: the worker
    hashes what it was handed against its job and refuses them as tampered."""
    public_registry.add(make_package("swapped", [make_version("swapped", "1.0.0",
                                                              size=50_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("swapped", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    handoff = worker.deps.handoff
    assert handoff is not None
    digest = parse_integrity(job.manifest["dist"]["integrity"])[0]
    handoff.offer(job.artifact.tarball_url, reply.body[:-1] + b"!", digest)

    assert await handled(worker, job) == "tampered"

    assert await FileStore(tmp_path / "store").packument(parse_name("swapped")) is None
    assert proxy.metric("mirrorgate_tampered_total") == 1


def handoff_files(directory: Path) -> list[int]:
    """This process's descriptors open on the handoff's unnamed files: what an attacker with
    the process's files (or a bug between the relay's hash and the worker) could write to."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{entry}").startswith(str(directory)):
                found.append(int(entry))
    return found


@pytest.mark.parametrize("shasum", [True, False], ids=["with-shasum", "sha512-only"])
async def test_bytes_changed_in_the_handoff_file_after_the_relay_hashed_them_are_never_published(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path,
        shasum: bool) -> None:
    """The attack the worker's remaining check stops: the relay hashed the chunks it relayed,
    and the bytes then sat in an unnamed file until the job came. One byte changed there is
    caught by the sha1 the publish computes anyway (checked against the admitted shasum), or,
    for a version that publishes no shasum, by hashing the bytes whole: tampered either way,
    nothing stored."""
    name = f"rewritten-{'sha1' if shasum else 'sha512'}"
    public_registry.add(make_package(name, [make_version(
        name, "1.0.0", size=3_000_000, dist={} if shasum else {"shasum": None})]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path(name, "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    (fd,) = handoff_files(tmp_path / "handoff")
    middle = len(reply.body) // 2
    assert os.pread(fd, 1, middle) == reply.body[middle:middle + 1]  # the bytes relayed
    os.pwrite(fd, bytes([reply.body[middle] ^ 0xFF]), middle)

    assert await handled(worker, job) == "tampered"

    assert proxy.metric("mirrorgate_handoffs_total", outcome="taken") == 1
    assert await FileStore(tmp_path / "store").packument(parse_name(name)) is None
    assert list((tmp_path / "store").rglob("*.tgz")) == []  # the file was not linked in
    assert handoff_files(tmp_path / "handoff") == []
    assert proxy.metric("mirrorgate_tampered_total") == 1


async def test_a_handed_over_tarball_costs_the_worker_one_sha1_and_no_second_sha512(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What trusting the relay's digest saves: the worker beside the proxy hashes the bytes
    it publishes once, with the sha1 their `shasum` needs, and takes the sha512 the relay
    matched while relaying them (a download, or a sidecar's job, is hashed whole)."""
    public_registry.add(make_package("hashed-once", [make_version(
        "hashed-once", "1.0.0", size=2_000_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("hashed-once", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    hashed: list[tuple[str, int]] = []
    update, digest_of = integrity.StreamVerifier.update, integrity.digest_of

    def counted_update(self: integrity.StreamVerifier, chunk: bytes) -> None:
        hashed.append((self.expected.algorithm, len(chunk)))
        update(self, chunk)

    def counted_digest(algorithm: str, data: bytes) -> Digest:
        hashed.append((algorithm, len(data)))
        return digest_of(algorithm, data)

    monkeypatch.setattr(integrity.StreamVerifier, "update", counted_update)
    monkeypatch.setattr(integrity, "digest_of", counted_digest)

    assert await handled(worker, job) == "published"

    assert hashed == [("sha1", len(reply.body))]
    stored = await FileStore(tmp_path / "store").packument(parse_name("hashed-once"))
    assert stored is not None
    published = public_registry.packument("hashed-once")["versions"]["1.0.0"]["dist"]
    assert stored["versions"]["1.0.0"]["dist"]["integrity"] == published["integrity"]
    assert stored["versions"]["1.0.0"]["dist"]["shasum"] == published["shasum"]


async def test_a_forged_job_naming_the_handed_version_with_other_digests_takes_nothing(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    """The relay's digest is a claim only the in-process handoff carries, weighed against the
    re-gated job: a job off the queue for the same version, carrying the digests of other
    bytes, is refused before the handoff is read, and the version's own job then mirrors the
    relay's bytes, with public's digests."""
    public_registry.add(make_package("claimed", [make_version("claimed", "1.0.0",
                                                              size=500_000)]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("claimed", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    other = b"other bytes" * 1000
    forged = dataclasses.replace(job, artifact=dataclasses.replace(
        job.artifact, digests=(integrity.digest_of("sha512", other),
                               integrity.digest_of("sha1", other))))

    assert await handled(worker, forged) == "retired"

    assert proxy.metric("mirrorgate_jobs_retired_total", reason="digest-mismatch") == 1
    handoff = worker.deps.handoff
    assert handoff is not None
    assert len(handoff) == 1  # not taken, not spent
    assert await FileStore(tmp_path / "store").packument(parse_name("claimed")) is None
    assert await handled(worker, job) == "published"
    assert tarball_gets(public_registry, "claimed", "1.0.0") == ["mirrorgate (tarballs)"]


async def test_bytes_for_a_version_already_mirrored_are_given_back_at_once(
        start_serving: StartServing, public_registry: FixtureRegistry) -> None:
    """A second pull after the window (its job finds the version held): its bytes do not sit
    in the handoff for ten minutes."""
    public_registry.add(make_package("twice", ["1.0.0"]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("twice", "1.0.0").lstrip("/"))
    (job,) = await proxy.jobs()
    assert await handled(worker, job) == "published"
    handoff = worker.deps.handoff
    assert handoff is not None
    handoff.offer(job.artifact.tarball_url, reply.body,
                  parse_integrity(job.manifest["dist"]["integrity"])[0])

    assert await handled(worker, job) == "already_present"

    assert handoff.held_bytes == 0


async def test_a_job_the_proxy_holds_no_bytes_for_downloads_them(
        start_serving: StartServing, public_registry: FixtureRegistry) -> None:
    """A job from before a restart, or one the handoff had no room for: downloaded as ever."""
    public_registry.add(make_package("not-held", ["1.0.0"]))
    proxy, worker = await start_serving()
    reply = await proxy.get("npm/" + tarball_path("not-held", "1.0.0").lstrip("/"))
    assert reply.status == 200
    (job,) = await proxy.jobs()
    assert worker.deps.handoff is not None
    worker.deps.handoff.discard(job.artifact.tarball_url)

    assert await handled(worker, dataclasses.replace(job)) == "published"

    assert tarball_gets(public_registry, "not-held", "1.0.0") == [
        "mirrorgate (tarballs)", "mirrorgate (worker)"]
    assert proxy.metric("mirrorgate_handoffs_total", outcome="missed") == 1


def packument_gets(public: FixtureRegistry, name: str) -> list[str]:
    return [seen.headers.get("User-Agent", "") for seen in public.requests
            if seen.path == f"/{name}"]


async def test_a_job_whose_entry_was_evicted_is_judged_without_filling_it_again(
        start_serving: StartServing, public_registry: FixtureRegistry) -> None:
    """A cold install of thousands of names evicts entries before the worker, a few seconds
    behind, reaches their jobs: the record of each enqueued version is kept for its job."""
    public_registry.add(make_package("evicted", ["1.0.0"]), make_package("evictor", ["1.0.0"]))
    proxy, worker = await start_serving(cache_max_entries=1)  # room for one entry at a time
    for name in ("evicted", "evictor"):
        reply = await proxy.get("npm/" + tarball_path(name, "1.0.0").lstrip("/"))
        assert reply.status == 200
    assert proxy.server.packuments.cache.peek("evicted") is None
    jobs = {job.name: job for job in await proxy.jobs()}

    assert await handled(worker, jobs["evicted"]) == "published"

    assert packument_gets(public_registry, "evicted") == ["mirrorgate (fills)"]


async def test_a_kept_record_never_outlives_a_rules_change(
        start_serving: StartServing, public_registry: FixtureRegistry, tmp_path: Path) -> None:
    """The attack a pin could open: a version denied since its pull (a rule added for it)
    mirrored on the word of the record kept from before. The record is gated with the rules
    of its time; under others it is set aside and the version judged again."""
    public_registry.add(make_package("ruled-out", ["1.0.0"]), make_package("filler", ["1.0.0"]))
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[age]\nminimum = "0"\n')
    rules = LiveRules.load(rules_file)
    proxy, worker = await start_serving(rules=rules, cache_max_entries=1)
    for name in ("ruled-out", "filler"):
        reply = await proxy.get("npm/" + tarball_path(name, "1.0.0").lstrip("/"))
        assert reply.status == 200
    jobs = {job.name: job for job in await proxy.jobs()}
    rules_file.write_text('[age]\nminimum = "0"\n\n[deny]\npackages = ["ruled-out"]\n')
    assert rules.reload()

    assert await handled(worker, jobs["ruled-out"]) == "retired"

    assert await FileStore(tmp_path / "store").packument(parse_name("ruled-out")) is None


# --- the real command ------------------------------------------------------------------

@pytest.mark.parametrize(("handoff_bytes", "downloads"), [(None, 1), ("0", 2)])
def test_mirrorgate_serve_downloads_each_pulled_tarball_once(
        mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
        handoff_bytes: str | None, downloads: int) -> None:
    """`mirrorgate serve` on its defaults: a pull and its mirror cost public one download of
    each tarball (MIRRORGATE_HANDOFF_MAX_BYTES=0 turns the handoff off: two)."""
    public_registry.add(make_package("one-download", [
        make_version("one-download", version, size=200_000) for version in ("1.0.0", "1.1.0")]))
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    if handoff_bytes is not None:
        env["MIRRORGATE_HANDOFF_MAX_BYTES"] = handoff_bytes
    proxy = mirrorgate("serve", env)

    for version in ("1.0.0", "1.1.0"):
        reply = http_request("GET", proxy.registry_url
                             + tarball_path("one-download", version)[1:])
        assert reply.status == 200

    wait_for(lambda: len(proxy.events("mirror_published")) == 2, timeout=30,
             message="the in-process worker to mirror both pulls")
    for version in ("1.0.0", "1.1.0"):
        assert len(tarball_gets(public_registry, "one-download", version)) == downloads
