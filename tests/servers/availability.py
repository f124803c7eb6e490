"""What a test does when a server it needs cannot run here: fail under CI, skip elsewhere.

On a developer's machine a missing Verdaccio, npm or a port that cannot be bound says "not
here" (a skip with the reason); under CI (the CI environment variable set) the same is a
failure, since there every server must run. mirrorgate itself failing to start is never this:
it is what the tests are about, and stays an error.

- `unavailable(reason)`: the one place that decision is made.
- `serving(server, what)`: enter a server (anything whose `with` starts and stops it), yield
  it, stop it on exit; a start that cannot bind (`OSError`) or finds its program missing
  (`ServerUnavailableError`) is `unavailable`, never an error from deep inside a test.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NoReturn, TypeVar

import pytest

from tests.servers.processes import ServerUnavailableError

__all__ = ["serving", "unavailable"]

T = TypeVar("T")


def unavailable(reason: str) -> NoReturn:
    """A server the test needs cannot run here: fail under CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def serving(server: contextlib.AbstractContextManager[T], what: str) -> Iterator[T]:
    """`with serving(FixtureRegistry(), "the fixture registry") as registry:` starts the
    server, yields what its `with` gives and stops it on exit."""
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(server)
        except ServerUnavailableError as error:
            unavailable(str(error))
        except OSError as error:
            unavailable(f"{what} could not listen: {error}")
        yield started
