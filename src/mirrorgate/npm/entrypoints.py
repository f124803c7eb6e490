"""The files of a package that run: what its package.json starts (`main`, `bin`, `exports`
targets, files its install scripts name) and what those `require` or `import` by a relative
path, resolved as node resolves them, whatever their extension (node runs a required `.dat` as
JavaScript). The release signals measure these whole (`npm.contents`). Pure, bounded.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from bisect import bisect_left
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from itertools import islice

from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS

__all__ = ["MAX_RUN_FILES", "entry_points", "requires_of", "resolve", "run_files"]

MAX_RUN_FILES = 200_000
"""Files followed from the entry points at most: as many as a tarball may hold. Each walk
below is bounded too (about a second of CPU for a hostile package.json), and the walk that
stops at a bound says so (`run_files`): the version is refused, not passed half-followed."""
_EDGES = 500_000  # requires resolved at most per package
_TARGETS = 10_000  # `exports` targets read at most (a map nests conditions in subpaths)
_PATTERN_STEPS = 1_000_000  # files looked at for `exports` `*` patterns, at most in all
_REQUIRES_KEPT = 1_000
_LOOKS = 100_000  # `./` looked at per file, at most
_EXPORTS_DEPTH = 8
_SPECIFIER = re.compile(rb"([\"'`])(\.\.?/[^\"'`\n\\]{1,256})\1")
_QUOTES = (b"'", b'"', b"`")
_BEFORE = re.compile(rb"(?:\brequire\s*\(|\bimport\s*\(|\bfrom|\bimport)\s*$")
# what node tries for `require(x)` (LOAD_AS_FILE, then LOAD_INDEX); an ES import names its file
_SUFFIXES = ("", ".js", ".json", ".node", "/index.js", "/index.json", "/index.node")


def requires_of(data: bytes) -> tuple[str, ...]:
    """The relative specifiers a file requires or imports (`./lib/x`, `../y.dat`), found from
    the `./` of each quoted relative path (`bytes.find`, at memory speed: far rarer than the
    words `require`, `import` and `from`), each kept where one of those words stands before."""
    found: dict[str, None] = {}
    at = data.find(b"./")
    looks = 0
    while at >= 0 and looks < _LOOKS and len(found) < _REQUIRES_KEPT:
        looks += 1
        quote = at - 1 if data[at - 1:at] in _QUOTES else (
            at - 2 if data[at - 1:at] == b"." and data[at - 2:at - 1] in _QUOTES else -1)
        if quote >= 0 and _BEFORE.search(data, max(0, quote - 24), quote) is not None:
            matched = _SPECIFIER.match(data, quote)
            if matched is not None:
                found[matched.group(2).decode("utf-8", "replace")] = None
        at = data.find(b"./", at + 2)
    return tuple(found)


def resolve(path: str, files: Collection[str]) -> str | None:
    """The file `path` (inside the package, already joined) names as node resolves it."""
    path = posixpath.normpath(path)
    if path.startswith("../") or path == "..":
        return None  # outside the package: another package's files, read at their own pull
    for suffix in _SUFFIXES:
        if path + suffix in files:
            return path + suffix
    return None


def _targets(exports: object, depth: int = 0) -> Iterable[str]:
    """Every path an `exports` map (conditions and subpaths, nested) may resolve to."""
    if depth > _EXPORTS_DEPTH:
        return
    if isinstance(exports, str):
        yield exports
    elif isinstance(exports, list):
        for item in exports[:100]:
            yield from _targets(item, depth + 1)
    elif isinstance(exports, dict):
        for key, item in list(exports.items())[:1000]:
            if key != "types":  # TypeScript's declarations: node never loads them
                yield from _targets(item, depth + 1)


def _script_files(command: str) -> Iterable[str]:
    """The words of an install command that may name a file (`node setup.js`, `./run.sh`)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: sh refuses it, but read its words anyway
        words = command.split()
    for word in words[:100]:
        for part in re.split(r"[;&|<>()]", word):
            if part and not part.startswith("-"):
                yield part


