"""What a release's code can do, at install and at load: the capabilities (`npm.jsuses`) of the
code npm runs at install (the hooks' commands, the files they name and what those require,
bundled dependencies' hooks, `binding.gyp`) and of the code node runs at load (`main`,
`exports`, `bin` and what they require), each with its file, line and call.

Pure. `Layout` is what a tarball's reading keeps of its shape (`npm.contents`); the walk
follows requires as node resolves them, bundled dependencies included, bounded as
`npm.entrypoints` is. `release_capabilities` reads a release's files directly (the bench's
entry point); the comparison is `rules.capabilities`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mirrorgate.npm.entrypoints import entry_points, requires_of, resolve
from mirrorgate.npm.jsmarks import ESCAPES, HEX_IDENTIFIERS, UNMEASURED, FileMarks, marks_of
from mirrorgate.npm.jsuses import (
    CAPABILITIES,
    CODE_REMOVED,
    NATIVE,
    NETWORK,
    OBFUSCATED,
    PROCESS,
    UNREAD,
    ReadBudget,
    uses_of,
)
from mirrorgate.npm.packagejson import PackageJsonError, parse_package_json
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS

__all__ = ["INSTALL", "LOAD", "Capabilities", "Found", "Layout", "Sent", "capabilities_of",
           "release_capabilities"]

INSTALL = "install"
LOAD = "load"
KEPT_PER_CAPABILITY = 3
"""Places kept as evidence per capability and phase (the first found, in walk order)."""
KEPT_DESTINATIONS = 64
"""Network calls to a written host kept per phase (the first found, in walk order): each is
compared with the predecessor's hosts, so more than evidence's few are kept."""
KEPT_HOSTS = 4096
"""Hosts named by the code that runs kept at most (an SDK's bundle names a few hundred)."""
_FILES = 200_000  # files followed at most (as `npm.entrypoints.MAX_RUN_FILES`)
_EDGES = 500_000
_SCRIPT_DEPTH = 3  # `npm run x` followed this deep
_SHELL = re.compile(r"&&|\|\||[;|&\n]")
_NOTHING = frozenset({"echo", "true", "exit", ":", "printf", "test", "["})
"""Shell builtins that run nothing of the package's (a funding banner's `echo`)."""
_TOOLS: Mapping[str, frozenset[str]] = {
    # native builds; those that download a prebuilt binary first reach the network too
    "node-gyp": frozenset({PROCESS, NATIVE}),
    "node-gyp-build": frozenset({PROCESS, NATIVE}),
    "node-gyp-build-optional-packages": frozenset({PROCESS, NATIVE}),
    "cmake-js": frozenset({PROCESS, NATIVE, NETWORK}),
    "prebuild-install": frozenset({PROCESS, NATIVE, NETWORK}),
    "node-pre-gyp": frozenset({PROCESS, NATIVE, NETWORK}),
    # downloads
    "curl": frozenset({PROCESS, NETWORK}), "wget": frozenset({PROCESS, NETWORK}),
    "npx": frozenset({PROCESS, NETWORK}), "bunx": frozenset({PROCESS, NETWORK}),
    "git": frozenset({PROCESS, NETWORK}),
}
_NODE_CODE_FLAGS = frozenset({"-e", "--eval", "-p", "--print"})
_NODE_VALUE_FLAGS = frozenset({"-r", "--require", "--import", "--loader",
                               "--experimental-loader"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"cross-env", "env", "exec", "nohup", "sudo", "time"})
_SHOWN_ENTRIES = 100  # entry points kept per release (an `exports` map may name thousands)


@dataclass(frozen=True, slots=True)
class Found:
    """One capability of the release: when it runs (`install`, `load`), where, and the call."""

    capability: str
    phase: str
    file: str
    line: int
    call: str

    def text(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where} `{self.call}`"


@dataclass(frozen=True, slots=True)
class Sent:
    """A network call of the release whose host its code writes (`npm.js.destinations`):
    when it runs, where, the call, the host, and whether it encodes or reads what it sends."""

    phase: str
    file: str
    line: int
    call: str
    host: str
    sends: bool

    def text(self) -> str:
        what = ", what it sends encoded or read from the environment" if self.sends else ""
        return f"{self.file}:{self.line} `{self.call}` to {self.host}{what}"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a release's code can do: the places found, at install and at load; the network
    calls to a host the code writes (`sent`) and every host the code that runs names; and the
    files `require` of the package loads (`main`, `exports`), each with its bytes of code (0:
    only comments; -1: not JavaScript), and each `bin`'s: said beside a successor's
    `code-removed`."""

    found: tuple[Found, ...] = ()
    sent: tuple[Sent, ...] = ()
    hosts: frozenset[str] = frozenset()
    entries: tuple[tuple[str, int], ...] = ()

    def at(self, phase: str) -> frozenset[str]:
        return frozenset(item.capability for item in self.found if item.phase == phase)

    @property
    def at_install(self) -> frozenset[str]:
        return self.at(INSTALL)

    @property
    def at_load(self) -> frozenset[str]:
        return self.at(LOAD)

    def where(self, capability: str, phase: str) -> list[Found]:
        return [item for item in self.found
                if item.capability == capability and item.phase == phase]

    def described(self, phase: str) -> str:
        """`network, processes` or `nothing`: the capabilities of one phase, named."""
        names = sorted(self.at(phase))
        return ", ".join(names) if names else "nothing"


@dataclass(frozen=True, slots=True)
class Layout:
    """What the walk needs of a tarball besides its code: the root package.json (its `main`,
    `bin`, `exports`, `scripts`), every file's path, each bundled dependency's package.json by
    its folder, and the folders where a `binding.gyp` runs node-gyp."""

    manifest: Mapping[str, object] = field(default_factory=dict)
    files: frozenset[str] = frozenset()
    bundled: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    gyp: tuple[str, ...] = ()


@dataclass(slots=True)
class _Walk:
    layout: Layout
    code: Mapping[str, FileMarks]
    found: dict[tuple[str, str], list[Found]] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=lambda: {INSTALL: set(), LOAD: set()})
    edges: int = 0
    sent: dict[str, list[Sent]] = field(default_factory=lambda: {INSTALL: [], LOAD: []})
    hosts: set[str] = field(default_factory=set)

    def add(self, item: Found) -> None:
        kept = self.found.setdefault((item.capability, item.phase), [])
        if len(kept) < KEPT_PER_CAPABILITY and item not in kept:
            kept.append(item)


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)[:100]
    except ValueError:  # an unbalanced quote: sh refuses it, but read its words anyway
        return command.split()[:100]


def _command(walk: _Walk, folder: str, hook: str, command: str, scripts: Mapping[str, object],
             depth: int = 0) -> list[str]:
    """What one install command runs: the capabilities of the programs it starts (anything
    but node over the package's own files runs code mirrorgate does not read), and the
    package's files node runs (returned, to be followed)."""
    where = posixpath.join(folder, "package.json") if folder else "package.json"
    files: list[str] = []
    for part in _SHELL.split(command)[:50]:
        words = _words(part)
        while words and (words[0] in _WRAPPERS or _ASSIGNMENT.match(words[0])):
            words = words[1:]  # `FOO=1 node x.js`, `cross-env FOO=1 node x.js`
        if not words or posixpath.basename(words[0]) in _NOTHING:
            continue
        program = posixpath.basename(words[0])
        shown = f"{hook}: {part.strip()[:100]}"
        if program in ("node", "nodejs"):
            files += _node(walk, folder, words[1:], where, shown)
        elif program in ("npm", "yarn", "pnpm", "bun") and len(words) > 1 and (
                words[1] in ("run", "run-script") or program == "yarn"):
            name = words[2] if words[1] in ("run", "run-script") and len(words) > 2 else words[1]
            inner = scripts.get(name)
            if isinstance(inner, str) and depth < _SCRIPT_DEPTH:
                files += _command(walk, folder, hook, inner, scripts, depth + 1)
            elif not isinstance(inner, str):
                walk.add(Found(PROCESS, INSTALL, where, 0, shown))
        else:
            for capability in sorted(_TOOLS.get(program, frozenset({PROCESS}))):
                walk.add(Found(capability, INSTALL, where, 0, shown))
            if program in ("npm", "pnpm", "yarn", "bun"):
                walk.add(Found(NETWORK, INSTALL, where, 0, shown))  # a package manager fetches
            script = resolve(posixpath.join(folder, words[0]), walk.layout.files) \
                if words[0].startswith(".") else None
            if script is not None and script.endswith((".js", ".cjs", ".mjs")):
                files.append(script)  # `./setup.js` with a shebang: node runs it
    return files


def _node(walk: _Walk, folder: str, arguments: list[str], where: str, shown: str) -> list[str]:
    """`node [flags] file`, `node -e code`: the files node runs, or the inline code's uses."""
    files: list[str] = []
    index = 0
    while index < len(arguments):
        word = arguments[index]
        if word in _NODE_CODE_FLAGS and index + 1 < len(arguments):
            code = arguments[index + 1].encode()
            for use in uses_of(code).found:
                walk.add(Found(use.capability, INSTALL, where, 0, shown))
            files += [hit for hit in (resolve(posixpath.join(folder, spec), walk.layout.files)
                                      for spec in requires_of(code)) if hit is not None]
            return files
        if word in _NODE_VALUE_FLAGS and index + 1 < len(arguments):
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        hit = resolve(posixpath.join(folder, word), walk.layout.files)
        if hit is not None:
            files.append(hit)
        else:  # a file the package does not hold: node runs code mirrorgate cannot read
            walk.add(Found(PROCESS, INSTALL, where, 0, shown))
        return files
    return files


def _bundled(walk: _Walk, path: str, name: str) -> str | None:
    """The file `require(name)` loads from a dependency bundled in the tarball, looked for
    in each `node_modules` from the requiring file's folder up, as node looks."""
    package = "/".join(name.split("/")[:2] if name.startswith("@") else name.split("/")[:1])
    rest = name[len(package):].lstrip("/")
    folder = posixpath.dirname(path)
    while True:
        base = posixpath.join(folder, "node_modules", package) if folder else \
            posixpath.join("node_modules", package)
        manifest = walk.layout.bundled.get(base)
        if manifest is not None or base + "/index.js" in walk.layout.files:
            if rest:
                return resolve(posixpath.join(base, rest), walk.layout.files)
            main = manifest.get("main") if manifest is not None else None
            hit = resolve(posixpath.join(base, main), walk.layout.files) \
                if isinstance(main, str) and main else None
            return hit or resolve(posixpath.join(base, "index.js"), walk.layout.files)
        if not folder:
            return None
        folder = posixpath.dirname(folder)


def _follow(walk: _Walk, starts: Iterable[str], phase: str) -> None:
    """Every file that runs from `starts`, what each can do recorded under `phase`."""
    pending = deque(starts)
    seen = walk.seen[phase]
    # a package with nothing under a `node_modules` folder bundles nothing a module name
    # could load (`_bundled` finds none): its modules are not looked for, folder by folder
    bundles = bool(walk.layout.bundled) or any("node_modules/" in path
                                               for path in walk.layout.files)
    while pending:
        path = pending.popleft()
        if path in seen:
            continue
        if len(seen) >= _FILES or walk.edges >= _EDGES:
            walk.add(Found(UNREAD, phase, path, 0, "the files that run were not all followed"))
            return
        seen.add(path)
        if path.endswith(".node"):
            walk.add(Found(NATIVE, phase, path, 0, "a native addon loaded"))
            continue
        marks = walk.code.get(path)
        if marks is None:
            continue  # JSON, declarations: never run as JavaScript
        _record(walk, path, marks, phase)
        folder = posixpath.dirname(path)
        requires = marks.requires
        modules = marks.uses.modules if marks.uses is not None else ()
        walk.edges += len(requires) + len(modules)
        for specifier in requires:
            hit = resolve(posixpath.join(folder, specifier), walk.layout.files)
            if hit is not None:
                pending.append(hit)
        for name in modules if bundles else ():
            hit = _bundled(walk, path, name.removeprefix("node:"))
            if hit is not None:
                pending.append(hit)


def _record(walk: _Walk, path: str, marks: FileMarks, phase: str) -> None:
    kinds = marks.kinds
    if UNMEASURED in kinds:
        shown = next(mark.measure for mark in marks.marks if mark.kind == UNMEASURED)
        walk.add(Found(UNREAD, phase, path, 0, shown[:100]))
    elif marks.uses is None:
        walk.add(Found(UNREAD, phase, path, 0, "its code was not read whole"))
    for mark in marks.marks:
        if mark.kind in (ESCAPES, HEX_IDENTIFIERS):
            walk.add(Found(OBFUSCATED, phase, path, mark.line, mark.measure[:100]))
    if marks.uses is None:
        return
    if marks.uses.unread is not None:
        walk.add(Found(UNREAD, phase, path, 0, marks.uses.unread))
    for use in marks.uses.found:
        walk.add(Found(use.capability, phase, path, use.line, use.call))
    _record_destinations(walk, path, marks, phase)


def _record_destinations(walk: _Walk, path: str, marks: FileMarks, phase: str) -> None:
    """The hosts a file that runs names, and its network calls to a written host."""
    uses = marks.uses
    if uses is None:
        return
    if len(walk.hosts) < KEPT_HOSTS:
        walk.hosts.update(uses.hosts)
    kept = walk.sent[phase]
    for destination in uses.destinations[:KEPT_DESTINATIONS - len(kept)]:
        kept.append(Sent(phase, path, destination.line, destination.call, destination.host,
                         destination.sends))


def capabilities_of(layout: Layout, code: Mapping[str, FileMarks],
                    commands: Mapping[str, str] | None = None) -> Capabilities:
    """What the release laid out as `layout`, whose files' code was read as `code`, can do.
    `commands`: install hooks the registry's manifest declares beside the tarball's own (npm
    and yarn differ in which they run: both count)."""
    walk = _Walk(layout, code)
    manifest = layout.manifest
    scripts = manifest.get("scripts")
    scripts = scripts if isinstance(scripts, Mapping) else {}
    install: list[str] = []
    for hook in INSTALL_SCRIPT_KEYS:
        texts = {scripts.get(hook), (commands or {}).get(hook)}
        for command in sorted(text for text in texts if isinstance(text, str) and text):
            install += _command(walk, "", hook, command, scripts)
    for folder, bundled in sorted(layout.bundled.items()):
        inner = bundled.get("scripts")
        inner = inner if isinstance(inner, Mapping) else {}
        for hook in INSTALL_SCRIPT_KEYS:
            text = inner.get(hook)
            if isinstance(text, str) and text:
                install += _command(walk, folder, hook, text, inner)
    for folder in layout.gyp:
        where = posixpath.join(folder, "binding.gyp") if folder else "binding.gyp"
        for capability in (NATIVE, PROCESS):
            walk.add(Found(capability, INSTALL, where, 0, "node-gyp rebuild"))
    _follow(walk, install, INSTALL)
    loads = [path for path, why in entry_points(manifest, layout.files)
             if why in ("main", "bin", "exports")]
    _follow(walk, loads, LOAD)
    for path in sorted(layout.files):
        if path.endswith(".node"):  # a prebuilt addon, loaded by a computed require
            walk.add(Found(NATIVE, LOAD, path, 0, "a native addon shipped"))
            break
    entries = _entries(layout, code)
    _code_removed(walk, layout, entries)
    found = [item for phase in (INSTALL, LOAD) for capability in CAPABILITIES
             for item in walk.found.get((capability, phase), ())]
    return Capabilities(tuple(found), (*walk.sent[INSTALL], *walk.sent[LOAD]),
                        frozenset(walk.hosts), entries)


def _code_size(path: str, code: Mapping[str, FileMarks]) -> int:
    marks = code.get(path)
    if marks is None:
        # an empty file is never measured (`npm.contents` reads a file that runs whole, or
        # marks it unmeasured); JSON, a native addon: loaded, not read as code
        return 0 if path.endswith((".js", ".cjs", ".mjs")) else -1
    return 0 if marks.uses is not None and marks.uses.blank else marks.size


def _entries(layout: Layout, code: Mapping[str, FileMarks]) -> tuple[tuple[str, int], ...]:
    """The files node starts at load, as it resolves `main` (else `index.js`), `exports`
    and `bin`, each with its bytes of code (`Capabilities.entries`)."""
    return tuple((path, _code_size(path, code))
                 for path, why in entry_points(layout.manifest, layout.files)[:_SHOWN_ENTRIES]
                 if why in ("main", "exports", "bin"))


def _code_removed(walk: _Walk, layout: Layout, entries: tuple[tuple[str, int], ...]) -> None:
    """Marks a release whose code that runs at load is gone (faker 6.6.6: `main` names an
    `index.js` it no longer ships; its rebuilt shape ships one holding `// endgame`): the
    `main`, `exports` or `bin` it declares, or the `index.js` it ships, start no code. Not
    marked: a package declaring none and shipping no `index.js` (types-only: it never had
    code at load to lose), nor one whose `bin` still runs code (a library turned CLI); a CLI
    of `bin` alone is marked when its `bin` names nothing or only comments. Whether the
    release before had code is `rules.capabilities`' (`code-removed` gained)."""
    manifest = layout.manifest
    main, exports, bins = manifest.get("main"), manifest.get("exports"), manifest.get("bin")
    named = main.strip() if isinstance(main, str) and main.strip() else ""
    if not (named or exports or bins or "index.js" in layout.files) or \
            any(size != 0 for _path, size in entries):
        return
    if entries:
        path, _size = entries[0]
        walk.add(Found(CODE_REMOVED, LOAD, path, 0, "comments only, no code"))
        return
    where = named or ("package.json" if bins else "index.js")  # the file node looks for
    walk.add(Found(CODE_REMOVED, LOAD, where, 0, "named by main, exports or bin, not shipped"))


def release_capabilities(files: Mapping[str, bytes]) -> Capabilities:
    """What a release can do, from its files by their path inside the package (`package.json`,
    `lib/index.js`, `node_modules/dep/package.json`): the entry point for a reader that holds
    the files themselves (bench/). Read with the relay's reading's bounds per file."""
    budget = ReadBudget()
    code: dict[str, FileMarks] = {}
    bundled: dict[str, Mapping[str, object]] = {}
    manifest: Mapping[str, object] = {}
    gyp: list[str] = []
    for path, data in sorted(files.items()):
        if path.endswith("package.json"):
            try:
                document = parse_package_json(data)
            except PackageJsonError:
                document = None
            if isinstance(document, dict):
                folder = posixpath.dirname(path)
                if not folder:
                    manifest = document
                elif posixpath.basename(posixpath.dirname(folder)) == "node_modules" or \
                        posixpath.basename(posixpath.dirname(posixpath.dirname(folder))) \
                        == "node_modules":
                    bundled[folder] = document
            continue
        if path.endswith("binding.gyp"):
            gyp.append(posixpath.dirname(path))
            continue
        if path.endswith((".json", ".d.ts", ".map", ".md")):
            continue
        marks = marks_of(data, len(data))
        code[path] = FileMarks(marks.size, marks.marks, marks.whole, marks.digest,
                               requires_of(data), uses_of(data, budget))
    root_gyp = tuple(sorted(folder for folder in gyp if folder == "" or folder in bundled))
    return capabilities_of(Layout(manifest, frozenset(files), bundled, root_gyp), code)


