"""The end-to-end suite's fixtures for the sidecar pod, kept beside what they start.

`gate` (the publish gate in front of Verdaccio) and `queue_backend` with `queue_environment`
(a fresh queue on SQS, then on Pub/Sub) live in `tests.e2e.sidecar`, where the faults suite's
row 14 imports them too; importing them here makes them fixtures of this directory.
"""

from __future__ import annotations

from tests.e2e.sidecar import gate, queue_backend, queue_environment

__all__ = ["gate", "queue_backend", "queue_environment"]