def entry_points(manifest: Mapping[str, object] | None,
                 files: Collection[str]) -> list[tuple[str, str]]:
    """(file, why) for each file the package.json starts: `main` (else `index.js`), `bin`,
    `exports` targets (a `*` pattern: every file it may match), install scripts' files."""
    return _entry_points(manifest, files)[0]


def _entry_points(manifest: Mapping[str, object] | None,
                  files: Collection[str]) -> tuple[list[tuple[str, str]], str | None]:
    """`entry_points`, and the bound it stopped at (None: it read every one)."""
    overrun: str | None = None
    document = manifest or {}
    found: list[tuple[str, str]] = []

    def named(path: object, why: str, suffixes: bool = False) -> None:
        if not isinstance(path, str) or not path:
            return
        joined = posixpath.normpath(path.lstrip("/"))
        hit = resolve(joined, files) if suffixes else (
            joined if joined in files else None)
        if hit is not None:
            found.append((hit, why))

    main = document.get("main")
    named(main if isinstance(main, str) and main else "index.js", "main", suffixes=True)
    if not found and isinstance(main, str) and main:
        # a `main` naming no file: node loads the folder's `index.js` instead (DEP0128's
        # fallback), the way peacenotwar 9.1.6's missing `node-ipc.cjs` ran its `index.js`
        named("index.js", "main", suffixes=True)
    bins = document.get("bin")
    for path in (list(bins.values()) if isinstance(bins, dict) else [bins])[:1000]:
        named(path, "bin")
    ordered: list[str] | None = None
    steps = 0
    for count, target in enumerate(islice(_targets(document.get("exports")), _TARGETS + 1)):
        if count == _TARGETS:
            overrun = f"past {_TARGETS} `exports` targets"
            break
        if "*" not in target:
            named(target, "exports")
            continue
        # the files a pattern may match, from its fixed head on (sorted once), within a budget
        ordered = sorted(files) if ordered is None else ordered
        head, _, tail = posixpath.normpath(target.lstrip("/")).partition("*")
        at = bisect_left(ordered, head)
        while at < len(ordered) and ordered[at].startswith(head):
            if steps == _PATTERN_STEPS:
                overrun = f"past {_PATTERN_STEPS} files matched against `exports` patterns"
                break
            steps += 1
            if ordered[at].endswith(tail):
                found.append((ordered[at], "exports"))
            at += 1
    scripts = document.get("scripts")
    if isinstance(scripts, dict):
        for key in INSTALL_SCRIPT_KEYS:
            command = scripts.get(key)
            if isinstance(command, str):
                for word in _script_files(command):
                    named(word, key, suffixes=True)
    return found, overrun


def run_files(manifest: Mapping[str, object] | None, files: Collection[str],
              requires: Mapping[str, tuple[str, ...]]) -> tuple[dict[str, str], str | None]:
    """Every file that runs, each with why (`main`, `bin`, `required by lib/a.js`...): the
    entry points and, transitively, what they require by a relative path; and the bound the
    walk stopped at, if one did (None: every file that runs is in the first)."""
    found: dict[str, str] = {}
    starts, overrun = _entry_points(manifest, files)
    pending = deque(starts)
    edges = 0
    while pending and overrun is None:
        path, why = pending.popleft()
        if path in found:
            continue
        if len(found) == MAX_RUN_FILES:
            overrun = f"past {MAX_RUN_FILES} files that run"
            break
        found[path] = why
        folder = posixpath.dirname(path)
        listed = requires.get(path, ())
        if edges + len(listed) > _EDGES:
            overrun = f"past {_EDGES} requires followed"
            break
        edges += len(listed)
        for specifier in listed:
            hit = resolve(posixpath.join(folder, specifier), files)
            if hit is not None and hit not in found:
                pending.append((hit, f"required by {path}"))
    return found, overrun
