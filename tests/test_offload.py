"""The budget of large work in memory at once: the fills of a cold install's biggest packuments
wait their turn instead of all being parsed side by side (a parse is four times its bytes)."""

from __future__ import annotations

import asyncio

from mirrorgate.offload import THREAD_ABOVE, Budget

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
