"""The install scripts a tarball itself declares, read as its bytes stream where the
install-scripts rule applies: its own and its bundled dependencies' `package.json` and
`binding.gyp`, as npm unpacks them (`tarball`) and parses them (`packagejson`). Pure,
incremental, bounded.

The registry's manifest is what the publisher sent beside the tarball ("manifest confusion"):
yarn 1 runs a `postinstall` only the tarball's `package.json` has, npm a bundled dependency's.
"""

from __future__ import annotations

import posixpath
from typing import Protocol

from mirrorgate.npm.packagejson import PackageJsonError, parse_package_json
from mirrorgate.npm.scripts import install_scripts
from mirrorgate.npm.tarball import Entry, TarballReader

__all__ = ["MAX_MANIFEST_BYTES", "FileWatch", "ScriptScan", "declared_scripts", "scanned",
           "scripts_in"]

MAX_MANIFEST_BYTES = 1024 * 1024
"""A package.json larger than this cannot be read here, so the version is refused."""
_STEP = 256 * 1024
_ESCAPES_KEPT = 20
_WANTED = ("package.json", "binding.gyp")


def _escapes(path: str) -> bool:
    """Whether an entry's path (as the tar names it, `package/` first) is absolute or climbs
    with `..`: npm pack never writes one (npm strips the first, skips the second)."""
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        return True
    # most paths hold no `..` at all: no split
    return ".." in path and any(part == ".." for part in path.replace("\\", "/").split("/"))


def _link_escapes(path: str, target: str) -> bool:
    """Whether a link entry points outside the package's folder: a symbolic link's target is
    read beside the link, a hard link's (as tar records it) from the archive's root."""
    text = target.replace("\\", "/")
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        return True
    inside = path.partition("/")[2]  # past `package/`
    folder = inside.rsplit("/", 1)[0] if "/" in inside else ""
    placed = posixpath.normpath(posixpath.join(folder, text))
    return placed == ".." or placed.startswith("../")


def _package_folder(parts: list[str]) -> str | None:
    """The package folder of a file in `parts` (inside the package, file name last): "" for
    the root, `node_modules/x` (`node_modules/@s/x`, nested) for a bundled dependency, whose
    install scripts npm runs as well; None for any other folder."""
    *folder, _file = parts
    bundled = (len(folder) >= 2 and folder[-2] == "node_modules") or (
        len(folder) >= 3 and folder[-3] == "node_modules" and folder[-2].startswith("@"))
    return "/".join(folder) if not folder or bundled else None


def _readings(entry: Entry) -> set[tuple[str, str]]:
    """(package folder, file name) of each package file `entry` may be, lower-cased (on a
    case-insensitive disk PACKAGE.JSON is package.json, NODE_MODULES node_modules): where npm
    writes it, and where a client that drops empty and `.` components, or reads `\\` as a
    folder separator (on Windows), would. A `binding.gyp` folder counts as the file: npm's
    `isNodeGypPackage` is a `stat`."""
    raw = entry.path.lower()
    if "package.json" not in raw and "binding.gyp" not in raw:
        return set()  # most entries: no reading can make them one
    spellings = [entry.placed.lower()] if entry.placed else []
    for path in (raw, raw.replace("\\", "/")):
        parts = [part for part in path.split("/") if part not in ("", ".")]
        spellings += ["/".join(parts[1:]), "/".join(path.split("/")[1:])]
    found: set[tuple[str, str]] = set()
    for spelling in spellings:
        parts = [part for part in spelling.split("/") if part not in ("", ".")]
        for index, part in enumerate(parts):
            if part in _WANTED and (part == "binding.gyp" or index == len(parts) - 1):
                folder = _package_folder(parts[:index + 1])
                if folder is not None:
                    found.add((folder, part))
    return found


def declared_scripts(manifest: bytes) -> list[str]:
    """The install scripts a package.json's bytes declare (npm's three keys), read as npm
    reads it; none when npm cannot parse it (it runs nothing from it either)."""
    try:
        document = parse_package_json(manifest)
    except PackageJsonError:
        return []
    return install_scripts(document) if isinstance(document, dict) else []


class FileWatch(Protocol):
    """Other files a scan's reader wants (the release signals read JavaScript files): how many
    of a file's first bytes to hand over (0: none), then those bytes. `path` is where npm
    writes it inside the package (`lib/index.js`)."""

    def wants(self, path: str, size: int) -> int: ...

    def read(self, path: str, data: bytes, size: int) -> None: ...

    def settle(self) -> None:
        """Every byte read: work out what the files read come to, on the thread that read
        them (`ScriptScan.settle`)."""


