"""Reading a relayed tarball beside the relay: hashed, and scanned for install scripts, off the
event loop, in order, bounded.

sha512 costs more CPU per byte than relaying the byte does, so on the event loop it would
halve a CPU-bound relay; inflating a tarball to read its `package.json` files costs far more
(a compression bomb: a megabyte that inflates to a gigabyte), so on the event loop it would
stall every other client. `RelayHasher` hands each chunk to a thread (hashlib and zlib release
the GIL while they work) that runs on another core; a download whose bytes are read goes to
a reading lane apart, the least busy (`_reading_lane`). bench/tarball_relay.py measures it
and docs/untrusted-queue.md keeps the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Callable

from mirrorgate.integrity import StreamVerifier, Verified
from mirrorgate.npm.tarscripts import ScriptScan

__all__ = ["BEHIND_AT_MOST", "LANE_PREFIX", "OFF_LOOP_ABOVE", "RelayHasher"]

OFF_LOOP_ABOVE = 64 * 1024
"""A download that ends within this many bytes is hashed on the loop when it ends: handing a
chunk to a thread and being told it is done costs more than hashing 64 KiB, and most
tarballs are that small."""
BEHIND_AT_MOST = 1024 * 1024
"""Bytes relayed but not hashed yet, at most, per download: past this the relay waits for
the hash, so a starved hashing thread never makes the proxy hold a whole tarball."""
LANES_AT_MOST = 4
"""Hashing threads at most (one per spare CPU up to this): each hashes about 850 MB/s of
sha512, more than a relay's one event loop moves."""
LANE_PREFIX = "mirrorgate-relay-"
"""The lanes' thread names begin with it (`-hash-N`, `-read-N`): what a profile or a bench
(bench/tarball_relay.py's `lanes_cpu`) tells them by."""
READING_LANES_AT_LEAST = 2
"""Reading threads: one per CPU, and never fewer than this, so that one costly reading never
holds up another (`_reading_lane`)."""


def _spare_cpu() -> bool:
    """Whether a hashing thread could run beside the event loop: with one CPU to run on, it
    would only take turns with the loop and add the hand-over."""
    return _cpus() > 1


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def _update(verifier: StreamVerifier, chunk: bytes) -> None:
    """One chunk into the hash, on a lane's thread (a seam the tests watch)."""
    verifier.update(chunk)


def _scan(scan: ScriptScan, chunk: bytes) -> None:
    """One chunk into the install-scripts scan, on a lane's thread (a seam the tests watch)."""
    scan.feed(chunk)


