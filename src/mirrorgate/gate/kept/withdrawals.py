"""The mirrored versions the public registry was seen to withdraw, remembered durably.

A takedown is learned from public's answer (the version gone from a packument that answers);
it must hold when public stops answering right after, and across a restart, or an outage would
bring back exactly the version npm removed for being malicious (docs/withdrawals.md). Kept in
the state store (`facts`), so every replica and worker enforces what one of them saw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.store import WITHDRAWN

__all__ = ["WithdrawnVersions"]


class WithdrawnVersions:
    """`name@version` -> the moment the withdrawal was first seen (ISO 8601), over `facts`
    (None: this process only)."""

    def __init__(self, facts: KeptFacts | None = None) -> None:
        self.facts = facts if facts is not None else KeptFacts()
        self.on_new: Callable[[str, str, str], None] | None = None
        """Called with (name, version, first seen) for a withdrawal seen for the first time
        (`gate.pulls.exposure`: who already pulled it)."""

    @property
    def persistent(self) -> bool:
        return self.facts.persistent

    @property
    def known(self) -> bool:
        """Whether the remembered withdrawals are loaded (see `FirstPartyNames.known`)."""
        return self.facts.ready

    def __len__(self) -> int:
        return self.facts.count(WITHDRAWN)

    def seen(self, name: str, version: str) -> str | None:
        """When the withdrawal of `name@version` was first seen; None if it never was."""
        return self.facts.get(WITHDRAWN, f"{name}@{version}")

    def of(self, name: str, versions: Mapping[str, object]) -> dict[str, str]:
        """The withdrawals remembered among `versions` of `name` (a packument's versions)."""
        found = {}
        for version in versions:
            seen = self.facts.get(WITHDRAWN, f"{name}@{version}")
            if seen is not None:
                found[version] = seen
        return found

    def record(self, name: str, versions: Mapping[str, object],
               withdrawn: Mapping[str, str]) -> list[str]:
        """Make the memory of `name`'s `versions` (a private packument's, as gated against a
        public answer) what that gate found `withdrawn`. Returns the versions newly seen."""
        new = []
        for version in versions:
            key = f"{name}@{version}"
            seen = withdrawn.get(version)
            if seen is None:
                self.facts.forget(WITHDRAWN, key)  # listed again with the bytes the mirror holds
            elif self.facts.get(WITHDRAWN, key) is None:
                self.facts.put(WITHDRAWN, key, seen)
                new.append(version)
                if self.on_new is not None:
                    self.on_new(name, version, seen)
        return new

    def entries(self) -> list[tuple[str, str, str]]:
        """Every remembered withdrawal as (name, version, first seen), for audit."""
        found = []
        for key in self.facts.keys(WITHDRAWN):
            seen = self.facts.get(WITHDRAWN, key)
            name, _, version = key.rpartition("@")
            if seen is not None and name:
                found.append((name, version, seen))
        return found
