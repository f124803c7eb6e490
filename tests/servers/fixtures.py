"""The pytest fixtures for the real servers: the fixture public registry, Verdaccio, npm, and
the mirrorgate command itself.

Every fixture is function-scoped, so no test sees another's packages, storage or processes.
A helper that is not installed or does not start (Verdaccio, npm) is a failure when the CI
environment variable is set and a skip otherwise; mirrorgate failing to start is always a
failure, since it is what the tests are about.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NoReturn, Protocol

import pytest

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient, npm_executable
from tests.servers.processes import MirrorgateProcess, ServerUnavailableError
from tests.servers.verdaccio import Verdaccio

__all__ = [
    "MirrorgateFactory",
    "mirrorgate",
    "npm_client",
    "public_registry",
    "unavailable",
    "verdaccio",
]


def unavailable(reason: str) -> NoReturn:
    """A server the test needs cannot run here: fail under CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def public_registry() -> Iterator[FixtureRegistry]:
    """A started, empty fixture registry; `public_registry.add(make_package(...))`."""
    registry = FixtureRegistry()
    try:
        registry.start()
    except OSError as error:
        unavailable(f"the fixture registry could not listen on 127.0.0.1: {error}")
    yield registry
    registry.stop()


@pytest.fixture
def verdaccio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Verdaccio]:
    """A started Verdaccio with fresh storage and a user; `verdaccio.token` publishes."""
    server = Verdaccio(tmp_path_factory.mktemp("verdaccio"))
    try:
        server.start()
    except ServerUnavailableError as error:
        unavailable(str(error))
    yield server
    server.stop()


@pytest.fixture
def npm_client(tmp_path: Path) -> NpmClient:
    """The npm client isolated in `tmp_path / "npm"`; set `.registry` or pass `registry=`."""
    if npm_executable() is None:
        unavailable("npm is not on PATH; install Node.js 20+ with npm")
    return NpmClient(tmp_path / "npm")


class MirrorgateFactory(Protocol):
    def __call__(self, command: str = "serve", env: Mapping[str, str] | None = None, *,
                 ready: bool = True, timeout: float = 15.0) -> MirrorgateProcess: ...


@pytest.fixture
def mirrorgate(tmp_path: Path) -> Iterator[MirrorgateFactory]:
    """Start the real command: `mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": url})`
    returns once /readyz answers 200 (`ready=False` returns at once). Every process started
    is stopped at teardown (SIGTERM, then SIGKILL)."""
    started: list[MirrorgateProcess] = []

    def start(command: str = "serve", env: Mapping[str, str] | None = None, *,
              ready: bool = True, timeout: float = 15.0) -> MirrorgateProcess:
        process = MirrorgateProcess(command, env,
                                    workdir=tmp_path / f"mirrorgate-{len(started)}")
        started.append(process)
        return process.start(ready=ready, timeout=timeout)

    yield start
    for process in started:
        if process.process is not None and process.process.returncode is None:
            process.running.stop(timeout=10)
