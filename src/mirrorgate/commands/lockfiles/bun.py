"""bun's text lockfile, `bun.lock` (bun 1.2 and later; lockfile versions 0 to 2).

It is JSON with trailing commas. Each `packages` entry is one line, `"key": [descriptor, ...]`:
the key is where it is installed (`ms`, `send/ms` for a nested copy, `zed` for an alias) and
the descriptor what it is (`zeta@1.0.1`, `git-thing@git+<repository URL>`, `local-thing@file:...`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from mirrorgate.commands.lockfiles.entries import Lockfile, LockfileError
from mirrorgate.commands.lockfiles.specs import (
    Collector,
    non_registry,
    split_alias,
    split_descriptor,
)
from mirrorgate.npm.versions import parse_version

__all__ = ["read"]

VERSIONS = (0, 1, 2)
"""The `lockfileVersion`s read (bun 1.2 wrote 0 and 1, bun 1.3 writes 1 and 2; the entry
shape has not changed between them)."""
_FIELDS = ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies")
# a `packages` entry's first line: `    "key": [` (bun writes each entry on one line)
_ENTRY = re.compile(r'^\s*("(?:[^"\\]|\\.)*")\s*:\s*\[')


def read(path: Path, text: str) -> Lockfile:
    """Registry versions are the `packages` entries whose descriptor names a semver version
    (the real name: an alias's key is its installed name); git, file, link and workspace
    entries are skipped. The ranges are those the workspaces and the packages' own
    `dependencies` ask for each name with; the integrity and tarball URL are the entry's."""
    document = _load(path, text)
    version = document.get("lockfileVersion")
    if version not in VERSIONS:
        raise LockfileError(path, _line_of(text, '"lockfileVersion"'),
                            f"has lockfileVersion {version!r}; mirrorgate reads bun's "
                            f"{', '.join(map(str, VERSIONS))}")
    packages = document.get("packages")
    workspaces = document.get("workspaces")
    if not isinstance(packages, dict) or not isinstance(workspaces, dict):
        raise LockfileError(path, 0, "has no `packages` or no `workspaces` object")
    collector = Collector(path, "bun")
    wanted: dict[str, list[str]] = defaultdict(list)
    for workspace in workspaces.values():
        _ask(wanted, workspace)
    for entry in packages.values():
        if isinstance(entry, list) and len(entry) > 2 and isinstance(entry[2], dict):
            _ask(wanted, entry[2])
    lines = _entry_lines(text)
    for key, entry in packages.items():
        line = lines.get(key, 0)
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
            raise LockfileError(path, line, f"package {key!r} has no descriptor")
        name, pinned = split_descriptor(entry[0])
        reason = non_registry(pinned) or (None if parse_version(pinned) is not None
                                          else "not a registry version")
        if reason is not None:
            collector.skip(name, pinned, reason, line, key)
            continue
        installed = _installed_name(key)
        resolved = entry[1] if len(entry) > 1 and isinstance(entry[1], str) else None
        integrity = entry[3] if len(entry) > 3 and isinstance(entry[3], str) else None
        collector.lock(name, pinned, line, key, ranges=wanted.get(name, []),
                       alias=installed if installed != name else None,
                       integrity=integrity or None, resolved=resolved or None)
    return collector.result()


def _load(path: Path, text: str) -> dict[str, Any]:
    try:
        document = json.loads(_without_trailing_commas(text))
    except json.JSONDecodeError as error:
        raise LockfileError(path, error.lineno, f"is not bun's lockfile JSON: {error.msg}"
                            ) from None
    if not isinstance(document, dict):
        raise LockfileError(path, 1, "is not a JSON object")
    return document


def _without_trailing_commas(text: str) -> str:
    """`text` with each comma that only precedes a `}` or `]` blanked (outside strings), so
    the standard JSON parser reads it and its line numbers stay the file's."""
    out = list(text)
    in_string = escaped = False
    last_comma = -1
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string, last_comma = True, -1
        elif char == ",":
            last_comma = index
        elif char in "}]":
            if last_comma >= 0:
                out[last_comma] = " "
            last_comma = -1
        elif not char.isspace():
            last_comma = -1
    return "".join(out)


def _ask(wanted: dict[str, list[str]], holder: Any) -> None:
    """Add the ranges a workspace or a package's metadata asks for (an `npm:` alias under its
    real name)."""
    if not isinstance(holder, dict):
        return
    for field in _FIELDS:
        dependencies = holder.get(field)
        if not isinstance(dependencies, dict):
            continue
        for name, spec in dependencies.items():
            if not isinstance(spec, str):
                continue
            alias = split_alias(spec)
            real, wanted_range = alias if alias is not None else (name, spec)
            wanted[real].append(wanted_range)


def _installed_name(key: str) -> str:
    """The name a key is installed under: its last segment (two for a scoped name)."""
    parts = key.split("/")
    if len(parts) >= 2 and parts[-2].startswith("@"):
        return "/".join(parts[-2:])
    return parts[-1]


def _entry_lines(text: str) -> dict[str, int]:
    """Key -> the line its `packages` entry starts on (bun writes each entry on one line)."""
    lines: dict[str, int] = {}
    in_packages = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not in_packages:
            in_packages = line.strip().startswith('"packages"')
            continue
        match = _ENTRY.match(line)
        if match is not None:
            lines.setdefault(json.loads(match.group(1)), number)
    return lines


def _line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return 0
