"""yarn's `yarn.lock`: classic (yarn 1, its own syntax: `yarnclassic`) and berry (yarn 2 and
later, YAML with a `__metadata` entry)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from mirrorgate.commands.lockfiles import yamlnodes
from mirrorgate.commands.lockfiles.entries import Lockfile, LockfileError
from mirrorgate.commands.lockfiles.specs import (
    Collector,
    non_registry,
    split_alias,
    split_descriptor,
)
from mirrorgate.commands.lockfiles.yarnclassic import parse

__all__ = ["read"]

_BERRY = re.compile(r"^__metadata:", re.MULTILINE)


def read(path: Path, text: str) -> Lockfile:
    """Both head an entry with the descriptors that resolved to it (`"a@npm:^1.0.0, a@npm:^1.1.0"`
    in berry, `a@^1.0.0, a@^1.1.0` in classic), which give the ranges. An alias is
    `zed@npm:zeta@^1.0.0` in both; berry's `resolution` names the real package
    (`zeta@npm:1.0.1`) and wraps patched packages as `name@patch:name@npm%3A1.2.3#...`, which
    still pins the npm version. Other protocols (workspace, file, link, portal, git, exec) are
    skipped."""
    return _berry(path, text) if _BERRY.search(text) else _classic(path, text)


def _classic(path: Path, text: str) -> Lockfile:
    collector = Collector(path, "yarn-classic")
    for block in parse(path, text):
        key = ", ".join(block.descriptors)
        version = block.fields.get("version")
        if version is None:
            raise LockfileError(path, block.line, f"entry {key!r} has no version")
        name, alias, ranges, reason = "", None, [], None
        for descriptor in block.descriptors:
            installed, wanted = split_descriptor(descriptor)
            real = split_alias(wanted)
            if real is not None:
                name, alias = real[0], installed
                ranges.append(real[1])
            else:
                name = installed
                ranges.append(wanted)
                reason = reason or non_registry(wanted)
        resolved = block.fields.get("resolved")
        if resolved is not None and non_registry(resolved) not in (None, "a tarball URL"):
            reason = non_registry(resolved)
        if reason is not None:
            collector.skip(name, resolved or key, reason, block.line, key)
            continue
        collector.lock(name, version, block.line, key, ranges=ranges, alias=alias,
                       integrity=block.fields.get("integrity"), resolved=resolved)
    return collector.result()


def _registry_version(resolution: str) -> tuple[str, str] | None:
    """(name, version) when a berry resolution pins an npm version, patched or not."""
    name, reference = split_descriptor(resolution)
    if reference.startswith("npm:"):
        return name, reference[len("npm:"):]
    if reference.startswith("patch:"):
        inner = unquote(reference[len("patch:"):].split("#", 1)[0])
        return _registry_version(inner)
    return None


def _berry(path: Path, text: str) -> Lockfile:
    root = yamlnodes.load(path, text)
    collector = Collector(path, "yarn-berry")
    for key, entry, line in yamlnodes.items(root, path, "the lockfile"):
        if key == "__metadata":
            continue
        resolution = yamlnodes.scalar(yamlnodes.get(entry, "resolution"))
        if resolution is None:
            raise LockfileError(path, line, f"entry {key!r} has no resolution")
        pinned = _registry_version(resolution)
        if pinned is None:
            name, reference = split_descriptor(resolution)
            if reference == "workspace:.":
                continue  # the project itself
            reason = non_registry(reference.split("#", 1)[0]) or "not a registry version"
            collector.skip(name, resolution, reason, line, key)
            continue
        name, version = pinned
        alias, ranges = None, []
        for descriptor in (part.strip() for part in key.split(",")):
            installed, wanted = _berry_range(descriptor)
            if installed != name:
                alias = installed
            ranges.append(wanted)
        collector.lock(name, version, line, key, ranges=ranges, alias=alias)
    return collector.result()


def _berry_range(descriptor: str) -> tuple[str, str]:
    """(installed name, range) of a berry descriptor: `a@npm:^1.0.0`, the alias
    `zed@npm:zeta@^1.0.0`, or the patched `a@patch:a@npm%3A^1.0.0#...` (its inner range)."""
    installed, wanted = split_descriptor(descriptor)
    if wanted.startswith("patch:"):
        return installed, _berry_range(unquote(wanted[len("patch:"):].split("#", 1)[0]))[1]
    wanted = wanted.removeprefix("npm:")
    if "@" in wanted.lstrip("@"):  # an alias names the real package before its range
        wanted = split_descriptor(wanted)[1]
    return installed, wanted
