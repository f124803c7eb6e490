"""The spool's bounds and lifetimes (`serve.spool`), without HTTP: what a shared download may
hold, how long a finished one lingers, and what a failed one leaves behind.

The attack on an unbounded spool is a fleet of requests for large tarballs filling the disk
or the memory; the bounds make the overflow stream per request as before instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mirrorgate.serve.spool import SMALL, Spool, SpoolOutcome, Spools


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def spools(tmp_path: Path, max_bytes: int = 100 * SMALL, *, clock: Clock | None = None,
           linger: float = 30.0) -> Spools:
    return Spools(tmp_path / "spool", max_bytes, clock=clock or Clock(), linger=linger)


def read_all(spool: Spool) -> bytes:
    """What a reader may send now, read as a reader does: chunk by chunk."""
    out = bytearray()
    while chunk := spool.read(len(out), 65536):
        out += chunk
    return bytes(out)


def filled(spool: Spool, body: bytes) -> None:
    for start in range(0, len(body), 1000):
        spool.append(body[start:start + 1000], hold_last=True)
    spool.complete()


async def test_readers_see_all_but_the_last_chunk_until_the_verdict() -> None:
    shelf = Spools(Path("/nonexistent"), SMALL)
    spool = shelf.make("key", 3000)
    assert spool is not None
    assert spool.in_memory

    spool.append(b"a" * 1000, hold_last=True)
    spool.append(b"b" * 1000, hold_last=True)
    assert read_all(spool) == b"a" * 1000  # the second chunk waits for the verdict
    spool.append(b"c" * 1000, hold_last=True)
    assert len(read_all(spool)) == 2000
    spool.complete()
    assert read_all(spool) == b"a" * 1000 + b"b" * 1000 + b"c" * 1000


async def test_a_failed_spool_gives_its_readers_nothing_more() -> None:
    spool = Spools(Path("/nonexistent"), SMALL).make("key", 2000)
    assert spool is not None
    spool.append(b"a" * 1000, hold_last=True)
    spool.append(b"b" * 1000, hold_last=True)
    waiting = asyncio.ensure_future(spool.changed())
    spool.fail("tampered")
    await asyncio.wait_for(waiting, 1)
    assert (spool.outcome, spool.failure, read_all(spool)) == (
        SpoolOutcome.FAILED, "tampered", b"")


async def test_a_large_download_goes_to_a_file_that_leaves_no_name_behind(
        tmp_path: Path) -> None:
    shelf = spools(tmp_path)
    body = bytes(range(256)) * (SMALL // 128)
    spool = shelf.make("large", len(body))
    assert spool is not None
    assert not spool.in_memory

    filled(spool, body)

    assert read_all(spool) == body  # the older part from the file, the newest from memory
    assert spool.read(1000, 10) == body[1000:1010]
    assert list((tmp_path / "spool").iterdir()) == []  # unnamed: nothing to clean up
    shelf.settled(spool)
    shelf.close()


async def test_what_does_not_fit_the_bound_is_not_spooled_and_lingering_ones_make_room(
        tmp_path: Path) -> None:
    clock = Clock()
    shelf = spools(tmp_path, max_bytes=3 * SMALL, clock=clock)
    first = shelf.make("one", 2 * SMALL)
    assert first is not None
    assert shelf.make("two", 2 * SMALL) is None  # one is still being read: no room

    filled(first, b"x" * (2 * SMALL))
    shelf.settled(first)  # complete, unread: it lingers, and goes first when room is needed
    assert shelf.find("one") is first
    second = shelf.make("two", 2 * SMALL)
    assert second is not None
    assert shelf.find("one") is None
    assert shelf.reserved == 2 * SMALL


async def test_a_finished_spool_lingers_for_latecomers_then_goes(tmp_path: Path) -> None:
    clock = Clock()
    shelf = spools(tmp_path, clock=clock, linger=30.0)
    spool = shelf.make("key", 1000)
    assert spool is not None
    shelf.join(spool)
    filled(spool, b"z" * 1000)
    shelf.settled(spool)
    shelf.leave(spool)

    clock.now = 29.0
    assert shelf.find("key") is spool
    clock.now = 60.0
    assert shelf.find("key") is None
    assert (shelf.reserved, len(shelf)) == (0, 0)


async def test_a_failed_spool_is_dropped_so_the_next_request_downloads_again(
        tmp_path: Path) -> None:
    shelf = spools(tmp_path)
    spool = shelf.make("key", 1000)
    assert spool is not None
    shelf.join(spool)
    spool.fail("aborted")
    shelf.settled(spool)

    assert shelf.find("key") is None
    again = shelf.make("key", 1000)  # while the failed one's reader is still there
    assert again is not None
    assert again is not spool
    shelf.leave(spool)
    assert shelf.reserved == 1000
