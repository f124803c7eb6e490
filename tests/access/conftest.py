"""The client-access suite: the real `mirrorgate serve`, real Verdaccio, the real npm client.

Processes start through the faults suite's `guarded` fixture, so mirrorgate's private token is
searched for in every log line and metric at teardown; each test also hands the guard its
client tokens (`guard.watch`). A tokens file lives in a Kubernetes-style Secret directory
(`SecretDir`), so a rotation is the kubelet's symlink swap, not an in-place write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.access.issuer import LoopbackIssuer
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import guard, guarded

__all__ = ["SecretDir", "auth_npmrc", "guard", "guarded", "issuer", "secret_dir",
           "start_guarded"]


@pytest.fixture
def secret_dir(tmp_path: Path) -> SecretDir:
    return SecretDir(tmp_path / "client-tokens")


@pytest.fixture
def issuer() -> Iterator[LoopbackIssuer]:
    """A started OpenID Connect issuer on loopback (`tests.access.issuer`)."""
    with LoopbackIssuer() as started:
        yield started
