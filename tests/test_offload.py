"""The budget of large work in memory at once: the fills of a cold install's biggest packuments
wait their turn instead of all being parsed side by side (a parse is four times its bytes).
And small blocking calls handed to a thread together, one hand-off a loop tick."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from mirrorgate.offload import THREAD_ABOVE, Budget, batched

MIB = 1024 * 1024


async def test_large_work_past_the_budget_waits_until_room_is_given_back() -> None:
    budget = Budget(32 * MIB)
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with budget.hold(20 * MIB):
            order.append("first in")
            first_in.set()
            await release_first.wait()
        order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with budget.hold(20 * MIB):
            order.append("second in")
            assert budget.held == 20 * MIB

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await first_in.wait()
    await asyncio.sleep(0.01)
    assert order == ["first in"]  # 40 MiB would not fit: the second waits
    release_first.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "first out", "second in"]
    assert budget.held == 0


async def test_work_larger_than_the_whole_budget_runs_alone_and_small_work_never_waits() -> None:
    budget = Budget(8 * MIB)
    async with budget.hold(50 * MIB):  # alone: it runs
        assert budget.held == 50 * MIB
        async with asyncio.timeout(1):
            async with budget.hold(THREAD_ABOVE):  # small: done on the loop, never waits
                pass
    assert budget.held == 0


async def test_a_holder_that_fails_gives_its_bytes_back() -> None:
    budget = Budget(8 * MIB)
    try:
        async with budget.hold(4 * MIB):
            raise ValueError("the gate refused the document")
    except ValueError:
        pass
    assert budget.held == 0
    async with asyncio.timeout(1), budget.hold(8 * MIB):
        pass


def counted_hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The running loop's executor submissions, counted (one per thread hand-off)."""
    loop = asyncio.get_running_loop()
    handed: list[int] = []
    submit = loop.run_in_executor

    def counting(executor: Any, work: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        handed.append(1)
        return submit(executor, work, *args)

    monkeypatch.setattr(loop, "run_in_executor", counting)
    return handed


async def test_small_calls_made_in_one_tick_cost_one_thread_hand_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handed = counted_hand_offs(monkeypatch)
    threads: list[int] = []

    def call(value: int) -> int:
        threads.append(threading.get_ident())
        return value * 2

    results = await asyncio.gather(*[batched(call, value) for value in range(20)])

    assert results == [value * 2 for value in range(20)]  # each its own, in order
    assert len(handed) == 1
    assert len(set(threads)) == 1
    assert threads[0] != threading.get_ident()
    assert await batched(call, 21) == 42  # the next tick: a hand-off of its own
    assert len(handed) == 2


async def test_a_call_that_raises_fails_its_caller_alone() -> None:
    def broken() -> None:
        raise FileNotFoundError("gone")

    outcomes = await asyncio.gather(batched(len, b"abc"), batched(broken),
                                    batched(len, b"de"), return_exceptions=True)

    assert outcomes[0] == 3
    assert outcomes[2] == 2
    assert isinstance(outcomes[1], FileNotFoundError)


async def test_a_caller_that_stops_waiting_leaves_the_others_their_results() -> None:
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "slow"

    gone = asyncio.create_task(batched(slow))
    kept = asyncio.create_task(batched(str.upper, "kept"))
    await asyncio.sleep(0)
    await asyncio.to_thread(started.wait, 5)
    gone.cancel()
    release.set()
    assert await kept == "KEPT"
    with pytest.raises(asyncio.CancelledError):
        await gone
