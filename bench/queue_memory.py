"""How the bounded memory queue behaves under a cold-cache burst with no consumer.

Enqueues 100,000 jobs into a queue capped at 10,000, timing each enqueue (median and p99 in
microseconds), reports the RSS growth against the cap's worth of jobs held, then drains the
queue and reports receive throughput. Targets (issue 2): p99 <= 20 us per enqueue, and RSS growth
within the cap's worth of jobs (the 90,000 dropped jobs cost nothing to keep).

    .venv/bin/python -m bench.queue_memory
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import sys
import time
import tracemalloc
from array import array

from mirrorgate.backends.memory import MemoryQueueSettings, bounded_memory_queue
from mirrorgate.integrity import Digest
from mirrorgate.mirror import MirrorArtifact, MirrorJob, encode_job

TOTAL = 100_000
CAP = 10_000
SLACK = 1.25
"""tracemalloc counts the bytes asked for; RSS counts whole pages and allocator arenas."""


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def job(i: int) -> MirrorJob:
    name = f"package-{i}"
    return MirrorJob(
        name=name,
        version="1.2.3",
        artifact=MirrorArtifact(
            tarball_url=f"http://127.0.0.1:9/{name}/-/{name}-1.2.3.tgz",
            filename=f"{name}-1.2.3.tgz",
            size=48_213,
            digests=(Digest("sha512", "A" * 86 + "=="), Digest("sha1", "B" * 27 + "=")),
        ),
        manifest={"name": name, "version": "1.2.3", "description": "a package " * 8,
                  "dependencies": {f"dep-{k}": f"^{k}.0.0" for k in range(6)},
                  "dist": {"tarball": f"http://127.0.0.1:9/{name}/-/{name}-1.2.3.tgz"}},
    )


def cap_worth_kib() -> float:
    """What holding CAP jobs costs in Python objects (tracemalloc), the RSS budget."""
    tracemalloc.start()
    held = [job(i) for i in range(CAP)]
    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del held
    return size / 1024


async def main() -> None:
    drops: list[int] = []
    queue = bounded_memory_queue(MemoryQueueSettings(CAP, poll_window=0.01), drops.append)
    timings = array("d", bytes(8 * TOTAL))  # preallocated so the record costs no RSS growth
    clock = time.perf_counter_ns
    before = rss_kib()
    for i in range(TOTAL):
        item = job(i)  # built outside the timer, as the serve path builds it per request
        started = clock()
        await queue.enqueue(item)
        timings[i] = (clock() - started) / 1000
    del item
    gc.collect()
    grown = rss_kib() - before
    ordered = sorted(timings)
    p50 = statistics.median(ordered)
    p99 = ordered[int(len(ordered) * 0.99)]
    stats = queue.stats()
    budget = cap_worth_kib()  # measured after, so its freed memory cannot flatter the growth
    print(f"enqueue: {TOTAL} jobs into cap {CAP}: median {p50:.2f} us, p99 {p99:.2f} us "
          f"(target p99 <= 20 us: {'met' if p99 <= 20 else 'MISSED'})")
    print(f"held {stats.depth}, dropped {stats.dropped}, drop reports at {drops[:4]}...")
    print(f"RSS growth: {grown} KiB; the cap's worth of jobs is {budget:.0f} KiB "
          f"(ratio {grown / budget:.2f}; target <= {SLACK}: "
          f"{'met' if grown <= budget * SLACK else 'MISSED'}; holding all {TOTAL} would be "
          f"{TOTAL // CAP}x); "
          f"encoded job {len(encode_job(job(0)))} B")
    started = clock()
    drained = 0
    while True:
        batch = await queue.receive()
        if not batch:
            break
        drained += len(batch)
    seconds = (clock() - started) / 1e9
    print(f"drain: {drained} jobs in {seconds * 1000:.1f} ms, {drained / seconds:,.0f} jobs/s "
          "(batches of at most 10)")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
