"""A `KeptFacts` on a real store, loaded, as a process holds one (`process._open_facts`)."""

from __future__ import annotations

from pathlib import Path

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.store.sqlite import open_sqlite

__all__ = ["kept_on"]


async def kept_on(spec: Path | str, **options: float) -> KeptFacts:
    """Facts on the SQLite file at `spec` (a Path) or the store a spec names, loaded."""
    from tests.store.harness import open_spec

    async def opener():  # type: ignore[no-untyped-def]
        if isinstance(spec, Path):
            return await open_sqlite(spec)
        return await open_spec(spec)

    facts = KeptFacts(opener, **options)  # type: ignore[arg-type]
    await facts.open()
    assert facts.ready, facts.problem
    return facts
