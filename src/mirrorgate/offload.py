"""One rule for CPU-bound work on the event loop: above `THREAD_ABOVE` bytes it runs in a thread.

Gating a 10 MB packument or hashing a 50 MB tarball stalls every other client for as long as it
takes; below the bound, handing the work to a thread costs more than doing it in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["THREAD_ABOVE", "in_thread_if_large"]

THREAD_ABOVE = 256 * 1024
"""Documents and tarballs larger than this (in bytes) are worked on in a thread."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def in_thread_if_large(size: int, work: Callable[_P, _T],
                             *args: _P.args, **kwargs: _P.kwargs) -> _T:
    if size > THREAD_ABOVE:
        return await asyncio.to_thread(work, *args, **kwargs)
    return work(*args, **kwargs)
