"""npm's `package-lock.json` and `npm-shrinkwrap.json`, lockfile versions 1 to 3."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mirrorgate.commands.lockfiles.entries import Lockfile, LockfileError
from mirrorgate.commands.lockfiles.specs import Collector, non_registry, split_alias

__all__ = ["read"]

_DEPENDENCY_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies",
                      "devDependencies")


class _Lines:
    """Line numbers for keys of JSON objects (`"key": {`), found by searching forward through
    the text in document order (the stdlib parser keeps no positions); a `"key": "range"` in a
    `requires` block is not an object, so it is never mistaken for the entry."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.cursor = 0

    def of(self, key: str) -> int:
        pattern = re.compile(re.escape(json.dumps(key)) + r"\s*:\s*\{")
        found = pattern.search(self.text, self.cursor) or pattern.search(self.text)
        if found is None:
            return 0
        self.cursor = found.end()
        return self.text.count("\n", 0, found.start()) + 1


def _object(value: Any, path: Path, line: int, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise LockfileError(path, line, f"{what} is not a JSON object")
    return value


def read(path: Path, text: str) -> Lockfile:
    """v2 and v3 list every installed folder under `packages` (`node_modules/a/node_modules/b`);
    v1 only has the nested `dependencies` tree, which v2 also keeps for old clients (`packages`
    is read when present). Ranges come from what each package `requires` by install name; an
    aliased folder names its real package in `name` (v2/v3) or its version reads
    `npm:real@1.2.3` (v1)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise LockfileError(path, error.lineno, f"is not valid JSON: {error.msg} "
                            f"(column {error.colno})") from None
    document = _object(document, path, 1, "the document")
    version = document.get("lockfileVersion", 1)
    if version not in (1, 2, 3):
        raise LockfileError(path, _Lines(text).of("lockfileVersion"),
                            f"has lockfileVersion {version!r}; mirrorgate reads 1, 2 and 3")
    collector = Collector(path, f"npm-v{version}")
    if "packages" in document:
        _read_packages(collector, path, text, document["packages"])
    else:
        _read_tree(collector, path, text, document.get("dependencies", {}))
    return collector.result()


def _wanted(specs: Mapping[str, Any], into: dict[str, list[str]]) -> None:
    for install_name, spec in specs.items():
        if isinstance(spec, str):
            into[install_name].append(spec)


def _ranges(specs: list[str]) -> list[str]:
    return [alias[1] if (alias := split_alias(spec)) else spec for spec in specs]


def _elsewhere(specs: list[str]) -> str | None:
    """The reason every spec asking for a name points outside the registry, else None."""
    reasons = [non_registry(spec) for spec in specs]
    return reasons[0] if reasons and all(reasons) else None


def _read_packages(collector: Collector, path: Path, text: str, packages: Any) -> None:
    lines = _Lines(text)
    packages = _object(packages, path, lines.of("packages"), "`packages`")
    wanted: dict[str, list[str]] = defaultdict(list)
    for package in packages.values():
        if isinstance(package, dict):
            for field in _DEPENDENCY_FIELDS:
                if isinstance(package.get(field), dict):
                    _wanted(package[field], wanted)
    for key, package in packages.items():
        if key == "":
            continue  # the project itself
        line = lines.of(key)
        package = _object(package, path, line, f"`packages` entry {key!r}")
        install_name = key.rpartition("node_modules/")[2]
        if "node_modules/" not in key:
            # a workspace or `file:` folder itself; the `link: true` entry under node_modules
            # that points at it is the one noted
            continue
        if package.get("link"):
            collector.skip(install_name, str(package.get("resolved", "")), "a linked folder",
                           line, key)
            continue
        if package.get("inBundle"):
            collector.skip(install_name, key, "bundled inside its parent's tarball", line, key)
            continue
        resolved = package.get("resolved")
        resolved = resolved if isinstance(resolved, str) else None
        reason = _elsewhere(wanted.get(install_name, []))
        if resolved is not None and non_registry(resolved) not in (None, "a tarball URL"):
            reason = non_registry(resolved)
        if reason is not None:
            collector.skip(install_name, resolved or key, reason, line, key)
            continue
        version = package.get("version")
        if not isinstance(version, str) or not version:
            raise LockfileError(path, line, f"`packages` entry {key!r} has no version")
        name = package.get("name", install_name)
        if not isinstance(name, str):
            raise LockfileError(path, line, f"`packages` entry {key!r} has a non-text name")
        integrity = package.get("integrity")
        collector.lock(name, version, line, key,
                       ranges=_ranges(wanted.get(install_name, [])),
                       alias=install_name if name != install_name else None,
                       integrity=integrity if isinstance(integrity, str) else None,
                       resolved=resolved)


def _read_tree(collector: Collector, path: Path, text: str, dependencies: Any) -> None:
    lines = _Lines(text)
    wanted: dict[str, list[str]] = defaultdict(list)

    def gather(level: Any) -> None:
        if not isinstance(level, dict):
            return
        for entry in level.values():
            if isinstance(entry, dict):
                if isinstance(entry.get("requires"), dict):
                    _wanted(entry["requires"], wanted)
                gather(entry.get("dependencies"))

    gather(dependencies)

    # pre-order, as the text is written, so each key's line is found searching forward
    def walk(level: Any, where: str) -> None:
        level = _object(level, path, lines.of("dependencies") if where else 0, where or
                        "`dependencies`")
        for install_name, entry in level.items():
            line = lines.of(install_name)
            entry = _object(entry, path, line, f"dependency {install_name!r}")
            _lock_v1(collector, path, install_name, entry, line, wanted)
            if "dependencies" in entry:
                walk(entry["dependencies"], f"the dependencies of {install_name!r}")

    walk(dependencies, "")


def _lock_v1(collector: Collector, path: Path, install_name: str, entry: Mapping[str, Any],
             line: int, wanted: Mapping[str, list[str]]) -> None:
    version = entry.get("version")
    if not isinstance(version, str) or not version:
        raise LockfileError(path, line, f"dependency {install_name!r} has no version")
    if entry.get("bundled"):
        collector.skip(install_name, version, "bundled inside its parent's tarball", line,
                       install_name)
        return
    name = install_name
    alias = split_alias(version)
    if alias is not None:
        name, version = alias
    reason = non_registry(version) or _elsewhere(wanted.get(install_name, []))
    if reason is not None:
        collector.skip(install_name, version, reason, line, install_name)
        return
    resolved = entry.get("resolved")
    integrity = entry.get("integrity")
    collector.lock(name, version, line, install_name,
                   ranges=_ranges(wanted.get(install_name, [])),
                   alias=install_name if name != install_name else None,
                   integrity=integrity if isinstance(integrity, str) else None,
                   resolved=resolved if isinstance(resolved, str) else None)
