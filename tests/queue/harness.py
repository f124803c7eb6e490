"""What the conformance suite needs to know about a backend besides its MirrorQueue.

`window` is how long an unacked delivery stays invisible before a receive can see it again
(0 for the test double, whose next receive already redelivers); `hold` is the extension the
suite asks for when it checks that extend_visibility holds a delivery in flight; `patience` is
how long to keep receiving for a delivery that should come, and `quiet` how long to keep
receiving to be sure one that should not come does not.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from mirrorgate.mirror import MirrorQueue, QueueMessage


@dataclass(frozen=True)
class Harness:
    kind: str
    queue: MirrorQueue
    window: float = 0.0
    hold: int = 1
    patience: float = 1.0
    quiet: float = 0.2


async def receive_within(queue: MirrorQueue, seconds: float, want: int = 1) -> list[QueueMessage]:
    """Receive until `want` messages arrived or `seconds` passed (one receive at least)."""
    got: list[QueueMessage] = []
    deadline = time.monotonic() + seconds
    while True:
        got.extend(await queue.receive())
        if len(got) >= want or time.monotonic() >= deadline:
            return got
        await asyncio.sleep(0)
