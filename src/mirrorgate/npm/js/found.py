"""What the capability reading (`npm.jsuses`) reports: each capability by name with the words
the evidence says it in, one `Use` of one (its line and the call) and a file's `Uses`. Apart
so each part of the reading, and what judges it (`npm.capabilities`, `rules.capabilities`),
names them from one place."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CAPABILITIES", "CODE_REMOVED", "CREDENTIALS", "DECODED", "DYNAMIC", "ENDLESS",
           "ENVIRONMENT", "HOME", "INTERCEPTS", "NATIVE", "NETWORK", "OBFUSCATED", "PROCESS",
           "UNREAD", "WRITES", "WRITES_HOME", "Destination", "Use", "Uses"]

NETWORK = "network"
PROCESS = "processes"
ENVIRONMENT = "environment"
HOME = "home-directory"
CREDENTIALS = "credentials-files"
WRITES = "writes-outside"
WRITES_HOME = "writes-home"
DYNAMIC = "dynamic-code"
DECODED = "decoded-code"
NATIVE = "native-code"
INTERCEPTS = "intercepts-globals"
OBFUSCATED = "obfuscated"
UNREAD = "unread"
# sabotage: what a maintainer's own release does to its users, gaining nothing an attacker
# wants (colors 1.4.44-liberty-2's loop, faker 6.6.6's emptied package)
ENDLESS = "endless-loop"
CODE_REMOVED = "code-removed"
CAPABILITIES: dict[str, str] = {
    NETWORK: "reaches the network",
    PROCESS: "runs processes",
    ENVIRONMENT: "reads the environment whole",
    HOME: "reaches the home directory",
    CREDENTIALS: "names credentials files (npm, ssh, cloud, browser or wallet stores)",
    WRITES: "writes outside the package",
    WRITES_HOME: "writes into the home directory, or where it hides the path",
    DYNAMIC: "runs code made at run time",
    DECODED: "runs code decoded or decrypted at run time",
    NATIVE: "runs native code",
    INTERCEPTS: "intercepts globals (fetch, XMLHttpRequest, window.ethereum)",
    OBFUSCATED: "hides what it does (obfuscated code)",
    UNREAD: "could not be read whole",
    ENDLESS: "never finishes loading (a loop at module scope with no way out)",
    CODE_REMOVED: "its code that runs at load is gone (the entry is missing or empty)",
}
"""Each capability and the words the evidence says it with."""


@dataclass(frozen=True, slots=True)
class Use:
    """One capability used: which, the line, and the code that uses it."""

    capability: str
    line: int
    call: str


@dataclass(frozen=True, slots=True)
class Destination:
    """A network call whose destination the code writes (`npm.js.destinations`): the host,
    the line, the call, and whether its arguments encode or read what they send."""

    host: str
    line: int
    call: str
    sends: bool = False


@dataclass(frozen=True, slots=True)
class Uses:
    """What a file's code can do: its `found` uses, the bare modules it requires (a bundled
    dependency's name among them), why it was not read whole (None: it was), and the files
    it requires by a relative path."""

    found: tuple[Use, ...] = ()
    modules: tuple[str, ...] = ()
    unread: str | None = None
    requires: tuple[str, ...] = ()
    """The relative specifiers it requires or imports (`./lib/x`, `../y.dat`), as
    `npm.entrypoints.requires_of` finds them, from the same places: what the capability
    signals alone follow (`npm.contents`, lean)."""
    destinations: tuple[Destination, ...] = ()
    """Its network calls to a host written in the code (`npm.js.destinations`)."""
    hosts: tuple[str, ...] = ()
    """Every host it names, anywhere in its text: what a successor's destinations are
    compared with."""
    blank: bool = False
    """Whether it holds no code at all, only comments and whitespace (faker 6.6.6's
    `// endgame`): an entry that loads nothing (`npm.capabilities`, `code-removed`)."""

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(use.capability for use in self.found)
