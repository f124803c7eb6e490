"""Who reads whose pulls on the status page: which client pulled which version, when and how
often is an operator's view (docs/operations.md, "Status page").

With client tokens on, an operator (a client MIRRORGATE_OPERATORS or MIRRORGATE_WAIVER_GRANTERS
names, signed in with its own token) reads every client's pulls; any other client reads its
own. With tokens off the proxy is open to whoever reaches it, and so is the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from mirrorgate.access.operators import Operators
from mirrorgate.access.tokens import Client

__all__ = ["PullReaders"]


def _nobody(_request: web.Request) -> Client | None:
    return None


@dataclass(frozen=True)
class PullReaders:
    tokens_on: bool = False
    operators: Operators = field(default_factory=Operators)
    client_of: Callable[[web.Request], Client | None] = field(default=_nobody)
    """The client the request signed in as (`access`)."""

    def only(self, request: web.Request) -> str | None:
        """The one client whose pulls `request` may read (as the pull log names it), or None
        for every client's."""
        if not self.tokens_on:
            return None
        client = self.client_of(request)
        if client is None:  # `access` lets no request here without one: none is nobody's
            return ""
        if self.operators.include(client):
            return None
        return client.who
