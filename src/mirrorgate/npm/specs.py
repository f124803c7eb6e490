"""A dependency spec as npm installs it: the registry package an `npm:` alias resolves to, or
where a git, URL or path spec fetches from (outside any registry), following npm-package-arg;
and the dependencies npm 7+ installs from a manifest (peers included, optional peers not).
Pure; the release signals compare what npm will install, not the manifest's keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LISTED", "Installed", "installed_as", "installed_dependencies"]

MAX_LISTED = 1000
"""Entries of one dependency table read at most (a manifest is publisher-controlled)."""
_GIT_PREFIXES = ("git+", "git:", "github:", "gitlab:", "bitbucket:", "gist:")
_PATH_PREFIXES = ("file:", "link:", "./", "../", "/", "~/", ".\\", "..\\", "~\\")
# npm-package-arg's `isGitHubShorthand`: `owner/repo` or `owner/repo#ref`, no scheme, no `@`
_SHORTHAND = re.compile(r"^[^@%/\s:][^/\s:@]*/[^/\s:@#]+(?:#.*)?$")
_SCP_GIT = re.compile(r"^[^@\s/]+@[^:\s/]+:")  # `git@host:owner/repo`
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")
_ARCHIVE = (".tgz", ".tar.gz", ".tar")


@dataclass(frozen=True, slots=True)
class Installed:
    """What npm installs for one `key: spec`: `package`, the registry name it fetches (the key,
    or an `npm:` alias's target), or `outside`, the kind of place it fetches from instead
    (`git`, `url`, `path`), which no registry and so no gate sees."""

    key: str
    spec: str
    package: str | None = None
    outside: str | None = None

    def describe(self) -> str:
        if self.outside is not None:
            return f"`{self.key}` ({self.spec[:200]}) is fetched from a {self.outside}"
        if self.package != self.key:
            return f"`{self.key}` ({self.spec[:200]}) installs `{self.package}`"
        return f"`{self.key}`"


def _alias_target(rest: str) -> str | None:
    """`npm:name@range` -> `name` (a scoped name keeps its first `@`)."""
    at = rest.find("@", 1)
    name = rest[:at] if at > 0 else rest
    return name.strip() or None


def installed_as(key: str, spec: str) -> Installed:
    """npm-package-arg's reading of `spec` under `key`, as far as the gate needs it."""
    text = spec.strip()
    lower = text.lower()
    if lower.startswith("npm:"):
        target = _alias_target(text[4:])
        if target is None:
            return Installed(key, spec, package=key)
        return Installed(key, spec, package=target)
    if lower.startswith(_GIT_PREFIXES) or _SCP_GIT.match(text) or _SHORTHAND.match(text):
        return Installed(key, spec, outside="git repository")
    if lower.startswith(("http://", "https://")):
        return Installed(key, spec, outside="URL")
    if (lower.startswith(_PATH_PREFIXES) or _WINDOWS_PATH.match(text)
            or lower.endswith(_ARCHIVE)):
        return Installed(key, spec, outside="path")
    if lower.startswith("workspace:"):
        return Installed(key, spec, outside="workspace")
    return Installed(key, spec, package=key)  # a range, a version, a tag: the registry's


def _table(manifest: Mapping[str, Any], key: str) -> dict[str, str]:
    listed = manifest.get(key)
    if not isinstance(listed, Mapping):
        return {}
    return {str(k): str(v) for k, v in list(listed.items())[:MAX_LISTED]}


def installed_dependencies(manifest: Mapping[str, Any]) -> dict[str, Installed]:
    """What npm 7+ installs for a manifest, by key: `dependencies`, `optionalDependencies`
    and `peerDependencies` (installed since npm 7), less the peers `peerDependenciesMeta`
    marks optional (npm installs those only when something else asks for them)."""
    found: dict[str, str] = {}
    meta = manifest.get("peerDependenciesMeta")
    for key, spec in _table(manifest, "peerDependencies").items():
        entry = meta.get(key) if isinstance(meta, Mapping) else None
        if isinstance(entry, Mapping) and entry.get("optional") is True:
            continue
        found[key] = spec
    # a key in both: npm's `dependencies` (or optional) spec wins over the peer's range
    found.update(_table(manifest, "dependencies"))
    found.update(_table(manifest, "optionalDependencies"))
    return {key: installed_as(key, spec) for key, spec in found.items()}
