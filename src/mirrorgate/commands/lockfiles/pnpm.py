"""pnpm's `pnpm-lock.yaml`, lockfile versions 6 (pnpm 8) and 9 (pnpm 9 and 10)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import yaml

from mirrorgate.commands.lockfiles import yamlnodes
from mirrorgate.commands.lockfiles.entries import Lockfile, LockfileError
from mirrorgate.commands.lockfiles.specs import (
    Collector,
    non_registry,
    split_alias,
    split_descriptor,
)
from mirrorgate.npm.versions import parse_version

__all__ = ["read"]

_IMPORTER_FIELDS = ("dependencies", "devDependencies", "optionalDependencies")


def read(path: Path, text: str) -> Lockfile:
    """Registry versions are the `packages` keys (`/name@1.2.3(peer@1)` in v6, `name@1.2.3` in
    v9) whose version part is semver and whose resolution is not a git repository or a folder;
    the ranges are the importers' `specifier`s (pnpm keeps none for indirect dependencies). An
    aliased direct dependency's `version` names the real package (`zeta@1.0.1` in v9,
    `/zeta@1.0.1` in v6)."""
    root = yamlnodes.load(path, text)
    version_node = yamlnodes.get(root, "lockfileVersion")
    version = yamlnodes.scalar(version_node) or ""
    major = version.split(".")[0]
    if major not in ("6", "9"):
        where = yamlnodes.line(version_node) if version_node is not None else 1
        raise LockfileError(path, where, f"has lockfileVersion {version!r}; mirrorgate "
                            "reads pnpm's 6.0 and 9.0")
    collector = Collector(path, f"pnpm-v{major}")
    importers = yamlnodes.items(yamlnodes.get(root, "importers"), path, "`importers`")
    if not importers:  # v6, one project: the importer's fields sit at the top level
        importers = [(".", root, 1)]
    wanted = _importers(collector, path, importers)
    for key, package, line in yamlnodes.items(yamlnodes.get(root, "packages"), path,
                                             "`packages`"):
        _package(collector, path, key, package, line, wanted)
    return collector.result()


def _importers(collector: Collector, path: Path,
               importers: list[tuple[str, yaml.Node, int]]) -> dict[str, list[str]]:
    """Real name -> the ranges the projects ask for it; `link:` dependencies (which have no
    `packages` entry) are skipped here."""
    wanted: dict[str, list[str]] = defaultdict(list)
    for importer, node, _line in importers:
        for field in _IMPORTER_FIELDS:
            for name, dependency, line in yamlnodes.items(
                    yamlnodes.get(node, field), path, f"`{field}` of importer {importer!r}"):
                specifier = yamlnodes.scalar(yamlnodes.get(dependency, "specifier"))
                resolved = yamlnodes.scalar(yamlnodes.get(dependency, "version"))
                if specifier is None or resolved is None:
                    raise LockfileError(path, line, f"dependency {name!r} of importer "
                                        f"{importer!r} lacks a specifier or a version")
                if resolved.startswith("link:"):
                    collector.skip(name, resolved, "a linked folder", line, name)
                    continue
                alias = split_alias(specifier)
                if alias is not None:
                    wanted[alias[0]].append(alias[1])
                else:
                    wanted[name].append(specifier)
    return wanted


def _package(collector: Collector, path: Path, key: str, package: yaml.Node, line: int,
             wanted: dict[str, list[str]]) -> None:
    # v6 keys start with `/`; both put peer suffixes in parentheses: `/a@1.0.0(b@2.0.0)`
    descriptor = key.removeprefix("/").split("(", 1)[0]
    name, version = split_descriptor(descriptor)
    resolution = yamlnodes.get(package, "resolution")
    kind = yamlnodes.scalar(yamlnodes.get(resolution, "type"))
    if kind is not None or parse_version(version) is None:
        # v6 keys git and folder entries by place (`host+port/repo/sha`, `file:dir`); their
        # `name` field says what they are
        name = yamlnodes.scalar(yamlnodes.get(package, "name")) or name
        reason = {"git": "a git repository", "directory": "a local file or folder"}.get(
            kind or "", non_registry(version) or "not a registry version")
        collector.skip(name, version, reason, line, key)
        return
    if not name or resolution is None:
        raise LockfileError(path, line, f"package {key!r} has no name or no resolution")
    integrity = yamlnodes.scalar(yamlnodes.get(resolution, "integrity"))
    tarball = yamlnodes.scalar(yamlnodes.get(resolution, "tarball"))
    collector.lock(name, version, line, key, ranges=wanted.get(name, []),
                   integrity=integrity, resolved=tarball)
