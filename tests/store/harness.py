"""What the conformance suite runs each case on: one store, named by a spec a child process can
be handed too ("sqlite:/path/state.sqlite3" or a postgresql:// URL)."""

from __future__ import annotations

import sys
from pathlib import Path

from mirrorgate.store import Store
from mirrorgate.store.postgres import open_postgres
from mirrorgate.store.sqlite import open_sqlite

__all__ = ["open_spec", "writer_argv"]


async def open_spec(spec: str) -> Store:
    if spec.startswith("sqlite:"):
        # a lock held by another process fails a write after half a second, not five
        return await open_sqlite(Path(spec.removeprefix("sqlite:")), busy_seconds=0.5)
    return await open_postgres(spec)


def writer_argv(spec: str, prefix: str, count: int) -> list[str]:
    """A child process writing `count` facts `<prefix>-<n>`, one a transaction, printing each
    key once its write returned (acknowledged)."""
    return [sys.executable, "-m", "tests.store.writer", spec, prefix, str(count)]
