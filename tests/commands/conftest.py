"""Lockfiles written once per session by the real clients (see `lockfile_projects`), copied
into each test that needs one under the name the client gave it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.commands.lockfile_projects import LOCKFILES, GitServer, tree_packages, write_lockfile
from tests.servers.availability import serving, unavailable
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.processes import ServerUnavailableError


@pytest.fixture(scope="session")
def generated_lockfiles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """kind (a `LOCKFILES` key) -> the lockfile its client wrote for the tree."""
    root = tmp_path_factory.mktemp("lockfiles")
    found: dict[str, Path] = {}
    try:
        git = GitServer(root / "git")
    except ServerUnavailableError as error:
        unavailable(str(error))
    with serving(FixtureRegistry(*tree_packages()), "the fixture registry") as public, \
            serving(git, "the git server"):
        for kind in LOCKFILES:
            try:
                found[kind] = write_lockfile(kind, root / kind, public, git)
            except ServerUnavailableError as error:
                unavailable(str(error))
        yield found


@pytest.fixture
def lockfile_copy(generated_lockfiles: dict[str, Path],
                  tmp_path: Path) -> Callable[[str], Path]:
    """`lockfile_copy(kind)`: a fresh copy of that lockfile, under its own name, in a folder of
    the test's own (so a test may mangle it)."""

    def copy(kind: str) -> Path:
        source = generated_lockfiles[kind]
        folder = tmp_path / kind
        folder.mkdir(exist_ok=True)
        return Path(shutil.copy(source, folder / source.name))

    return copy
