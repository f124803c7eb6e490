"""The relay's hash off the event loop: in order, bounded, and as strict as the verifier.

`RelayHasher` only moves where `StreamVerifier` hashes: the bytes a relay forwards must still be
judged by every byte, in the order they arrived, and a relay must never hold more than a
bounded amount of a download for a hash that is falling behind.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from mirrorgate.integrity import Digest, DigestMismatch, StreamVerifier, Verified, digest_of
from mirrorgate.npm.contents import ContentReading, Contents
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.serve import relayhash
from mirrorgate.serve.relayhash import BEHIND_AT_MOST, OFF_LOOP_ABOVE, RelayHasher
from tests.servers.packages import build_tarball

CHUNK = 64 * 1024
BYTES = os.urandom(3 * 1024 * 1024 + 1234)


def chunks(data: bytes, size: int = CHUNK) -> list[bytes]:
    return [data[at:at + size] for at in range(0, len(data), size)]


def hasher_for(data: bytes, algorithm: str = "sha512") -> RelayHasher:
    return RelayHasher(StreamVerifier((digest_of(algorithm, data),), expected_size=None,
                                      limit=None))


@pytest.fixture
def spare_cpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Hash off the loop as on a machine with cores to spare; collects the size of each chunk
    hashed off the loop's thread."""
    loop_thread = threading.get_ident()
    off_loop: list[int] = []
    real = relayhash._update

    def recorded(verifier: StreamVerifier, chunk: bytes) -> None:
        if threading.get_ident() != loop_thread:
            off_loop.append(len(chunk))
        real(verifier, chunk)

    monkeypatch.setattr(relayhash, "_spare_cpu", lambda: True)
    monkeypatch.setattr(relayhash, "_update", recorded)
    return off_loop


