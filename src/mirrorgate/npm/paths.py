"""What an `/npm/...` request path asks for: a packument, a version, a tarball, ping, whoami,
or the public registry's signing keys (`-/npm/v1/keys`, for `npm audit signatures`).

The path is read from `request.raw_path` (never the router's decoded copy), split on `/`, and
the name handed to `parse_name`, which refuses `..`, `%2e%2e`, `%2f` in an unscoped name,
backslashes and control characters. Decisions:

- Scoped names come in three spellings: `@s%2fn` and `@s%2Fn` (one segment), and `@s/n` (two
  segments); all parse to the same `PackageName`.
- After the name: nothing (packument), one segment (a version or dist-tag), or `-/<file>` (a
  tarball). The extra segment is percent-decoded strictly and may hold no slash, backslash,
  percent sign, space or control character, and at most 256 characters: it is only ever a
  dictionary key or a file name checked against the package (`version_from_filename`).
- npm audit's two endpoints (`-/npm/v1/security/advisories/bulk`, `.../audits/quick`) are the
  `audit` and `audit-quick` routes, the only ones that take a POST.
- Two more of npm's `-/` endpoints are answered: `-/package/<name>/dist-tags` (`npm dist-tag
  ls`) and `-/v1/search` (`npm search`). Anything else under `/npm/` is the `unknown` route: a
  JSON 404. `looks_like_registry_path` tells a path that an npm client would send (so a
  request to it outside `/npm/` is a client pointed at the wrong URL) from any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name

__all__ = ["POST_ROUTES", "RegistryPath", "Route", "looks_like_registry_path",
           "parse_registry_path"]

Route = Literal["packument", "version", "tarball", "ping", "whoami", "audit", "audit-quick",
                "dist-tags", "search", "keys", "unknown"]
"""The fixed route labels, also the `route` label of the request metric."""

SEGMENT_LIMIT = 256
POST_ROUTES: frozenset[str] = frozenset({"audit", "audit-quick"})
"""The routes that take a POST (and only a POST)."""


@dataclass(frozen=True, slots=True)
class RegistryPath:
    """What a path asks for: the route, the package, and the version, tag or file name."""

    route: Route
    name: PackageName | None = None
    detail: str = ""


def _decode_segment(segment: str, what: str) -> str:
    try:
        decoded = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise InvalidNameError(f"the {what} is not valid UTF-8 once decoded") from None
    if not decoded or len(decoded) > SEGMENT_LIMIT:
        raise InvalidNameError(f"the {what} is empty or longer than {SEGMENT_LIMIT} "
                               "characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c in "/\\%" for c in decoded):
        raise InvalidNameError(f"the {what} holds a slash, a backslash, a percent sign, a "
                               "space or a control character")
    return decoded


def parse_registry_path(rest: str) -> RegistryPath:
    """The target of an `/npm/` path given without the prefix and the query string; raises
    InvalidNameError with the reason when the name or a segment is refused."""
    if rest == "-/ping":
        return RegistryPath("ping")
    if rest == "-/whoami":
        return RegistryPath("whoami")
    if rest == "-/npm/v1/security/advisories/bulk":
        return RegistryPath("audit")
    if rest == "-/npm/v1/security/audits/quick":
        return RegistryPath("audit-quick")
    if rest == "-/v1/search":
        return RegistryPath("search")
    if rest.startswith("-/package/") and rest.endswith("/dist-tags"):
        return RegistryPath("dist-tags", parse_name(rest[len("-/package/"):-len("/dist-tags")]))
    if rest == "-/npm/v1/keys":
        return RegistryPath("keys")
    if not rest or rest.startswith("-/"):
        return RegistryPath("unknown")
    segments = rest.split("/")
    first = segments[0]
    if first.startswith("@") and "%2f" not in first.lower():
        if len(segments) < 2:
            raise InvalidNameError("a scoped name needs a package after the scope: @scope/name")
        raw_name, remainder = f"{first}/{segments[1]}", segments[2:]
    else:
        raw_name, remainder = first, segments[1:]
    name = parse_name(raw_name)
    if not remainder:
        return RegistryPath("packument", name)
    if len(remainder) == 1:
        return RegistryPath("version", name, _decode_segment(remainder[0], "version or tag"))
    if len(remainder) == 2 and remainder[0] == "-":
        return RegistryPath("tarball", name, _decode_segment(remainder[1], "tarball filename"))
    return RegistryPath("unknown")


WEB_FILES = (".ico", ".html", ".htm", ".php", ".txt", ".xml", ".png", ".css", ".env")
"""Endings of what browsers and scanners ask a web server for: no npm client sends these."""


def looks_like_registry_path(rest: str) -> bool:
    """Whether a path (without its leading `/`) is one an npm client sends: one of npm's `-/`
    endpoints, or a package, version or tarball path. Used outside `/npm/`, where it means the
    client's registry URL lacks the `/npm/` prefix."""
    if rest.startswith("-/"):
        return True
    if not rest or rest.lower().endswith(WEB_FILES):
        return False
    try:
        return parse_registry_path(rest).route != "unknown"
    except InvalidNameError:
        return False
