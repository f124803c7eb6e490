"""The admission bound on its own: slots, the tarball share, the wait, the 503.

The attack stopped: a burst (or clients that never finish reading) taking every slot, so that
everything else waits without end. Past the bound a request waits a moment, then is told to
come back; tarball streams can never take the slots the metadata of an install needs.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from mirrorgate.metrics import Metrics
from mirrorgate.serve.overload import Admission
from mirrorgate.serve.refusals import Refused

WAIT = 0.05


async def test_past_the_bound_a_request_waits_then_is_refused_503_with_retry_after() -> None:
    metrics = Metrics()
    admission = Admission(2, metrics, wait=WAIT)
    async with admission.slot("packument"), admission.slot("version"):
        with pytest.raises(Refused) as caught:
            async with admission.slot("packument"):
                pass
    assert caught.value.status == 503
    assert caught.value.headers == {"Retry-After": "1"}
    assert caught.value.reason == "overloaded"
    assert metrics.registry.get_sample_value("mirrorgate_shed_total",
                                             {"route": "packument"}) == 1


async def test_a_slot_freed_during_the_wait_is_taken_instead_of_refusing() -> None:
    admission = Admission(1, Metrics(), wait=1.0)
    release = asyncio.Event()

    async def hold() -> None:
        async with admission.slot("packument"):
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.05, release.set)
    async with admission.slot("packument"):
        pass
    await holder


async def test_tarballs_take_at_most_three_quarters_and_leave_the_rest_to_metadata() -> None:
    admission = Admission(8, Metrics(), wait=WAIT)
    assert admission.tarball_limit == 6
    async with AsyncExitStack() as held:
        for _ in range(6):
            await held.enter_async_context(admission.slot("tarball"))
        with pytest.raises(Refused):
            await held.enter_async_context(admission.slot("tarball"))
        await held.enter_async_context(admission.slot("packument"))
        await held.enter_async_context(admission.slot("version"))
        with pytest.raises(Refused):
            await held.enter_async_context(admission.slot("packument"))


async def test_a_refused_tarball_gives_back_the_share_it_had_taken() -> None:
    admission = Admission(4, Metrics(), wait=WAIT)  # tarball share: 3
    async with AsyncExitStack() as held:
        for route in ("packument", "version", "packument", "tarball"):
            await held.enter_async_context(admission.slot(route))
        with pytest.raises(Refused):  # its share is free, the total is not
            await held.enter_async_context(admission.slot("tarball"))
    async with AsyncExitStack() as held:  # everything released: the full share is there
        for _ in range(3):
            await held.enter_async_context(admission.slot("tarball"))
