"""Reading dependency specs as every lockfile writes them: which ones come from a registry,
`npm:` aliases, `name@range` descriptors, and the collector that turns a reader's findings
into one `LockedEntry` per name and version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from mirrorgate.commands.lockfiles.entries import LockedEntry, Lockfile, SkippedEntry
from mirrorgate.npm.versions import parse_range, parse_version

__all__ = ["Collector", "matching_ranges", "non_registry", "split_alias", "split_descriptor"]

# Prefixes of specs that pin something other than a registry version, with the note shown
_ELSEWHERE = (
    ("file:", "a local file or folder"),
    ("link:", "a linked folder"),
    ("portal:", "a linked folder"),
    ("workspace:", "a workspace package"),
    ("git+", "a git repository"),
    ("git:", "a git repository"),
    ("github:", "a git repository"),
    ("gitlab:", "a git repository"),
    ("bitbucket:", "a git repository"),
    ("gist:", "a git repository"),
    ("http:", "a tarball URL"),
    ("https:", "a tarball URL"),
    ("exec:", "a generated package"),
)
# `user/repo` or `user/repo#ref`: npm's and yarn's GitHub shorthand (a scoped name starts with @)
_GITHUB_SHORTHAND = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(#.*)?$")


def non_registry(spec: str) -> str | None:
    """Why `spec` (a range, version or URL as a lockfile writes it) does not pin a registry
    version, or None when it does."""
    lowered = spec.strip().lower()
    for prefix, reason in _ELSEWHERE:
        if lowered.startswith(prefix):
            return reason
    if lowered.startswith(("/", "./", "../", "~/")):
        return "a local file or folder"
    if _GITHUB_SHORTHAND.match(spec.strip()):
        return "a git repository"
    return None


def split_descriptor(text: str) -> tuple[str, str]:
    """`name@range` as (name, range); the `@` of a scope is not the separator."""
    at = text.find("@", 1)
    if at < 0:
        return text, ""
    return text[:at], text[at + 1:]


def split_alias(spec: str) -> tuple[str, str] | None:
    """`npm:real@range` (an aliased dependency) as (real name, range); None for other specs.
    `npm:real` alone asks for any version."""
    if not spec.startswith("npm:"):
        return None
    name, wanted = split_descriptor(spec[len("npm:"):])
    return name, wanted or "*"


def matching_ranges(version: str, ranges: Iterable[str]) -> tuple[str, ...]:
    """The ranges in `ranges` that `version` satisfies, deduplicated in order: where one name is
    asked for with several ranges, each locked version keeps the ones that led to it. A range
    that does not parse (a dist-tag such as `latest`) is kept as written."""
    parsed = parse_version(version)
    kept: list[str] = []
    for text in ranges:
        if text in kept:
            continue
        try:
            compiled = parse_range(text)
        except ValueError:
            kept.append(text)
            continue
        if parsed is not None and compiled.includes(parsed):
            kept.append(text)
    return tuple(kept)


class Collector:
    """Accumulates a reader's entries: one `LockedEntry` per (name, version), its ranges
    merged, keeping the first place it was seen; skipped entries in order."""

    def __init__(self, path: Path, kind: str) -> None:
        self.lockfile = Lockfile(path, kind)
        self._seen: dict[tuple[str, str], int] = {}

    def lock(self, name: str, version: str, line: int, key: str, *,
             ranges: Iterable[str] = (), alias: str | None = None,
             integrity: str | None = None, resolved: str | None = None) -> None:
        found = self._seen.get((name, version))
        if found is not None:
            first = self.lockfile.entries[found]
            merged = matching_ranges(version, (*first.ranges, *ranges))
            if merged != first.ranges:
                self.lockfile.entries[found] = LockedEntry(
                    first.name, first.version, first.lockfile, first.line, first.key, merged,
                    first.alias, first.integrity or integrity, first.resolved or resolved)
            return
        self._seen[(name, version)] = len(self.lockfile.entries)
        self.lockfile.entries.append(LockedEntry(
            name, version, self.lockfile.path, line, key, matching_ranges(version, ranges),
            alias, integrity, resolved))

    def skip(self, name: str, source: str, reason: str, line: int, key: str) -> None:
        self.lockfile.skipped.append(
            SkippedEntry(name, source, reason, self.lockfile.path, line, key))

    def result(self) -> Lockfile:
        return self.lockfile
