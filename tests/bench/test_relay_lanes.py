"""`bench.tarball_relay.lanes_cpu` finds the relay's lanes, and counts what they spent.

The relay benches split a round's CPU into the event loop's and the lanes' (the threads that
hash and read a download, `serve.relayhash`). The fault it guards: a lane renamed, or a bench
that looked for another name, reports 0 ms a MB for the lanes while they do most of the work,
and the loop's figure reads as the whole of the relay.
"""

from __future__ import annotations

import os
import time

import pytest
from bench.tarball_relay import lanes_cpu

from mirrorgate.integrity import StreamVerifier, digest_of
from mirrorgate.npm.contents import ContentReading
from mirrorgate.serve import relayhash
from mirrorgate.serve.relayhash import RelayHasher
from tests.servers.packages import make_version


async def test_a_download_read_on_a_lane_is_counted_as_the_lanes_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a reading lane of its own, made here, so another test's lanes count for nothing
    monkeypatch.setattr(relayhash, "_readers", [])
    # about 2 MB of code that does not compress: a few ms of sha512 and inflating
    tarball = make_version("lanes-cpu", "1.0.0",
                           files={"index.js": b"module.exports = 1\n",
                                  "lib/data.js": os.urandom(2_000_000)}).tarball
    before = lanes_cpu()
    started = time.thread_time()
    download = RelayHasher(StreamVerifier((digest_of("sha512", tarball),), expected_size=None,
                                          limit=None), ContentReading(None, lean=True).scan)
    for at in range(0, len(tarball), 64 * 1024):
        await download.feed(tarball[at:at + 64 * 1024])
    assert await download.finish() is not None
    loop_cpu = time.thread_time() - started
    after = lanes_cpu()
    lane = relayhash._readers[0]
    spent = {ident: cpu - before.get(ident, 0.0) for ident, cpu in after.items()}
    assert lane.thread.ident in spent
    # the lane did the reading: more CPU there than on this loop, which only handed it over
    assert sum(spent.values()) > loop_cpu