class _Waiter:
    """A point in a lane's queue: when the thread reaches it, every chunk queued before it
    has been hashed, `then` runs there (a reading settled: `ScriptScan.settle`), and the
    waiting relay is woken on its own loop."""

    __slots__ = ("future", "loop", "then")

    def __init__(self, then: Callable[[], None] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()
        self.then = then

    def reached(self) -> None:
        # a loop that has closed meanwhile (its relay is gone) is nobody to wake
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if not self.future.done():  # a cancelled relay stopped waiting
            self.future.set_result(None)


class _Lane:
    """One daemon thread hashing what its queue holds, in order. A download keeps to one
    lane, so its chunks are hashed in the order they arrived. The queue is unbounded; each
    download bounds its own share (`BEHIND_AT_MOST`)."""

    def __init__(self, name: str) -> None:
        self.queue: queue.SimpleQueue[tuple[RelayHasher, bytes | _Waiter]] = \
            queue.SimpleQueue()
        self.reading: set[RelayHasher] = set()
        """Downloads being read on it (a reading lane's, `_reading_lane`): changed and read
        under `_lanes_made`."""
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    @property
    def backlog(self) -> int:
        """Bytes its downloads fed and it has not read yet: a costly reading falls behind (its
        relay waits at `BEHIND_AT_MOST`), a cheap one keeps up."""
        return sum(download.behind for download in self.reading)

    def _run(self) -> None:
        while True:
            hasher, work = self.queue.get()
            if isinstance(work, _Waiter):
                if work.then is not None:
                    hasher._call(work.then)
                work.reached()
            else:
                hasher._hash(work)


_lanes: list[_Lane] = []
_readers: list[_Lane] = []
_lanes_made = threading.Lock()
_turns = itertools.count()


def _forked() -> None:
    # a forked child has none of its parent's threads: it starts lanes of its own
    _lanes.clear()
    _readers.clear()


os.register_at_fork(after_in_child=_forked)


def _next_lane() -> _Lane:
    """The lanes, made on first use (a process that never relays public bytes starts no
    thread), taken in turn by downloads."""
    if not _lanes:
        with _lanes_made:
            if not _lanes:
                _lanes.extend(_Lane(f"{LANE_PREFIX}hash-{index}") for index in
                              range(max(1, min(LANES_AT_MOST, _cpus() - 1))))
    return _lanes[next(_turns) % len(_lanes)]


def _reading_lane(download: RelayHasher) -> _Lane:
    """The reading lane with the fewest downloads on it, and of those the one least behind
    (`_Lane.backlog`), for a download whose bytes are read (the install-scripts scan, the
    release signals), apart from the hashing lanes; made on first use, one per CPU and at
    least `READING_LANES_AT_LEAST`.

    Reading costs what the publisher chose (up to about 2.4 s of CPU for 199,000 entries or
    600,000 pax records: `npm.tarball`'s bounds), so every chunk queued behind a costly
    reading on a shared lane waits for it: a 3 MiB download once waited 3.5 s behind 6 MiB
    of empty zstd frames on the one lane. Apart, a download only hashed never waits behind a
    reading, and a new reading takes a lane no other reading holds while there is one: one
    costly tarball delays no other, and as many at once as there are lanes delay the next by
    at most the least busy one's rest (the bound on a reading's CPU). More threads would
    share the interpreter: with eight busy readers the event loop waited up to 0.6 s for its
    turn (against 40 ms with one, measured on this machine under load), where a budget of
    CPU per reading would not know a tarball's cost from its compressed size (a kilobyte of
    zstd can stand for 130,000 headers). With the default's capability signals every first
    pull is read, so more downloads are read at once than there are lanes: of lanes holding
    as many, the one least behind is taken, never the costly reading's by the order of the
    list (a 3 MiB download once queued behind 199,000 headers that way while another lane
    kept up with a download of its own). tests/faults/test_33_reader_bounds.py holds it."""
    with _lanes_made:
        lane = min(_readers, key=lambda lane: (len(lane.reading), lane.backlog), default=None)
        if lane is None or (lane.reading and len(_readers) < max(READING_LANES_AT_LEAST,
                                                                 _cpus())):
            lane = _Lane(f"{LANE_PREFIX}read-{len(_readers)}")
            _readers.append(lane)
        lane.reading.add(download)
        return lane


def _read(lane: _Lane, download: RelayHasher) -> None:
    """A download on a reading lane is read (or dropped)."""
    with _lanes_made:
        lane.reading.discard(download)


class RelayHasher:
    """Feed it a download's chunks in order; `finish()` waits for them to be read and says
    whether the bytes are the admitted ones (`StreamVerifier.finish`; None without a
    verifier), after which `scan` (when given) holds its verdict.

    Only `finish()` knows the digest and the scan's verdict, so a caller holds the last chunk
    back until it returns. `close()` drops what is not read yet (a relay that stopped early).
    Each chunk is one hand-over to the lane's thread, no copy and no future: the relay is
    woken only when it waits (at the end, or `BEHIND_AT_MOST` behind). A small download is
    only hashed, at its end on the loop. A scan always goes to a reading lane
    (`_reading_lane`), even with one CPU, since what inflating and reading cost is not what
    the compressed bytes weigh: on the loop it would stall every client. Without a scan and
    with one CPU (`_spare_cpu`), every chunk is hashed on the loop as it comes.
    """

    __slots__ = ("_closed", "_error", "_fed", "_hashed", "_lane", "_offload", "_own", "_small",
                 "scan", "verifier")

    def __init__(self, verifier: StreamVerifier | None, scan: ScriptScan | None = None) -> None:
        self.verifier = verifier
        self.scan = scan
        self._offload = scan is not None or _spare_cpu()
        self._own = scan is not None  # on a reading lane, counted off once read (`_release`)
        self._lane: _Lane | None = None
        self._small: list[bytes] = []  # the first chunks, until the download outgrows small
        self._fed = 0
        self._hashed = 0  # written by the lane's thread only (an int store, atomic)
        self._error: BaseException | None = None  # likewise
        self._closed = False

    async def feed(self, chunk: bytes) -> None:
        """Hash `chunk` after every chunk fed before it; waits only when the hash has fallen
        `BEHIND_AT_MOST` bytes behind. Raises what `StreamVerifier.update` raised."""
        self._raise()
        self._fed += len(chunk)
        if not self._offload:
            self._read(chunk)
            return
        if self._lane is None:
            self._small.append(chunk)
            if self._fed <= OFF_LOOP_ABOVE and self.scan is None:
                return
            self._lane = _reading_lane(self) if self._own else _next_lane()
            for held in self._small:
                self._lane.queue.put((self, held))
            self._small = []
        else:
            self._lane.queue.put((self, chunk))
        if self.behind > BEHIND_AT_MOST:
            await self._caught_up()
        self._raise()

    async def finish(self) -> Verified | None:
        """Wait for every chunk fed to be read (and the scan settled where it was read:
        `ScriptScan.settle`), then check the digest (and the size)."""
        self._raise()
        # a scan alone (the install-scripts rule) has nothing to settle: no hand-over for it
        settle = self.scan.settle if self.scan is not None and self.scan.watched else None
        if self._lane is None:  # nothing fed off the loop (with a watch: nothing fed at all)
            for chunk in self._small:
                self._read(chunk)
            self._small = []
            if settle is not None:
                settle()
        elif self.behind or settle is not None:
            await self._caught_up(settle)
            self._raise()
        self._release()
        return self.verifier.finish() if self.verifier is not None else None

    @property
    def behind(self) -> int:
        """Bytes fed but not hashed yet."""
        return self._fed - self._hashed

    def close(self) -> None:
        """Stop hashing: what is still queued is skipped, not hashed."""
        self._closed = True
        self._small = []
        self._release()

    def _release(self) -> None:
        """This download off its reading lane's count, once: what it still has queued there is
        skipped (`_closed`) or was read (`finish`)."""
        if self._own and self._lane is not None:
            self._own = False
            _read(self._lane, self)

    async def _caught_up(self, then: Callable[[], None] | None = None) -> None:
        assert self._lane is not None
        waiter = _Waiter(then)
        self._lane.queue.put((self, waiter))
        await waiter.future

    def _read(self, chunk: bytes) -> None:
        if self.verifier is not None:
            _update(self.verifier, chunk)
        if self.scan is not None:
            _scan(self.scan, chunk)

    def _hash(self, chunk: bytes) -> None:
        """On the lane's thread."""
        if self._error is None and not self._closed:
            try:
                self._read(chunk)
            except Exception as error:  # raised to the relay by its next feed or finish
                self._error = error
        self._hashed += len(chunk)

    def _call(self, then: Callable[[], None]) -> None:
        """On the lane's thread, after every chunk before it: what `finish()` asked for."""
        if self._error is None and not self._closed:
            try:
                then()
            except Exception as error:  # raised to the relay by its finish
                self._error = error

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
