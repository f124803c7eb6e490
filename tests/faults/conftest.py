"""The faults suite's fixtures: `guarded` (tests/faults/guarded.py), the mirror target that
never answers (tests/faults/hanging.py) and the sidecar pod's."""

from __future__ import annotations

from tests.e2e.sidecar import gate, queue_backend, queue_environment
from tests.faults.guarded import guard, guarded
from tests.faults.hanging import hanging_target

__all__ = ["gate", "guard", "guarded", "hanging_target", "queue_backend", "queue_environment"]
