"""YAML lockfiles (pnpm's, yarn berry's) read as PyYAML's node tree, not as Python values:
nodes keep their line, and scalars stay the text written (`1.10` is a version, not a float).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mirrorgate.commands.lockfiles.entries import LockfileError

__all__ = ["get", "items", "line", "load", "scalar"]

# The C loader when PyYAML was built with libyaml; both keep marks on nodes.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path, text: str) -> yaml.MappingNode:
    """The document's top-level mapping; a YAML error or another shape raises
    `LockfileError` with the line."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = mark.line + 1 if mark is not None else 0
        raise LockfileError(path, where, f"is not valid YAML: {error.problem}") from None
    except yaml.YAMLError as error:
        raise LockfileError(path, 0, f"is not valid YAML: {error}") from None
    if not isinstance(root, yaml.MappingNode):
        raise LockfileError(path, line(root) if root is not None else 1,
                            "is not a YAML mapping")
    return root


def line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def items(node: yaml.Node | None, path: Path, what: str) -> list[tuple[str, yaml.Node, int]]:
    """(key, value, key's line) of a mapping; None (absent) is empty; another shape or a
    non-scalar key raises."""
    if node is None or (isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null")):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise LockfileError(path, line(node), f"{what} is not a mapping")
    found = []
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise LockfileError(path, line(key), f"{what} has a key that is not text")
        found.append((str(key.value), value, line(key)))
    return found


def get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for candidate, value in node.value:
        if isinstance(candidate, yaml.ScalarNode) and candidate.value == key:
            found: yaml.Node = value
            return found
    return None


def scalar(node: yaml.Node | None) -> str | None:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else None
