"""A package.json's bytes read as npm reads them, so what mirrorgate finds in a tarball's
`package.json` is what npm would run from it.

npm reads the file with `readFile(filename, 'utf8')` and parses it with
json-parse-even-better-errors (`@npmcli/package-json/lib/read-package.js`): Node's lossy UTF-8
decoding (an invalid byte becomes U+FFFD), one byte-order mark stripped, then `JSON.parse`.
orjson refuses all three shapes that npm reads (a BOM, an invalid byte, a lone `\\ud800`).
"""

from __future__ import annotations

import json
from typing import Any

from mirrorgate.errors import MirrorgateError

__all__ = ["PackageJsonError", "parse_package_json"]


class PackageJsonError(MirrorgateError, ValueError):
    """The bytes are not a package.json npm can parse (npm reads nothing from them either),
    or, with `deeper` set, one that npm parses but that nests deeper than Python can follow."""

    def __init__(self, message: str, *, deeper: bool = False) -> None:
        super().__init__(message)
        self.deeper = deeper


def _no_constants(text: str) -> Any:
    # JSON.parse has no NaN or Infinity; Python's json takes them unless told not to
    raise PackageJsonError(f"{text} is not JSON")


def parse_package_json(data: bytes) -> Any:
    """The value npm's parser returns for a package.json of these bytes (any JSON value: the
    callers decide what a non-object means); raises PackageJsonError where npm's parse throws."""
    # Buffer#toString('utf8'): each maximal invalid subsequence becomes one U+FFFD, as
    # Python's "replace" does (the differential test holds the two to the same output)
    text = data.decode("utf-8", "replace")
    # json-parse-even-better-errors: `const BOM = /^\uFEFF/` ... `String(txt).replace(BOM, '')`
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        # JSON.parse: the same grammar as Python's json with NaN/Infinity refused (both take
        # lone surrogate escapes, both let the last of a repeated key win)
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError as error:
        raise PackageJsonError("it nests deeper than mirrorgate reads", deeper=True) from error
    except ValueError as error:  # json.JSONDecodeError and PackageJsonError
        raise PackageJsonError(str(error)[:200]) from error
