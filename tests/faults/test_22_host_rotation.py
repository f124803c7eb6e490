"""Row 22 of the faults table: clients inventing a new `Host` for every request.

> | 22 | four clients asking for a 22 MB, 5,000-version packument, each request with a `Host`
> never seen before, without `MIRRORGATE_PUBLIC_URL` | another client's warm hits stay warm
> (its renderings are never pushed out) at a p50 within 1 ms of its quiet one; an invented
> host costs one pass over bytes kept for them and a fast gzip (under 150 ms of CPU, against
> a full rendering before), one at a time, never kept; a warning names
> `MIRRORGATE_PUBLIC_URL` |

Without a configured public URL the tarball URLs in a packument are built from the request's
`Host`, so each new `Host` needed a rendering: before, each cost 0.15 to 0.27 s of CPU and
pushed an older base's renderings out of the entry, and another client's p50 went from 0.7 ms
to 9.8 ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import realistic_package
from tests.servers.processes import MirrorgateProcess, http_request

ROTATORS = 4
SECONDS = 4.0


def cpu_seconds(proxy: MirrorgateProcess) -> float:
    """The process's CPU time so far (user and system), from /proc."""
    fields = Path(f"/proc/{proxy.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm_timings(proxy: MirrorgateProcess, seconds: float) -> list[float]:
    timings: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        started = time.perf_counter()
        reply = http_request("GET", proxy.registry_url + "huge",
                             headers={"Host": "mirrorgate.internal",
                                      "Accept-Encoding": "gzip"}, timeout=30)
        timings.append(time.perf_counter() - started)
        assert reply.status == 200
    return timings


ROTATOR = """
import sys, time, urllib.request
url, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
until, count, ok = time.monotonic() + seconds, 0, 0
while time.monotonic() < until:
    count += 1
    request = urllib.request.Request(url, headers={"Host": f"h{count}.{name}.attacker.test",
                                                   "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        ok += answer.status == 200 and bool(answer.read())
print(count, ok)
"""
"""A client inventing a Host per request, as npm would ask (gzip), in a process of its own:
in the test's process its threads would take the measuring thread's turns at the GIL."""


def timed_under_rotation(proxy: MirrorgateProcess) -> tuple[list[float], int, int]:
    """The other client's warm timings while ROTATORS processes invent hosts; and how many
    requests they sent and how many were answered 200."""
    rotators = [subprocess.Popen([sys.executable, "-c", ROTATOR, proxy.registry_url + "huge",
                                  f"r{i}", str(SECONDS)], stdout=subprocess.PIPE, text=True)
                for i in range(ROTATORS)]
    try:
        timings = warm_timings(proxy, SECONDS)
    finally:
        counts = [tuple(map(int, rotator.communicate(timeout=120)[0].split()))
                  for rotator in rotators]
    return timings, sum(sent for sent, _ in counts), sum(ok for _, ok in counts)


def test_invented_hosts_leave_another_clients_warm_hits_as_they_were(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    public_registry.add(realistic_package("huge", versions=5_000, manifest_size=4_400))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_CACHE_TTL": "3600"})
    assert len(http_request("GET", proxy.registry_url + "huge").body) > 20_000_000
    quiet = statistics.median(warm_timings(proxy, 1.0))  # this client's renderings, kept
    spent = cpu_seconds(proxy)

    timings, sent, answered = timed_under_rotation(proxy)

    per_host = (cpu_seconds(proxy) - spent) / max(1, sent)
    rotating = statistics.median(timings)
    print(f"p50 {quiet * 1000:.2f} ms quiet, {rotating * 1000:.2f} ms (max "
          f"{max(timings) * 1000:.1f} ms) beside {sent} invented hosts, "
          f"{per_host * 1000:.0f} ms of CPU each")
    assert sent > ROTATORS
    assert answered == sent  # the invented hosts are still answered
    # its renderings are never pushed out, so its hits stay hits: the p50 barely moves
    assert rotating < quiet + 0.001, (quiet, rotating)
    assert per_host < 0.150  # one pass over the bytes and a fast gzip, not a rendering
    # the first bases the process saw are kept (this client's among them), none after
    assert proxy.metric("mirrorgate_unkept_renderings_total") >= sent - 4
    assert proxy.events("unknown_base_rendered")  # the hint to set MIRRORGATE_PUBLIC_URL
