"""The mirrored versions the public registry was seen to withdraw, remembered durably.

A takedown is learned from public's answer (the version gone from a packument that answers);
it must hold when public stops answering right after, and across a restart, or an outage would
bring back exactly the version npm removed for being malicious (docs/withdrawals.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mirrorgate.gate.memory import DurableMap

__all__ = ["FILENAME", "MAX_WITHDRAWALS", "WithdrawnVersions"]

FILENAME = "withdrawn-versions"
MAX_WITHDRAWALS = 100_000
"""Withdrawals remembered (npm removes a few hundred malicious versions a month)."""


class WithdrawnVersions:
    """`name@version` -> the moment the withdrawal was first seen (ISO 8601), persisted at
    `path` (None: this process only) as `+name@version<TAB>moment` and `-name@version` lines."""

    def __init__(self, path: Path | None, *, limit: int = MAX_WITHDRAWALS) -> None:
        self._map = DurableMap(path, what="withdrawn_versions", limit=limit)

    @property
    def persistent(self) -> bool:
        return self._map.persistent

    def __len__(self) -> int:
        return len(self._map)

    def seen(self, name: str, version: str) -> str | None:
        """When the withdrawal of `name@version` was first seen; None if it never was."""
        return self._map.get(f"{name}@{version}")

    def of(self, name: str, versions: Mapping[str, object]) -> dict[str, str]:
        """The withdrawals remembered among `versions` of `name` (a packument's versions)."""
        found = {}
        for version in versions:
            seen = self._map.get(f"{name}@{version}")
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
                self._map.delete(key)  # listed again with the bytes the mirror holds
            elif self._map.get(key) is None:
                self._map.set(key, seen)
                new.append(version)
        return new

    def entries(self) -> list[tuple[str, str, str]]:
        """Every remembered withdrawal as (name, version, first seen), for audit."""
        found = []
        for key in self._map:
            seen = self._map.get(key)
            name, _, version = key.rpartition("@")
            if seen is not None and name:
                found.append((name, version, seen))
        return found
