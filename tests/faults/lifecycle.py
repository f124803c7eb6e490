"""Starting the faults suite's own servers the way the shared fixtures start theirs.

The hand-written upstreams (`ThreadedApp`, `BulkRegistry`), an extra fixture registry and the
`TcpRelay` each bind a loopback port. One that cannot is, like Verdaccio or moto, a failure
when the CI environment variable is set and a skip elsewhere (`tests.servers.fixtures
.unavailable`), never an error from deep inside a test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

from tests.servers.fixtures import unavailable

__all__ = ["serving"]

S = TypeVar("S")


@contextlib.contextmanager
def serving(server: S, start: Callable[[S], object], stop: Callable[[S], object],
            what: str) -> Iterator[S]:
    """`start(server)`, yield it, `stop(server)`; a start that raises OSError is reported as
    `what` being unavailable."""
    try:
        start(server)
    except OSError as error:
        unavailable(f"{what} could not listen on 127.0.0.1: {error}")
    try:
        yield server
    finally:
        stop(server)
