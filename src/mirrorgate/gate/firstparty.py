"""The names mirrorgate has learned are first-party, remembered across outages and restarts.

While the private upstream fails, its answer cannot say whether a name is the organisation's;
this memory can, so a first-party name is served from the stale cache or refused (503), never
from public alone. `[private].names` says the same from configuration, for every replica at
once and before any fill: the memory is for names no scope covers.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.gate.memory import DurableMap

__all__ = ["FILENAME", "MAX_NAMES", "FirstPartyNames"]

FILENAME = "first-party-names"
MAX_NAMES = 100_000
"""Names remembered; an organisation publishing more has a [private].names scope to say so."""


class FirstPartyNames:
    """A bounded set of package names (least recently filled forgotten first), persisted at
    `path` (None: this process only) as `+name` and `-name` lines (`memory.DurableMap`)."""

    def __init__(self, path: Path | None, *, limit: int = MAX_NAMES) -> None:
        self._map = DurableMap(path, what="first_party_names", limit=limit)

    @property
    def persistent(self) -> bool:
        return self._map.persistent

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def __len__(self) -> int:
        return len(self._map)

    def remember(self, name: str) -> None:
        self._map.set(name)

    def forget(self, name: str) -> None:
        self._map.delete(name)
