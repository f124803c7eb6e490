"""One rule for CPU-bound work on the event loop: above `THREAD_ABOVE` bytes it runs in a thread.

Gating a 10 MB packument or hashing a 50 MB tarball stalls every other client for as long as it
takes; below the bound, handing the work to a thread costs more than doing it in place.

`Budget` bounds how much of that large work is in memory at once: a parsed packument is about
four times its bytes, and its gated versions another one and a half, so six 20 MB fills side
by side in the thread pool held over a GiB at the peak of a cold install.

`batched` hands small blocking calls (the file store's opens and reads) to a thread together:
the calls of one loop tick cost one hand-off and one wake-up, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["THREAD_ABOVE", "Budget", "batched", "in_thread_if_large"]

THREAD_ABOVE = 256 * 1024
"""Documents and tarballs larger than this (in bytes) are worked on in a thread."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def in_thread_if_large(size: int, work: Callable[_P, _T],
                             *args: _P.args, **kwargs: _P.kwargs) -> _T:
    if size > THREAD_ABOVE:
        return await asyncio.to_thread(work, *args, **kwargs)
    return work(*args, **kwargs)


class Budget:
    """Bytes of large work in flight at once, at most `limit`: a holder of more than
    `THREAD_ABOVE` bytes waits until its size fits (one larger than the whole budget runs
    once nothing else is held); smaller work never waits."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._changed: asyncio.Condition | None = None

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        if size <= THREAD_ABOVE:
            yield
            return
        if self._changed is None:
            self._changed = asyncio.Condition()
        changed = self._changed
        async with changed:
            await changed.wait_for(lambda: self.held == 0 or self.held + size <= self.limit)
            self.held += size
        try:
            yield
        finally:
            async with changed:
                self.held -= size
                changed.notify_all()


_Call = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class _Batch:
    """The calls made on one loop since its last tick, and whether a hand-off is due."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: list[_Call] = []

    def add(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        if not self.calls:
            self.loop.call_soon(self._hand_off)  # once the tick's other callbacks have run
        self.calls.append((call, future))
        return future

    def _hand_off(self) -> None:
        calls, self.calls = self.calls, []
        done = self.loop.run_in_executor(None, _run_all, calls)
        done.add_done_callback(lambda finished: _settle(calls, finished))


def _run_all(calls: list[_Call]) -> list[tuple[bool, Any]]:
    """In the thread: each call in order, its result or its exception."""
    outcomes: list[tuple[bool, Any]] = []
    for call, _future in calls:
        try:
            outcomes.append((True, call()))
        except Exception as error:  # the caller's to raise, not the batch's
            outcomes.append((False, error))
    return outcomes


def _settle(calls: list[_Call], finished: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    error = finished.exception() if not finished.cancelled() else asyncio.CancelledError()
    outcomes = finished.result() if error is None else [(False, error)] * len(calls)
    for (_call, future), (ok, value) in zip(calls, outcomes, strict=True):
        if future.done():  # its caller was cancelled; the call ran all the same
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


_BATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batch] = (
    weakref.WeakKeyDictionary())


async def batched(work: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """`work(*args, **kwargs)` in a thread, with every other call made before the loop's
    next tick: one hand-off for all of them (about 44 µs of CPU each on uvloop, and a cold
    install made thousands). For small calls only: each waits for those before it in its
    batch, and no context variable is carried over."""
    loop = asyncio.get_running_loop()
    batch = _BATCHES.get(loop)
    if batch is None:
        batch = _BATCHES[loop] = _Batch(loop)
    result: _T = await batch.add(lambda: work(*args, **kwargs))
    return result
