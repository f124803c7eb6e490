"""What the rules read beyond the one version they judge: the history and the registry's keys.

Built once per packument by the gate (`packument_context`) and passed to every `evaluate` of
that packument, so rules that need the whole history cost one pass, not a request per version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirrorgate.rules.signatures import KeySet
from mirrorgate.rules.takeover import History

__all__ = ["Context"]


@dataclass(frozen=True, slots=True)
class Context:
    """`history`: the public versions in publish-time order (None when no rule needs it);
    `keys`: the public registry's signing keys (None when unavailable or not fetched)."""

    history: History | None = None
    keys: KeySet | None = None

    @classmethod
    def of(cls, versions: Mapping[str, Any], times: Mapping[str, Any], *,
           needs_history: bool, keys: KeySet | None) -> Context:
        return cls(History.of(versions, times) if needs_history else None, keys)
