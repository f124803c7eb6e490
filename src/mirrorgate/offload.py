"""One rule for CPU-bound work on the event loop: above `THREAD_ABOVE` bytes it runs in a thread.

Gating a 10 MB packument or hashing a 50 MB tarball stalls every other client for as long as it
takes; below the bound, handing the work to a thread costs more than doing it in place.

`Budget` bounds how much of that large work is in memory at once: a parsed packument is about
four times its bytes, and its gated versions another one and a half, so six 20 MB fills side
by side in the thread pool held over a GiB at the peak of a cold install.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import ParamSpec, TypeVar

__all__ = ["THREAD_ABOVE", "Budget", "in_thread_if_large"]

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
