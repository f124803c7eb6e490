"""What an `/npm/...` request path asks for: a packument, a version, a tarball, or one of npm's
`-/` endpoints (ping, whoami, audit, search, dist-tags, keys).

The path is read from `request.raw_path` (never the router's decoded copy) and its name goes
through `parse_name`, so no `..`, `%2e%2e` or smuggled slash reaches a URL or a file path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name

__all__ = ["POST_ROUTES", "RegistryPath", "Route", "WriteTarget", "looks_like_registry_path",
           "parse_registry_path", "parse_write_target"]

Route = Literal["packument", "version", "tarball", "ping", "whoami", "audit", "audit-quick",
                "dist-tags", "search", "keys", "unknown", "write"]
"""The fixed route labels, also the `route` label of the request metric (`write`: every PUT and
DELETE, which `parse_write_target` reads)."""

# The segment after the name (version, dist-tag or tarball file) is only ever a dictionary key
# or a file name checked against the package (`version_from_filename`): strictly decoded, no
# slash, backslash, percent sign, space or control character, at most SEGMENT_LIMIT characters.
SEGMENT_LIMIT = 256
POST_ROUTES: frozenset[str] = frozenset({"audit", "audit-quick"})
"""The routes that take a POST (and only a POST): npm audit's two endpoints."""


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
    if decoded in (".", ".."):
        # an HTTP client resolves a dot segment before it sends the path on: `dist-tags/..`
        # would reach `-/package/<name>/` on the private registry, another resource
        raise InvalidNameError(f"the {what} {decoded!r} is a dot segment, not a {what}")
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
    # The public registry's signing keys, for `npm audit signatures`.
    if rest == "-/npm/v1/keys":
        return RegistryPath("keys")
    # Any other `-/` endpoint is the `unknown` route: a JSON 404.
    if not rest or rest.startswith("-/"):
        return RegistryPath("unknown")
    segments = rest.split("/")
    first = segments[0]
    # Scoped names come as `@s%2fn` or `@s%2Fn` (one segment) or `@s/n` (two); all parse alike.
    if first.startswith("@") and "%2f" not in first.lower():
        if len(segments) < 2:
            raise InvalidNameError("a scoped name needs a package after the scope: @scope/name")
        raw_name, remainder = f"{first}/{segments[1]}", segments[2:]
    else:
        raw_name, remainder = first, segments[1:]
    name = parse_name(raw_name)
    # After the name: nothing (packument), one segment (version or dist-tag), or `-/<file>`.
    if not remainder:
        return RegistryPath("packument", name)
    if len(remainder) == 1:
        return RegistryPath("version", name, _decode_segment(remainder[0], "version or tag"))
    if len(remainder) == 2 and remainder[0] == "-":
        return RegistryPath("tarball", name, _decode_segment(remainder[1], "tarball filename"))
    return RegistryPath("unknown")


WriteRoute = Literal["publish", "change", "unpublish", "remove-tarball", "dist-tag"]
"""The writes npm sends (`publishing`): PUT `name` (publish, or npm deprecate's change), PUT
`name/-rev/R` (a change), DELETE `name/-rev/R` (unpublish all), DELETE `name/-/file/-rev/R` (a
version's tarball, after its change), PUT or DELETE `-/package/name/dist-tags/tag`."""


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """What a write path names: the route, the package, and the revision, file or tag."""

    route: WriteRoute
    name: PackageName
    detail: str = ""
    revision: str = ""


def parse_write_target(rest: str, method: str) -> WriteTarget | None:
    """The write a PUT or DELETE path asks for, or None when it names none; raises
    InvalidNameError when the name or a segment is refused."""
    if rest.startswith("-/package/"):
        name_part, found, tag = rest[len("-/package/"):].rpartition("/dist-tags/")
        if not found:
            return None
        return WriteTarget("dist-tag", parse_name(name_part), _decode_segment(tag, "dist-tag"))
    if rest.startswith("-/"):
        return None
    target = parse_registry_path(rest)
    if target.route == "packument" and target.name is not None and method == "PUT":
        return WriteTarget("publish", target.name)
    segments = rest.split("/")
    if len(segments) < 3 or segments[-2] != "-rev":
        return None
    revision = _decode_segment(segments[-1], "revision")
    inner = parse_registry_path("/".join(segments[:-2]))
    if inner.name is None:
        return None
    if inner.route == "packument":
        return WriteTarget("change" if method == "PUT" else "unpublish", inner.name,
                           revision=revision)
    if inner.route == "tarball" and method == "DELETE":
        return WriteTarget("remove-tarball", inner.name, inner.detail, revision)
    return None


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
