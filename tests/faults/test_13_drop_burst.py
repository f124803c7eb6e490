"""Row 13 of the faults table: a burst of distinct pulls against a full queue.

> | 13 | a burst of 50,000 tarball requests for distinct unmirrored versions with
> `MIRROR_QUEUE_MAX_DEPTH=1000` and the worker stalled | every request served; the process's
> RSS stays bounded (report it); drops counted and logged at the documented cadence, not once
> per drop |

The real `mirrorgate serve` (memory queue, in-process worker) over a generated public registry
(`BulkRegistry`: 50 packages of 1,000 versions, one small real tarball shared by all) and a
mirror target that accepts connections and never answers, so the worker takes its first batch
and stalls on it. An aiohttp client sends the 50,000 GETs over 32 connections, package by
package in turn, so every packument is cached within the first 50 requests and the rest of
the burst exercises only the tarball path and the queue.

RSS is sampled from /proc every 0.2 s: start (after start-up), at the burst's midpoint, peak
(VmHWM) and end. Bounded means the second half of the burst does not grow the process the way
the first half (which fills the packument cache with 50,000 versions) may: a per-request leak
of even 200 bytes would show as 5 MB there. The figures are printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest

from tests.faults.bulk_registry import BulkRegistry
from tests.faults.guarded import GuardedFactory
from tests.faults.memory import MIB, mib, rss
from tests.servers.availability import serving
from tests.servers.processes import MirrorgateProcess
from tests.servers.threaded import ThreadedApp

PACKAGES = 50
VERSIONS = 1_000
REQUESTS = PACKAGES * VERSIONS
DEPTH = 1_000
CONNECTIONS = 32
REPORT_EVERY = 1_000
"""The documented drop report cadence: the first drop, then every 1,000th."""


@pytest.fixture
def bulk() -> Iterator[BulkRegistry]:
    with serving(BulkRegistry(PACKAGES, VERSIONS), "the bulk registry") as registry:
        yield registry




class RssSampler:
    """Samples a process's RSS in the background while a burst runs."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[int, int]] = []
        """(requests completed so far, RSS in bytes)"""
        self.done = 0

    async def run(self) -> None:
        while True:
            self.samples.append((self.done, rss(self.pid).current))
            await asyncio.sleep(self.interval)

    def at(self, completed: int) -> int:
        """The first RSS sampled once `completed` requests had finished."""
        return next(size for done, size in self.samples if done >= completed)


async def burst(base: str, paths: list[str], sampler: RssSampler,
                statuses: Counter[int], short: list[str], expected: bytes) -> None:
    pending = iter(paths)
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> None:
            for path in pending:
                async with session.get(base + path) as response:
                    body = await response.read()
                statuses[response.status] += 1
                if response.status == 200 and body != expected:
                    short.append(path)
                sampler.done += 1

        await asyncio.gather(*(client() for _ in range(CONNECTIONS)))


@pytest.mark.timeout(600)  # the burst takes 220 to 270 s on 2 cores: every first pull is read
async def test_a_burst_of_50000_distinct_pulls_against_a_full_queue_is_served_in_bounded_memory(
    guarded: GuardedFactory, bulk: BulkRegistry, hanging_target: ThreadedApp,
) -> None:
    proxy: MirrorgateProcess = guarded("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": bulk.url,
        "MIRRORGATE_MIRROR_TARGET": hanging_target.url,
        "MIRROR_QUEUE_MAX_DEPTH": str(DEPTH),
        "MIRRORGATE_UPSTREAM_TIMEOUT": "300",
        "MIRRORGATE_CACHE_TTL": "600",
        "MIRRORGATE_DRAIN_TIMEOUT": "1",
    })
    sampler = RssSampler(proxy.pid)
    statuses: Counter[int] = Counter()
    short: list[str] = []
    start = rss(proxy.pid)

    sampling = asyncio.create_task(sampler.run())
    started = time.monotonic()
    try:
        await burst(proxy.registry_url.rstrip("/"), bulk.tarball_paths(), sampler, statuses,
                    short, bulk.tarball)
    finally:
        sampling.cancel()
    took = time.monotonic() - started
    end = rss(proxy.pid)
    middle = sampler.at(REQUESTS // 2)

    dropped = proxy.metric("mirrorgate_jobs_dropped_total", provider="memory")
    depth = proxy.metric("mirrorgate_queue_depth", provider="memory")
    taken = proxy.metric("mirrorgate_jobs_sent_total", provider="memory")
    enqueued = proxy.metric("mirrorgate_jobs_enqueued_total")
    reports = [line["dropped"] for line in proxy.events("mirror_queue_dropped")]
    print(f"\nrow 13: {REQUESTS} requests in {took:.1f} s ({REQUESTS / took:.0f}/s) over "
          f"{CONNECTIONS} connections; statuses {dict(statuses)}; RSS start "
          f"{mib(start.current)}, midpoint {mib(middle)}, peak {mib(end.peak)}, end "
          f"{mib(end.current)}; queue depth {depth:.0f}, taken by the worker {taken:.0f}, "
          f"dropped {dropped:.0f}, enqueued {enqueued:.0f}; {len(reports)} "
          f"mirror_queue_dropped lines")

    assert statuses == {200: REQUESTS}
    assert short == []
    assert bulk.seen["tarball"] == REQUESTS
    # the proxy's fills alone: the worker's first step on the job it took is the target's
    # packument (is the name first-party?), where it stalls before any re-gate read of public
    assert bulk.seen["packument"] == PACKAGES
    assert proxy.metric("mirrorgate_jobs_total") == 0  # the worker is stuck on its first job
    assert depth == DEPTH
    assert dropped + depth + taken == REQUESTS
    assert enqueued == depth + taken
    assert dropped >= REQUESTS - DEPTH - 2 * 10  # the stalled worker took one batch or two
    assert reports == [1, *range(REPORT_EVERY, int(dropped) + 1, REPORT_EVERY)]
    assert len(proxy.events("job_enqueued")) == enqueued
    assert end.current - middle < 16 * MIB, (
        f"RSS grew from {mib(middle)} to {mib(end.current)} over the second half of the burst")
    assert end.peak - start.current < 256 * MIB
    assert proxy.returncode is None
    assert proxy.get("readyz").status == 200
