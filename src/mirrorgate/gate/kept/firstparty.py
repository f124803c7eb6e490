"""The names mirrorgate has learned are first-party, remembered across outages and restarts.

While the private upstream fails, its answer cannot say whether a name is the organisation's;
this memory can, so a first-party name is served from the stale cache or refused (503), never
from public alone. `[private].names` says the same from configuration, for every replica at
once and before any fill: the memory is for names no scope covers. Kept in the state store
(`facts`), so every replica of a fleet knows what one of them learned.
"""

from __future__ import annotations

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.store import FIRST_PARTY

__all__ = ["FirstPartyNames"]


class FirstPartyNames:
    """A set of package names over `facts` (None: this process only)."""

    def __init__(self, facts: KeptFacts | None = None) -> None:
        self.facts = facts if facts is not None else KeptFacts()

    @property
    def persistent(self) -> bool:
        return self.facts.persistent

    @property
    def known(self) -> bool:
        """Whether the remembered names are loaded: until then a name cannot be said not to be
        first-party, and an outage of the private upstream fails closed for every name."""
        return self.facts.ready

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.facts.get(FIRST_PARTY, name) is not None

    def __len__(self) -> int:
        return self.facts.count(FIRST_PARTY)

    def remember(self, name: str) -> None:
        self.facts.put(FIRST_PARTY, name)

    def forget(self, name: str) -> None:
        self.facts.forget(FIRST_PARTY, name)
