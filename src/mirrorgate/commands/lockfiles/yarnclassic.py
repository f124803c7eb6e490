"""The syntax of yarn 1's `yarn.lock` (not YAML), written here because the one maintained Python
parser (pyarn) is GPL-licensed, untyped and reports no line numbers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mirrorgate.commands.lockfiles.entries import LockfileError

__all__ = ["Block", "parse"]


@dataclass(slots=True)
class Block:
    """One top-level entry: its descriptors (`name@range`), its line, its `key value` fields
    and its nested maps (`dependencies`...)."""

    descriptors: list[str]
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    nested: dict[str, dict[str, str]] = field(default_factory=dict)


def _tokens(text: str, path: Path, line: int) -> list[str]:
    """The strings on a line, and the separators `,` and `:` as `"\\0,"` and `"\\0:"` (a NUL
    never occurs in a lockfile's text, so a separator cannot be mistaken for a string)."""
    found: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char == " ":
            at += 1
        elif char == "#":
            break
        elif char in ",:":
            found.append("\0" + char)
            at += 1
        elif char == '"':
            end = at + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise LockfileError(path, line, "has a quoted string that is not closed")
            try:
                found.append(json.loads(text[at:end + 1]))
            except json.JSONDecodeError:
                raise LockfileError(path, line, "has a quoted string with a bad escape"
                                    ) from None
            at = end + 1
        else:
            end = at
            while end < len(text) and text[end] not in ' ,:"':
                end += 1
            found.append(text[at:end])
            at = end
    return found


def _is_sep(token: str, char: str) -> bool:
    return token == "\0" + char


def _header(tokens: list[str], path: Path, line: int) -> list[str]:
    """`a@1, "b@2":` as its keys."""
    if len(tokens) < 2 or not _is_sep(tokens[-1], ":"):
        raise LockfileError(path, line, "expected an entry header such as `name@range:`")
    keys: list[str] = []
    for index, token in enumerate(tokens[:-1]):
        if index % 2 == 1:
            if not _is_sep(token, ","):
                raise LockfileError(path, line, "expected `,` between an entry's keys")
        elif token.startswith("\0"):
            raise LockfileError(path, line, "expected a key such as `name@range`")
        else:
            keys.append(token)
    if len(tokens) % 2 != 0:
        raise LockfileError(path, line, "an entry header ends with `,`")
    return keys


def _pair(tokens: list[str], path: Path, line: int) -> tuple[str, str]:
    plain = [t for t in tokens if not _is_sep(t, ":")]
    if len(plain) != 2 or any(t.startswith("\0") for t in plain) or (
            len(tokens) == 3 and not _is_sep(tokens[1], ":")):
        raise LockfileError(path, line, "expected `key value`")
    return plain[0], plain[1]


def parse(path: Path, text: str) -> list[Block]:
    """Blocks headed by `"a@^1", a@~1.2:` with indented `key "value"` pairs and one level of
    nested maps (`dependencies:`), read as yarn's own lexer (`src/lockfile/parse.js`) does:
    strings are quoted with JSON escapes or bare up to a blank, `,` or `:`; indentation is two
    spaces a level; `#` starts a comment. Anything else raises `LockfileError` with the line."""
    blocks: list[Block] = []
    block: Block | None = None
    nested: dict[str, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.rstrip()
        stripped = body.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(body) - len(stripped)
        if stripped.startswith("\t") or indent % 2:
            raise LockfileError(path, number, "is indented by something other than two "
                                "spaces a level")
        tokens = _tokens(stripped, path, number)
        level = indent // 2
        if level == 0:
            block = Block(_header(tokens, path, number), number)
            blocks.append(block)
            nested = None
        elif level == 1 and block is not None:
            if len(tokens) == 2 and _is_sep(tokens[1], ":") and not tokens[0].startswith("\0"):
                nested = block.nested.setdefault(tokens[0], {})
            else:
                key, value = _pair(tokens, path, number)
                block.fields[key] = value
                nested = None
        elif level == 2 and nested is not None:
            key, value = _pair(tokens, path, number)
            nested[key] = value
        else:
            raise LockfileError(path, number, "is indented deeper than the entry it belongs "
                                "to allows")
    return blocks
