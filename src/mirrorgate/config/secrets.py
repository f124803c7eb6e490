"""Values that must never be printed: a token, a key, a webhook's URL, a database's URL.

Each setting that holds a credential holds it as one of these, so a settings object (or a
slice of one) can be logged, printed or compared without leaking it.
"""

from __future__ import annotations

from urllib.parse import urlsplit


class Secret:
    """A value that must never be printed; its repr and str say so instead, so a settings
    object can be logged or printed without leaking a token or key."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**redacted**')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretUrl(Secret):
    """A URL whose path is a credential (an incoming webhook's): shown as its origin only."""

    __slots__ = ()

    def shown(self) -> str:
        parts = urlsplit(self.reveal())
        port = f":{parts.port}" if parts.port is not None else ""
        return f"{parts.scheme}://{parts.hostname}{port}/**redacted**"


class PasswordUrl(Secret):
    """A URL whose password is the secret (a database's): shown with the password replaced."""

    __slots__ = ()

    def shown(self) -> str:
        scheme, sep, rest = self.reveal().partition("://")
        userinfo, at, host = rest.rpartition("@")
        if not at or ":" not in userinfo:
            return self.reveal()
        return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:**redacted**@{host}"
