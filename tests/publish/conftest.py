"""The publish suite: the real npm client publishing through the real `mirrorgate serve` into a
real Verdaccio. Processes start through the faults suite's `guarded` fixture (the private token
and every client token are searched for in every log line and metric at teardown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.access.rig import SecretDir
from tests.faults.guarded import guard, guarded

__all__ = ["guard", "guarded", "secret_dir"]


@pytest.fixture
def secret_dir(tmp_path: Path) -> SecretDir:
    return SecretDir(tmp_path / "client-tokens")
