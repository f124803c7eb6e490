"""The faults suite's fixtures: `guarded` (tests/faults/guarded.py) and the sidecar pod's."""

from __future__ import annotations

from tests.e2e.sidecar import gate, queue_backend, queue_environment
from tests.faults.guarded import guard, guarded

__all__ = ["gate", "guard", "guarded", "queue_backend", "queue_environment"]
