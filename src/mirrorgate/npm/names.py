"""npm package names, validated and canonicalised before they touch a URL or a file path.

A name arrives in several spellings (`@scope%2fname`, `@scope%2Fname`, `@scope/name`, any
character percent-encoded); it is decoded once, strictly, and checked against npm's rules, so
`..`, `%2e%2e`, a smuggled `/`, backslashes and control characters never get through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from mirrorgate.errors import MirrorgateError
from mirrorgate.npm.versions import is_version_string

__all__ = [
    "MAX_NAME_LENGTH",
    "InvalidNameError",
    "PackageName",
    "parse_name",
    "tarball_filename",
    "version_from_filename",
]

MAX_NAME_LENGTH = 214
# npm's URL-safe set (letters, digits, `-._~`). Upper case is accepted: npm refuses it only for
# *new* packages, and legacy packages with capitals are installed every day (an unknown one is
# a plain 404).
_PART = re.compile(r"[A-Za-z0-9~-][A-Za-z0-9._~-]*")


class InvalidNameError(MirrorgateError, ValueError):
    """A package name (or a part of a path) that npm would not accept; the text says why."""


@dataclass(frozen=True, slots=True)
class PackageName:
    scope: str | None
    bare: str

    @property
    def full(self) -> str:
        return f"@{self.scope}/{self.bare}" if self.scope else self.bare

    def url_path(self) -> str:
        """The name as one URL path segment: `name` or `@scope%2fname` (one lower-case `%2f`);
        the only way a name is put in a URL."""
        return f"@{self.scope}%2f{self.bare}" if self.scope else self.bare

    def tarball_path(self, filename: str) -> str:
        """The npm-standard tarball path `name/-/file` (scoped: `@scope/name/-/file`)."""
        return f"{self.full}/-/{filename}"

    def __str__(self) -> str:
        return self.full


def _decode(segment: str) -> str:
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in segment):
        raise InvalidNameError("the name holds a space or a control character")
    decoded = unquote(segment, errors="strict")
    if "%" in decoded:
        raise InvalidNameError("the name is percent-encoded twice")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in decoded):
        raise InvalidNameError("the name holds a space or a control character")
    if "\\" in decoded:
        raise InvalidNameError("the name holds a backslash")
    return decoded


def _check_part(part: str, what: str) -> None:
    if not part:
        raise InvalidNameError(f"the {what} is empty")
    if part in {".", ".."} or part.startswith("."):
        raise InvalidNameError(f"the {what} may not start with a dot")
    if part.startswith("_"):
        raise InvalidNameError(f"the {what} may not start with an underscore")
    if not part.isascii() or _PART.fullmatch(part) is None:
        raise InvalidNameError(
            f"the {what} {part!r} holds characters npm does not allow "
            "(letters, digits and -._~ only)")


def parse_name(text: str) -> PackageName:
    """A name from a raw path: `pkg`, `@scope/pkg`, `@scope%2fpkg` (any case of %2f)."""
    try:
        decoded = _decode(text)
    except UnicodeDecodeError:
        raise InvalidNameError("the name is not valid UTF-8 once decoded") from None
    if len(decoded) > MAX_NAME_LENGTH:
        raise InvalidNameError(f"the name is {len(decoded)} characters; npm allows at most "
                               f"{MAX_NAME_LENGTH}")
    if decoded.startswith("@"):
        scope, slash, bare = decoded[1:].partition("/")
        if not slash:
            raise InvalidNameError("a scoped name needs a package after the scope: @scope/name")
        if "/" in bare:
            raise InvalidNameError("a scoped name has exactly one slash: @scope/name")
        _check_part(scope, "scope")
        _check_part(bare, "package name")
        return PackageName(scope, bare)
    if "/" in decoded:
        raise InvalidNameError("an unscoped name cannot hold a slash")
    _check_part(decoded, "package name")
    if decoded.lower() in {"node_modules", "favicon.ico"}:
        raise InvalidNameError(f"{decoded!r} is not a package name")
    return PackageName(None, decoded)


def tarball_filename(name: PackageName, version: str) -> str:
    """`<bare>-<version>.tgz`: the only way a tarball's filename is derived."""
    return f"{name.bare}-{version}.tgz"


def version_from_filename(name: PackageName, filename: str) -> str:
    """The version a tarball filename names, refusing one that is not this package's."""
    prefix = f"{name.bare}-"
    if not filename.startswith(prefix) or not filename.endswith(".tgz"):
        raise InvalidNameError(
            f"{filename!r} is not a tarball of {name.full}; expected {name.bare}-<version>.tgz")
    version = filename[len(prefix):-len(".tgz")]
    if not is_version_string(version):
        raise InvalidNameError(f"{filename!r} does not name a valid version of {name.full}")
    return version
