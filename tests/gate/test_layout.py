"""The gate stands in layers by concern (docs/architecture.md#the-layers): what is kept below
the packuments, the packuments below the release verdicts, and the answers to each request
above them all, with no two modules importing each other.

The drift it stops: a verdict that reached into the fill, or the fill into the judge, would
bring back the circle `release.py` and `releasecheck.py` once made, where a change to one
reading meant reading the judge too. Every import counts, inside functions and under
`TYPE_CHECKING` as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mirrorgate.gate

GATE = Path(mirrorgate.gate.__file__).parent

RANK = {
    # shared vocabulary, read by every concern
    "records": 0, "cache": 0, "alerts": 1,
    # the concerns, each reading only those ranked below it
    "kept": 1, "packuments": 2, "verdicts": 3, "pulls": 3,
    # the answers, built from all of them
    "refusals": 4, "jobs": 4, "admission": 5, "assembled": 6, "__init__": 7,
}


def _module(path: Path) -> str:
    parts = path.relative_to(GATE.parent.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(GATE.rglob("*.py")):
        targets = {node.module for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.ImportFrom) and node.module
                   and node.module.startswith("mirrorgate.gate.")}
        found[_module(path)] = targets
    return found


def _concern(module: str) -> str:
    """`mirrorgate.gate.kept.facts` -> `kept`; `mirrorgate.gate.records` -> `records`."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_no_two_modules_of_the_gate_import_each_other() -> None:
    imports = _imports()
    mutual = sorted(f"{a} <-> {b}" for a, targets in imports.items() for b in targets
                    if a < b and a in imports.get(b, set()))
    assert mutual == []


def test_each_concern_reads_only_the_concerns_below_it() -> None:
    imports = _imports()
    unranked = sorted({_concern(m) for m in imports} - set(RANK))
    assert unranked == [], f"a new part of the gate needs its place in RANK: {unranked}"
    upward = sorted(f"{a} -> {b}" for a, targets in imports.items() for b in targets
                    if _concern(a) != _concern(b) and RANK[_concern(b)] >= RANK[_concern(a)])
    assert upward == []
