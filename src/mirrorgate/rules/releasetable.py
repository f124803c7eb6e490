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

__all__ = ["ACTIONS", "COMPARING", "DEFAULT_ACTIONS", "NEW_CAPABILITY", "NEW_DEPENDENCY_OUTSIDE",
           "NEW_DEPENDENCY_YOUNG", "NEW_INSTALL_SCRIPT", "OBFUSCATED_CODE", "RELEASE_SIGNALS",
           "TYPOSQUAT", "UNREADABLE_RELEASE", "YOUNG_PACKAGE_CAPABILITY",
           "YOUNG_PACKAGE_INSTALL_SCRIPT", "Action", "ReleaseRules"]

NEW_INSTALL_SCRIPT = "new-install-script"
NEW_DEPENDENCY_YOUNG = "new-dependency-young"
OBFUSCATED_CODE = "obfuscated-code"
TYPOSQUAT = "typosquat"
NEW_DEPENDENCY_OUTSIDE = "new-dependency-outside"
UNREADABLE_RELEASE = "unreadable-release"
YOUNG_PACKAGE_INSTALL_SCRIPT = "young-package-install-script"
NEW_CAPABILITY = "new-capability"
YOUNG_PACKAGE_CAPABILITY = "young-package-capability"
RELEASE_SIGNALS: tuple[str, ...] = (NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY, NEW_INSTALL_SCRIPT,
                                    NEW_DEPENDENCY_YOUNG, OBFUSCATED_CODE, TYPOSQUAT,
                                    NEW_DEPENDENCY_OUTSIDE, UNREADABLE_RELEASE,
                                    YOUNG_PACKAGE_INSTALL_SCRIPT)
"""In the order they are reported; the rules file's keys are these with `_` for `-`."""
COMPARING: tuple[str, ...] = (NEW_CAPABILITY, NEW_INSTALL_SCRIPT, NEW_DEPENDENCY_YOUNG,
                              OBFUSCATED_CODE, NEW_DEPENDENCY_OUTSIDE)
"""The signals that read the previous version (the others read this one alone;
`unreadable-release` refuses what the ones on could not read, and reads nothing itself)."""
DEFAULT_ACTIONS: Mapping[str, str] = {
    # fetched outside the gate, or not readable whole: time makes neither any more checked,
    # so a quarantine that ends by itself would admit it unread; `release.allow` releases one
    NEW_DEPENDENCY_OUTSIDE: "deny", UNREADABLE_RELEASE: "deny",
}
"""A signal's action when the `[release]` table does not name it (the rest: `quarantine`)."""
Action = Literal["deny", "quarantine", "report", "off"]
ACTIONS: tuple[str, ...] = ("deny", "quarantine", "report", "off")


@dataclass(frozen=True)
class ReleaseRules:
    """The `[release]` table: each signal's action, how young a name is suspicious, how long
    a quarantine lasts, the allow list, and what a version whose analysis cannot finish gets."""

    actions: Mapping[str, str] = field(
        # with no `[release]` table these read (issue 55): what a release's code can do,
        # gained over the release before it or, where nothing vouches for it (a first
        # release, a young package, one whose times establish no age), alone; they subsume
        # `young-package-install-script` (a script that can do nothing of that passes, one
        # fetched from outside the registry is unread code and held). And what they cannot
        # read as npm would is refused, never served on the strength of the registry's
        # manifest alone (issue 53: a package.json over 1 MiB npm unpacks)
        default_factory=lambda: {NEW_CAPABILITY: "quarantine",
                                 YOUNG_PACKAGE_CAPABILITY: "quarantine",
                                 UNREADABLE_RELEASE: "deny"})
    young: timedelta = timedelta(days=30)
    young_text: str = "30 days"
    young_package: timedelta = timedelta(days=30)
    young_package_text: str = "30 days"
    """How young a PACKAGE (its first publish, not this version's) is for
    `young-package-install-script` and `young-package-capability`."""
    quarantine: timedelta = timedelta(days=7)
    quarantine_text: str = "7 days"
    allow: PatternList = field(default_factory=PatternList)
    unavailable: str = "admit"
    """`admit` (logged and counted as `unchecked`) or `deny` (until the analysis can run)."""

    def action(self, signal: str) -> str:
        return self.actions.get(signal, "off")

    @property
    def reading(self) -> tuple[str, ...]:
        """The signals on that read a release (`unreadable-release` rides on them)."""
        return tuple(signal for signal in RELEASE_SIGNALS
                     if signal != UNREADABLE_RELEASE and self.action(signal) != "off")

    @property
    def on(self) -> bool:
        return bool(self.reading)

    @property
    def compares(self) -> bool:
        """Whether a signal that reads the previous version is on (else it is not fetched)."""
        return any(self.action(signal) != "off" for signal in COMPARING)

    def signals_in_force(self, previous_max_bytes: int) -> frozenset[str]:
        """The signals in force as a verdict's record keeps them: each signal on, with the
        settings that change what it finds (`young` for a dependency's or a name's age,
        `young_package` for the package's, the byte bound a baseline is read to). Not the
        rules generation, which every reload moves (a waiver, an `[age]` edit) and each
        process counts for itself; nor what is done with a finding (an action, the allow list,
        a quarantine's length, report mode, exceptions), which is applied to the evidence at
        each use. A verdict read under a set holding all of these answers for them; one read
        under fewer or other signals cannot say what the others would find."""
        # the capability reading's bound on the code it parses (`npm.jsuses`,
        # PARSED_PER_TARBALL) is the code's, not a setting: nothing of it is kept here
        settings = {NEW_DEPENDENCY_YOUNG: f"young={_seconds(self.young)}",
                    TYPOSQUAT: f"young={_seconds(self.young)}",
                    YOUNG_PACKAGE_INSTALL_SCRIPT: f"young={_seconds(self.young_package)}",
                    YOUNG_PACKAGE_CAPABILITY: f"young={_seconds(self.young_package)}",
                    UNREADABLE_RELEASE: f"previous-max-bytes={previous_max_bytes}"}
        return frozenset(f"{signal}:{settings[signal]}" if signal in settings else signal
                         for signal in RELEASE_SIGNALS if self.action(signal) != "off")

    @property
    def lean(self) -> bool:
        """Whether the bytes are read for the capability signals alone: no signal that reads
        every mark of obfuscation or the digest of a file is on (`npm.contents`, lean)."""
        return all(self.action(signal) == "off"
                   for signal in (NEW_INSTALL_SCRIPT, OBFUSCATED_CODE))

    @property
    def compares_early(self) -> bool:
        """Whether a baseline is chosen as soon as a first pull starts: a signal that compares
        is on besides `new-capability`, which asks for one only once the bytes show a
        capability that could be gained (most releases show none: no baseline, no history
        read for them)."""
        return any(self.action(signal) != "off" for signal in COMPARING
                   if signal != NEW_CAPABILITY)

    @property
    def only_young_package(self) -> bool:
        """Whether the one signal on that reads is `young-package-install-script`: then only
        a young package's releases are read at all (the default, at no cost to the rest)."""
        return self.reading == (YOUNG_PACKAGE_INSTALL_SCRIPT,)


def _seconds(span: timedelta) -> str:
    return f"{int(span.total_seconds())}s"