@pytest.fixture
def held_hash(spare_cpu: list[int], monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The lane's thread stops before each chunk until the returned event is set."""
    gate = threading.Event()
    real = relayhash._update

    def held(verifier: StreamVerifier, chunk: bytes) -> None:
        gate.wait(5)
        real(verifier, chunk)

    monkeypatch.setattr(relayhash, "_update", held)
    return gate


async def verified(hasher: RelayHasher) -> Verified:
    """What `finish` says of a hasher built with a verifier."""
    result = await hasher.finish()
    assert result is not None
    return result


async def test_a_large_download_is_hashed_in_order_off_the_loop_and_matches(
        spare_cpu: list[int]) -> None:
    hasher = hasher_for(BYTES)
    for chunk in chunks(BYTES):
        await hasher.feed(chunk)
    result = await verified(hasher)

    assert result.size == len(BYTES)
    assert result.digest == digest_of("sha512", BYTES)
    assert sum(spare_cpu) == len(BYTES)  # every byte off the loop, each chunk once


async def test_one_swapped_byte_in_the_part_hashed_off_the_loop_is_a_mismatch(
        spare_cpu: list[int]) -> None:
    tampered = bytearray(BYTES)
    tampered[len(BYTES) // 2] ^= 0x01
    hasher = hasher_for(BYTES)
    for chunk in chunks(bytes(tampered)):
        await hasher.feed(chunk)

    with pytest.raises(DigestMismatch):
        await hasher.finish()


async def test_chunks_swapped_in_order_are_a_mismatch(spare_cpu: list[int]) -> None:
    """Same bytes, two chunks exchanged: only hashing in arrival order catches it."""
    parts = chunks(BYTES)
    parts[10], parts[11] = parts[11], parts[10]
    hasher = hasher_for(BYTES)
    for chunk in parts:
        await hasher.feed(chunk)

    with pytest.raises(DigestMismatch):
        await hasher.finish()


async def test_a_hash_that_falls_behind_holds_the_relay_to_a_bounded_backlog(
        spare_cpu: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    real = relayhash._update

    def slow(verifier: StreamVerifier, chunk: bytes) -> None:
        time.sleep(0.002)  # a starved hashing thread
        real(verifier, chunk)

    monkeypatch.setattr(relayhash, "_update", slow)
    hasher = hasher_for(BYTES)
    worst = 0
    for chunk in chunks(BYTES):
        await hasher.feed(chunk)
        worst = max(worst, hasher.behind)
    assert (await verified(hasher)).size == len(BYTES)

    assert worst <= BEHIND_AT_MOST + CHUNK
    assert worst > BEHIND_AT_MOST // 2  # it did fall behind: the bound was what held it


async def test_a_small_download_is_hashed_on_the_loop(spare_cpu: list[int]) -> None:
    small = BYTES[:OFF_LOOP_ABOVE]
    hasher = hasher_for(small)
    for chunk in chunks(small):
        await hasher.feed(chunk)

    assert (await verified(hasher)).digest == digest_of("sha512", small)
    assert spare_cpu == []


async def test_with_one_cpu_everything_is_hashed_on_the_loop(
        monkeypatch: pytest.MonkeyPatch, spare_cpu: list[int]) -> None:
    monkeypatch.setattr(relayhash, "_spare_cpu", lambda: False)
    hasher = hasher_for(BYTES)
    for chunk in chunks(BYTES):
        await hasher.feed(chunk)

    assert (await verified(hasher)).size == len(BYTES)
    assert spare_cpu == []


async def test_the_strongest_digest_decides_also_off_the_loop(spare_cpu: list[int]) -> None:
    """A matching sha1 beside a sha512 that does not match never rescues the bytes."""
    wrong512 = Digest("sha512", digest_of("sha512", b"other bytes").value)
    sha1 = Digest("sha1", digest_of("sha1", BYTES).value)
    hasher = RelayHasher(StreamVerifier((sha1, wrong512), expected_size=None, limit=None))
    for chunk in chunks(BYTES):
        await hasher.feed(chunk)

    with pytest.raises(DigestMismatch) as raised:
        await hasher.finish()
    assert raised.value.expected.algorithm == "sha512"


async def test_a_relay_that_stops_early_leaves_its_queued_chunks_unhashed(
        spare_cpu: list[int], held_hash: threading.Event) -> None:
    """A client gone mid-download: the thread skips what the relay queued, it does not burn a
    core hashing bytes nobody will receive."""
    hasher = hasher_for(BYTES)
    parts = chunks(BYTES)[:BEHIND_AT_MOST // CHUNK]  # all queued, none waited for
    for chunk in parts:
        await hasher.feed(chunk)
    hasher.close()
    held_hash.set()
    async with asyncio.timeout(5):
        await hasher._caught_up()  # the thread has passed over the rest

    assert hasher.behind == 0
    assert sum(spare_cpu) <= CHUNK  # at most the one chunk it had started on


async def test_a_cancelled_wait_for_the_hash_leaves_the_lane_working(
        spare_cpu: list[int], held_hash: threading.Event) -> None:
    """The relay's task cancelled while it waits (the request timed out): the thread later
    reaches its mark and wakes nobody, and the next download is hashed as ever."""
    hasher = hasher_for(BYTES)
    for chunk in chunks(BYTES)[:4]:
        await hasher.feed(chunk)
    waiting = asyncio.ensure_future(hasher.finish())
    await asyncio.sleep(0.01)
    waiting.cancel()
    held_hash.set()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    again = hasher_for(BYTES)
    for chunk in chunks(BYTES):
        await again.feed(chunk)
    assert (await verified(again)).size == len(BYTES)


TINY = build_tarball({"package.json": b'{"name": "x", "version": "1.0.0"}'})


@pytest.fixture
def held_reading(monkeypatch: pytest.MonkeyPatch) -> tuple[ScriptScan, threading.Event]:
    """A costly reading (a publisher's tarball of 199,000 entries): the scan returned stops
    on its lane before each chunk until the event is set."""
    held_scan, gate = ScriptScan(), threading.Event()
    real = relayhash._scan

    def held(scan: ScriptScan, chunk: bytes) -> None:
        if scan is held_scan:
            gate.wait(10)
        real(scan, chunk)

    monkeypatch.setattr(relayhash, "_scan", held)
    return held_scan, gate


async def test_a_reading_held_up_delays_neither_another_reading_nor_a_download_only_hashed(
        monkeypatch: pytest.MonkeyPatch, held_reading: tuple[ScriptScan, threading.Event],
        ) -> None:
    """A costly reading on a reading lane: another download being read takes another lane,
    and one only hashed keeps to the hashing lanes; both finish while the first is still held
    (on one shared lane, both waited for it)."""
    held_scan, gate = held_reading
    monkeypatch.setattr(relayhash, "_spare_cpu", lambda: True)
    tarball = TINY
    costly = RelayHasher(None, held_scan)
    await costly.feed(tarball)
    other = RelayHasher(None, ScriptScan())
    hashed = hasher_for(BYTES)
    async with asyncio.timeout(5):
        await other.feed(tarball)
        for chunk in chunks(BYTES):
            await hashed.feed(chunk)
        await other.finish()
        assert (await verified(hashed)).size == len(BYTES)
    assert not gate.is_set()  # the costly reading is still held
    gate.set()
    async with asyncio.timeout(5):
        await costly.finish()
    assert held_scan.finish() is None
    assert other.scan is not None
    assert other.scan.finish() is None


async def test_with_every_lane_reading_a_new_reading_takes_the_lane_least_behind(
        monkeypatch: pytest.MonkeyPatch, held_reading: tuple[ScriptScan, threading.Event],
        ) -> None:
    """More downloads read at once than there are lanes (the default reads every first pull):
    two lanes, a costly reading held on one, another reading on the other and keeping up. A
    third shares a lane: the one least behind, not the costly one's by the list's order (it
    once waited there for the whole costly reading)."""
    held_scan, gate = held_reading
    monkeypatch.setattr(relayhash, "_cpus", lambda: 2)
    monkeypatch.setattr(relayhash, "_readers", [])
    tarball = TINY
    costly = RelayHasher(None, held_scan)
    await costly.feed(tarball)
    keeping_up = RelayHasher(None, ScriptScan())
    await keeping_up.feed(tarball)
    async with asyncio.timeout(5):
        await keeping_up._caught_up()  # read, and still on its lane (not finished)
    assert keeping_up.behind == 0
    third = RelayHasher(None, ScriptScan())
    try:
        async with asyncio.timeout(5):
            await third.feed(tarball)
            await third.finish()
        assert not gate.is_set()  # the costly reading is still held
        assert len(relayhash._readers) == 2
    finally:
        gate.set()
    async with asyncio.timeout(5):
        await costly.finish()
        await keeping_up.finish()


async def test_a_release_reading_settles_on_its_reading_lane_not_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bytes come to (the files that run, what their code can do: up to a second of
    walking for 200,000 files) is worked out on the lane that read them, before `finish()`
    returns; the verdict on the loop takes it as it is."""
    loop_thread = threading.get_ident()
    settled_on: list[int] = []
    real = ContentReading._contents

    def recorded(reading: ContentReading) -> Contents:
        settled_on.append(threading.get_ident())
        return real(reading)

    monkeypatch.setattr(ContentReading, "_contents", recorded)
    reading = ContentReading(lean=True)
    hasher = RelayHasher(None, reading.scan)
    tarball = build_tarball({"package.json": b'{"name": "x", "version": "1.0.0"}',
                             "index.js": b"require('https').get('https://x.invalid/');\n"})
    for chunk in chunks(tarball, 512):
        await hasher.feed(chunk)
    await hasher.finish()
    contents = reading.contents()

    assert len(settled_on) == 1
    assert settled_on != [loop_thread]
    assert "network" in contents.capabilities.at_load
