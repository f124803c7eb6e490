"""Typed reads of one environment's variables, collecting every problem instead of raising.

An unset or blank variable reads as its default in the table (`variables`); a bad value is
a sentence naming the variable, what is wrong and an example, and reads as the default, so
the loader goes on and reports every problem at once (`ConfigError`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from mirrorgate.config.parts import Network
from mirrorgate.config.secrets import Secret
from mirrorgate.config.variables import BY_NAME


class Reader:
    """Reads variables from one environment, collecting problems instead of raising."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return BY_NAME[name].default
        return value.strip()

    def problem(self, name: str, text: str) -> None:
        self.problems.append(f"{name}: {text}")

    def integer(self, name: str, low: int, high: int | None, example: str) -> int:
        text = self.raw(name) or "0"
        try:
            value = int(text)
        except ValueError:
            self.problem(name, f"{text!r} is not a whole number; set it like {name}={example}")
            return int(BY_NAME[name].default or 0)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            self.problem(name, f"{value} is out of range; it must be {bound}, "
                         f"e.g. {name}={example}")
            return int(BY_NAME[name].default or 0)
        return value

    def seconds(self, name: str, low: float, example: str) -> float:
        text = self.raw(name) or "0"
        try:
            value = float(text)
        except ValueError:
            self.problem(name, f"{text!r} is not a number of seconds; e.g. {name}={example}")
            return float(BY_NAME[name].default or 0)
        if not value >= low or value == float("inf"):
            self.problem(name, f"{text} must be a finite number of seconds >= {low}; "
                         f"e.g. {name}={example}")
            return float(BY_NAME[name].default or 0)
        return value

    def address(self, name: str) -> tuple[str, int]:
        text = self.raw(name) or ""
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            self.problem(name, f"{text!r} is not host:port; e.g. {name}=0.0.0.0:8080")
            default = BY_NAME[name].default or "127.0.0.1:0"
            host, _, port = default.rpartition(":")
        return host, int(port)

    def url(self, name: str, value: str | None, schemes: tuple[str, ...]) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in schemes or (parts.scheme != "file" and not parts.hostname):
            allowed = " or ".join(f"{s}://" for s in schemes)
            self.problem(name, f"{value!r} is not a {allowed} URL; e.g. "
                         f"{name}=https://registry.example.com/")
            return None
        if parts.username or parts.password:
            self.problem(name, "credentials in the URL are refused (they would end up in logs); "
                         "use MIRRORGATE_PRIVATE_TOKEN or MIRRORGATE_PRIVATE_TOKEN_FILE")
            return None
        if parts.scheme == "file":
            return "file://" + parts.path.rstrip("/")
        return value if value.endswith("/") else value + "/"

    def flag(self, name: str) -> bool:
        value = (self.raw(name) or "false").lower()
        if value not in ("true", "false"):
            self.problem(name, f"{value!r} is not true or false; e.g. {name}=true")
        return value == "true"

    def networks(self, name: str) -> tuple[Network, ...]:
        found: list[Network] = []
        for item in (self.raw(name) or "").replace(",", " ").split():
            try:
                found.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self.problem(name, f"{item!r} is not an IP address or CIDR; e.g. "
                             f"{name}=10.0.0.0/8,192.0.2.7")
        return tuple(found)

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        value = (self.raw(name) or "").lower()
        if value not in allowed:
            self.problem(name, f"{value!r} is not one of {', '.join(allowed)}; "
                         f"e.g. {name}={allowed[0]}")
            return BY_NAME[name].default or allowed[0]
        return value

    def secret(self, name: str, what: str) -> Secret | None:
        """`name` or `name`_FILE (not both), as a Secret; None when neither is set."""
        value = self.raw(name)
        path = self.raw(f"{name}_FILE")
        if value and path:
            self.problem(f"{name}_FILE", f"set either {name} or {name}_FILE, not both")
        if path:
            try:
                value = Path(path).read_text(encoding="utf-8").strip()
            except OSError as error:
                self.problem(f"{name}_FILE", f"cannot read {path}: {error.strerror}; point it at "
                             f"a readable file holding the {what}")
                return None
            if not value:
                self.problem(f"{name}_FILE", f"{path} is empty")
                return None
        if value and any(ord(c) < 33 or ord(c) == 127 for c in value):
            self.problem(name, f"the {what} holds whitespace or control characters; set the bare "
                         f"{what}")
            return None
        return Secret(value) if value else None
