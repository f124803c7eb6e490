"""`bench.cpus.pin` moves a running server whole: every thread it has, not only its first.

The fault it guards: a bench pinned `mirrorgate serve` by its pid after it started, which on
Linux moves the main thread alone; the executor and reading-lane threads it had started went
on running on the load generator's CPU, and the server's CPU a request was measured on two
cores while the bench said one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from bench.cpus import EVERYWHERE, pin

CHILD = """
import sys, threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def server() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    yield child
    child.communicate("", timeout=10)


def _threads(pid: int) -> dict[int, set[int]]:
    return {int(task): os.sched_getaffinity(int(task))
            for task in os.listdir(f"/proc/{pid}/task")}


def test_every_thread_of_a_running_server_moves_to_the_cpu(
        server: subprocess.Popen[str]) -> None:
    if len(EVERYWHERE) < 2:
        pytest.fail("this test needs two CPUs (CI runs on two)")
    cpu = max(EVERYWHERE)
    before = _threads(server.pid)
    assert len(before) == 4
    assert all(len(cpus) > 1 for cpus in before.values())

    pin(cpu, server.pid)

    assert _threads(server.pid) == {thread: {cpu} for thread in before}


def test_a_cpu_the_bench_may_not_use_leaves_the_server_where_it_was(
        server: subprocess.Popen[str]) -> None:
    before = _threads(server.pid)
    pin(max(EVERYWHERE, default=0) + 64, server.pid)
    assert _threads(server.pid) == before
