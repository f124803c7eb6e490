"""The pytest fixtures for the real servers: the fixture public registry, Verdaccio, npm, and
the mirrorgate command itself.

Every fixture is function-scoped, so no test sees another's packages, storage or processes.
A helper that is not installed or does not start (Verdaccio, npm) is a failure when the CI
environment variable is set and a skip otherwise (`tests.servers.availability`); mirrorgate
failing to start is always a failure, since it is what the tests are about.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pytest

from tests.servers.availability import serving, unavailable
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient, npm_executable
from tests.servers.processes import MirrorgateProcess
from tests.servers.verdaccio import Verdaccio

__all__ = [
    "MirrorgateFactory",
    "mirrorgate",
    "npm_client",
    "public_registry",
    "verdaccio",
]


@pytest.fixture
def public_registry() -> Iterator[FixtureRegistry]:
    """A started, empty fixture registry; `public_registry.add(make_package(...))`."""
    with serving(FixtureRegistry(), "the fixture registry") as registry:
        yield registry


@pytest.fixture
def verdaccio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Verdaccio]:
    """A started Verdaccio with fresh storage and a user; `verdaccio.token` publishes."""
    with serving(Verdaccio(tmp_path_factory.mktemp("verdaccio")), "Verdaccio") as server:
        yield server


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