class ScriptScan:
    """Feed a tarball's bytes in order; `finish()` returns why its contents run code at install
    (a sentence), or None. Unreadable contents are refused too: what cannot be read here
    cannot be shown to run nothing. `watch` is handed the files it asks for on the way."""

    def __init__(self, watch: FileWatch | None = None) -> None:
        self._watch = watch
        self._tarball = TarballReader(self)
        self._reading: list[str] | None = None  # the folders of the package.json being read
        self.scripts: dict[str, list[str]] = {}  # package folder ("" the root) -> scripts
        self.gyp: set[str] = set()
        """Package folders holding a `binding.gyp`."""
        self.gyp_any: set[str] = set()
        """Package folders holding any `*.gyp` file (npm publish's `gypfile` step globs)."""
        self.gypfile_off: set[str] = set()
        """Package folders whose own package.json says `"gypfile": false`."""
        self.manifest: dict[str, object] | None = None
        """The root package.json, parsed (the last one in the tar wins, as on disk)."""
        self.bundled: dict[str, dict[str, object]] = {}
        """Each bundled dependency's package.json (its `main` and `scripts`), by its folder:
        what `npm.capabilities` follows into it."""
        self.escapes: list[str] = []
        """Entries that would land outside `package/`: absolute paths, or links out of it
        (a publish carrying any is refused)."""
        self._problem: str | None = None
        self._finished = False

    @property
    def watched(self) -> bool:
        """Whether a watch reads files beside the scan (its reading then settles: `settle`)."""
        return self._watch is not None

    @property
    def problem(self) -> str | None:
        return self._problem or self._tarball.problem

    def feed(self, chunk: bytes) -> None:
        if self.problem is None:
            self._tarball.feed(chunk)

    def finish(self) -> str | None:
        if not self._finished:
            self._finished = True
            self._tarball.finish()
        if self.problem is not None:
            return f"its contents cannot be checked for install scripts: {self.problem}"
        found = [f"{folder}: {script}" if folder else script
                 for folder, scripts in sorted(self.scripts.items()) for script in scripts]
        found += [f"{folder}: binding.gyp (node-gyp rebuild)" if folder
                  else "binding.gyp (node-gyp rebuild)" for folder in self.gyp_runs()]
        if found:
            return (f"its tarball runs code at install ({', '.join(found)}), which the "
                    "registry's manifest does not show")
        return None

    def settle(self) -> None:
        """Every byte fed: the tar read to its end, and the watch's reading of the files
        settled where the bytes were read (a reading lane, `serve.relayhash`), never on the
        event loop: walking what 200,000 files run and what their code can do costs up to a
        second."""
        self.finish()
        if self._watch is not None:
            self._watch.settle()

    def gyp_runs(self) -> list[str]:
        """The package folders where a client runs `node-gyp rebuild` for a `binding.gyp`."""
        # The root: npm decides from the registry's manifest, not this package.json
        # (arborist rebuild.js: `const { gypfile, bin, scripts = {} } = pkg` with `pkg` the
        # registry's manifest, then `const isGyp = gypfile !== false && !install &&
        # !preinstall && await isNodeGypPackage(node.path)`); the abbreviated packument npm
        # asks for carries no `gypfile`, and yarn 1 ignores it (`if (!scripts.install &&
        # files.indexOf('binding.gyp') >= 0) scripts.install = 'node-gyp rebuild'`), so a
        # root binding.gyp runs whatever this package.json says. A bundled dependency is
        # read from disk (its own package.json), so its `gypfile: false` is honoured.
        return sorted(folder for folder in self.gyp
                      if not folder or folder not in self.gypfile_off)

    # -- the entries (tarball.EntryReader) ---------------------------------------------

    def entry(self, entry: Entry) -> int:
        if self.problem is not None:
            return 0
        if len(self.escapes) < _ESCAPES_KEPT and (_escapes(entry.path) or (
                entry.kind in ("Link", "SymbolicLink") and entry.linkpath is not None
                and _link_escapes(entry.path, entry.linkpath))):
            self.escapes.append(entry.path[:200])
        readings = _readings(entry)
        for folder, file in readings:
            where = f"{folder}/{file}" if folder else file
            if entry.kind in ("Link", "SymbolicLink"):
                # npm drops links; yarn 1 writes them, and follows one to read it
                self._problem = f"its {where} is a link"
                return 0
            if file == "binding.gyp":
                self.gyp.add(folder)
        if entry.placed is not None and "/" not in entry.placed \
                and entry.placed.lower().endswith(".gyp"):
            self.gyp_any.add("")
        manifests = {folder for folder, file in readings if file == "package.json"} \
            if readings else None
        if manifests and entry.kind in ("File", "OldFile", "ContiguousFile"):
            if entry.size > MAX_MANIFEST_BYTES:
                self._problem = f"a package.json is larger than {MAX_MANIFEST_BYTES} bytes"
                return 0
            self._reading = sorted(manifests)
            return entry.size if entry.size else self._empty(entry)
        if self._watch is not None and entry.placed is not None and entry.size:
            return self._watch.wants(entry.placed, entry.size)
        return 0

    def _empty(self, entry: Entry) -> int:
        self.data(entry, b"")
        return 0

    def data(self, entry: Entry, data: bytes) -> None:
        folders, self._reading = self._reading, None
        if folders is None:
            if self._watch is not None and entry.placed is not None:
                self._watch.read(entry.placed, data, entry.size)
            return
        try:
            document = parse_package_json(data)
        except PackageJsonError as error:
            if error.deeper:  # npm reads it, mirrorgate cannot: refused, not "runs nothing"
                self._problem = f"a package.json {error}"
                return
            document = None  # npm cannot parse it either: it runs nothing from it
        for folder in folders:
            # every copy of a folder's package.json counts (which one a client keeps varies)
            scripts = self.scripts.setdefault(folder, [])
            if isinstance(document, dict):
                scripts += [s for s in install_scripts(document) if s not in scripts]
                if document.get("gypfile") is False:
                    self.gypfile_off.add(folder)
            if not scripts:
                del self.scripts[folder]
            if not folder and entry.placed == "package.json":
                self.manifest = document if isinstance(document, dict) else None
            elif folder and isinstance(document, dict):
                self.bundled[folder] = {key: document[key] for key in ("main", "scripts")
                                        if key in document}


def scanned(tarball: bytes) -> ScriptScan:
    """`ScriptScan` over a whole tarball held in memory (the worker's download), finished:
    its verdict, its root package.json and its problem read from one pass."""
    scan = ScriptScan()
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        scan.feed(bytes(view[start:start + _STEP]))
    scan.finish()
    return scan


def scripts_in(tarball: bytes) -> str | None:
    """What `ScriptScan` finds in a whole tarball held in memory."""
    return scanned(tarball).finish()
