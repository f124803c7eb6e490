"""What the conformance suite needs to know about a backend besides its MirrorQueue.

`window` is how long an unacked delivery stays invisible before a receive can see it again
(0 for the test double, whose next receive already redelivers); `hold` is the extension the
suite asks for when it checks that extend_visibility holds a delivery in flight; `patience` is
how long to keep receiving for a delivery that should come, and `quiet` how long to keep
receiving to be sure one that should not come does not, where only time can show it (a hold).
`after_a_visibility_window` is the event-based form of "wait out the window, then see nothing
came back".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from mirrorgate.mirror import MirrorQueue, QueueMessage
from tests.builders import make_job


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


MARKER = "visibility-marker"


async def after_a_visibility_window(queue: MirrorQueue,
                                    seconds: float = 20.0) -> list[QueueMessage]:
    """Every message (other than a marker) received until a whole visibility window has passed
    since the call, proven by an event rather than a sleep: a marker job is sent, received
    and left unacked, and receiving goes on until the queue delivers it again. Anything that was
    in flight before the call and not acked would have come back by then (or in that batch).
    The marker is acked before returning; fails after `seconds` without its redelivery. On a
    queue that never redelivers, nothing can come back: one receive shows what is there."""
    if not queue.redelivers:
        return await queue.receive()
    await queue.enqueue(make_job(MARKER))
    others: list[QueueMessage] = []
    marker: list[QueueMessage] = []
    deadline = time.monotonic() + seconds
    while len(marker) < 2:
        assert time.monotonic() < deadline, f"the marker was not redelivered within {seconds:g}s"
        for message in await queue.receive():
            if message.job is not None and message.job.name == MARKER:
                marker.append(message)
            else:
                others.append(message)
        await asyncio.sleep(0)
    await queue.ack(marker[-1].receipt)
    return others
