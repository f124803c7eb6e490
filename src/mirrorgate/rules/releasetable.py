"""The `[release]` table's settings: each release signal's action, the allow list, the bounds.

Apart from the checks (`rules.release`) because the compiled policy (`rules.policy`) holds these
settings and the checks read the compiled policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from mirrorgate.rules.patterns import PatternList

__all__ = ["ACTIONS", "NEW_DEPENDENCY_YOUNG", "NEW_INSTALL_SCRIPT", "OBFUSCATED_CODE",
           "RELEASE_SIGNALS", "TYPOSQUAT", "Action", "ReleaseRules"]

NEW_INSTALL_SCRIPT = "new-install-script"
NEW_DEPENDENCY_YOUNG = "new-dependency-young"
OBFUSCATED_CODE = "obfuscated-code"
TYPOSQUAT = "typosquat"
RELEASE_SIGNALS: tuple[str, ...] = (NEW_INSTALL_SCRIPT, NEW_DEPENDENCY_YOUNG, OBFUSCATED_CODE,
                                    TYPOSQUAT)
"""In the order they are reported; the rules file's keys are these with `_` for `-`."""
Action = Literal["deny", "quarantine", "report", "off"]
ACTIONS: tuple[str, ...] = ("deny", "quarantine", "report", "off")


@dataclass(frozen=True)
class ReleaseRules:
    """The `[release]` table: each signal's action, how young a name is suspicious, how long
    a quarantine lasts, the allow list, and what a version whose analysis cannot finish gets."""

    actions: Mapping[str, str] = field(default_factory=dict)
    young: timedelta = timedelta(days=30)
    young_text: str = "30 days"
    quarantine: timedelta = timedelta(days=7)
    quarantine_text: str = "7 days"
    allow: PatternList = field(default_factory=PatternList)
    unavailable: str = "admit"
    """`admit` (logged and counted as `unchecked`) or `deny` (until the analysis can run)."""

    def action(self, signal: str) -> str:
        return self.actions.get(signal, "off")

    @property
    def on(self) -> bool:
        return any(self.action(signal) != "off" for signal in RELEASE_SIGNALS)
