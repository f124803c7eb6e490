"""The operators: the clients MIRRORGATE_OPERATORS and MIRRORGATE_WAIVER_GRANTERS name, who
read every client's pulls on the status page (`serve.ui.readers`); the granters among them
also grant and revoke waivers there (`serve.ui.waivers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirrorgate.access.tokens import Client

__all__ = ["Operators"]


@dataclass(frozen=True, slots=True)
class Operators:
    """The operators' names; a waiver granter is one too."""

    names: frozenset[str] = field(default_factory=frozenset)
    granters: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def named(cls, operators: tuple[str, ...], granters: tuple[str, ...]) -> Operators:
        return cls(frozenset(operators) | frozenset(granters), frozenset(granters))

    def include(self, client: Client) -> bool:
        # a CI job's ID token is never an operator, whatever its issuer line is named: the
        # line admits every job its conditions match
        return client.identity is None and client.name in self.names

    def may_grant(self, client: Client) -> bool:
        """A waiver granter: never a CI job's ID token, for the same reason."""
        return self.include(client) and client.name in self.granters
