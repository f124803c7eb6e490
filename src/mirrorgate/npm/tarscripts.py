"""The install scripts a tarball itself declares, read as its bytes stream where the
install-scripts rule applies: its own and its bundled dependencies' `package.json` and
`binding.gyp` (gzip inflated, tar headers walked, data skipped, bounded). Pure, incremental.

The registry's manifest is what the publisher sent beside the tarball ("manifest confusion"):
yarn 1 runs a `postinstall` only the tarball's `package.json` has, npm a bundled dependency's.
"""

from __future__ import annotations

import posixpath
import zlib
from typing import Protocol

import orjson

from mirrorgate.npm.scripts import install_scripts

__all__ = ["BOMB_FROM", "BOMB_RATIO", "MAX_ENTRIES", "MAX_MANIFEST_BYTES", "MAX_UNPACKED_BYTES",
           "FileWatch", "ScriptScan", "declared_scripts", "scripts_in"]

MAX_MANIFEST_BYTES = 1024 * 1024
"""A root package.json larger than this cannot be read here, so the version is refused."""
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
"""Inflating further than this stops the scan, and the version is refused. Real tarballs stay
well under it (the largest unpack to a few hundred MB); inflating it costs about 0.3 s of CPU."""
BOMB_RATIO = 100
BOMB_FROM = 64 * 1024 * 1024
"""Past `BOMB_FROM` unpacked bytes, more than `BOMB_RATIO` unpacked bytes per compressed byte
is a compression bomb (a megabyte of zeros that inflates to a gigabyte): the scan stops and
the version is refused. JavaScript compresses 3 to 10 times, binaries 2 to 3."""
MAX_ENTRIES = 200_000
"""Tar entries read at most (each costs a few microseconds): more is refused. The packages
with the most files hold a few tens of thousands."""
_BLOCK = 512
_STEP = 256 * 1024
_FILE_TYPES = (b"0", b"\0", b"7")
_PAX_TYPES = (b"x", b"X")  # node-tar reads the old Solaris `X` as a pax header too
_LONGNAME_TYPES = (b"L", b"N")  # GNU's long name, and its old form
_LINK_TYPES = (b"1", b"2")
_ESCAPES_KEPT = 20


def _escapes(path: str) -> bool:
    """Whether an entry's path (as the tar names it, `package/` first) leaves the package's
    folder: absolute, or with a `..` in it."""
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        return True
    return any(part == ".." for part in path.replace("\\", "/").split("/"))


def _link_escapes(path: str, target: bytes) -> bool:
    """Whether a link entry points outside the package's folder: a symbolic link's target is
    read beside the link, a hard link's (as tar records it) from the archive's root."""
    text = target.decode("utf-8", "replace").replace("\\", "/")
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        return True
    inside = path.partition("/")[2]  # past `package/`
    folder = inside.rsplit("/", 1)[0] if "/" in inside else ""
    placed = posixpath.normpath(posixpath.join(folder, text))
    return placed == ".." or placed.startswith("../")


def _placed(parts: list[str]) -> tuple[str, str] | None:
    parts = [part for part in parts if part not in ("", ".")]
    if not parts:
        return None
    *folder, file = parts
    bundled = (len(folder) >= 2 and folder[-2] == "node_modules") or (
        len(folder) >= 3 and folder[-3] == "node_modules" and folder[-2].startswith("@"))
    # lower case: on a case-insensitive disk (macOS) PACKAGE.JSON is package.json
    return ("/".join(folder), file.lower()) if not folder or bundled else None


def _package_file(path: str) -> tuple[str, str] | None:
    """(the package directory, the file name, lower-cased) of a path that is a package's own
    file: at the root, or of a bundled dependency (`node_modules/x/`, `node_modules/@s/x/`,
    nested), whose install scripts npm runs as well; None for any other path.

    Clients drop the first path component (`package/`, whatever it is called). Whether an
    empty or `.` component counts as that first one differs between extractors, so both
    readings are taken and a path is a package file when either says so: `/package.json`,
    `package//package.json` and `./package/package.json` all count."""
    parts = path.split("/")
    after = [part for part in parts if part not in ("", ".")][1:]
    return _placed(after) or _placed(parts[1:])


def _octal(field: bytes) -> int | None:
    if field and field[0] & 0x80:  # base-256, as GNU tar writes large sizes
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return None


def _checksum_ok(header: bytes) -> bool:
    # unsigned only, as node-tar checks it: a header it rejects is skipped by 512 bytes, so a
    # header accepted here that node-tar rejects would hide the blocks after it
    stored = _octal(header[148:156])
    return stored is not None and stored == sum(header[:148]) + 8 * 0x20 + sum(header[156:])


def _pax_records(data: bytes) -> dict[bytes, bytes]:
    """The records of a pax extended header (the last of a key wins)."""
    records: dict[bytes, bytes] = {}
    for record in data.split(b"\n"):
        _length, _, field = record.partition(b" ")
        key, equals, value = field.partition(b"=")
        if equals:
            records[key] = value
    return records


def declared_scripts(manifest: bytes) -> list[str]:
    """The install scripts a package.json's bytes declare (npm's three keys)."""
    try:
        document = orjson.loads(manifest)
    except orjson.JSONDecodeError:
        return []  # npm cannot read it either, so it runs nothing from it
    return install_scripts(document) if isinstance(document, dict) else []


class FileWatch(Protocol):
    """Other files a scan's reader wants (the release signals read JavaScript files): how many
    of a regular file's first bytes to hand over (0: none), then those bytes."""

    def wants(self, path: str, size: int) -> int: ...

    def read(self, path: str, data: bytes, size: int) -> None: ...


class ScriptScan:
    """Feed a tarball's bytes in order; `finish()` returns why its contents run code at install
    (a sentence), or None. Unreadable contents are refused too: what cannot be read here
    cannot be shown to run nothing. `watch` is handed the files it asks for on the way."""

    def __init__(self, watch: FileWatch | None = None) -> None:
        self._watch = watch
        self._watched = ""  # the path of the file being handed to `watch`
        self._inflate: zlib._Decompress | None = None
        self._raw: bool | None = None  # plain tar (no gzip): npm takes those too
        self._gap = bytearray()  # the first bytes of a gzip member, until its magic is known
        self._trailing = False
        self._buffer = bytearray()
        self._skip = 0  # bytes of entry data (and padding) still to pass over
        self._capture: bytearray | None = None
        self._capture_left = 0
        self._capture_kind = ""  # "package.json", "pax" or "longname"
        self._next_path: str | None = None
        self._folder = ""  # the package directory of the package.json being captured
        self._watched_size = 0
        self._unpacked = 0
        self._compressed = 0
        self._entries = 0
        self.scripts: dict[str, list[str]] = {}  # package directory ("" the root) -> scripts
        self.gyp: set[str] = set()
        self.gypfile_off: set[str] = set()
        self.manifest: dict[str, object] | None = None
        """The root package.json, parsed (the last one in the tar wins, as on disk)."""
        self.escapes: list[str] = []
        """Entries that would land outside `package/`: a `..` or absolute path, or a link to
        one (a publish carrying any is refused)."""
        self.problem: str | None = None

    def feed(self, chunk: bytes) -> None:
        if self.problem is not None or not chunk:
            return
        self._compressed += len(chunk)
        if self._raw:
            self._tar(chunk)
            return
        pending = chunk
        try:
            while pending and self.problem is None:
                if self._inflate is None:  # the start, or between two gzip members
                    self._gap += pending
                    pending = b""
                    if self._trailing or len(self._gap) < 2:
                        return
                    gzipped = self._gap.startswith(b"\x1f\x8b")
                    if self._raw is None and not gzipped:
                        self._raw = True  # plain tar: npm takes those too
                        pending, self._gap = bytes(self._gap), bytearray()
                        self._tar(pending)
                        return
                    self._raw = False
                    if not gzipped:
                        self._trailing = True  # bytes after the last member: gunzip ignores
                        return
                    pending, self._gap = bytes(self._gap), bytearray()
                    self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out = self._inflate.decompress(pending, _STEP)
                self._tar(out)
                if not self._inflate.eof:
                    pending = self._inflate.unconsumed_tail
                    continue
                # gunzip reads concatenated members one after another, and so does node's
                # zlib: a second member may carry the entries a first one hides
                pending, self._inflate = self._inflate.unused_data, None
        except zlib.error:
            self.problem = "its gzip stream does not inflate"

    def finish(self) -> str | None:
        if self.problem is None and self._inflate is not None:
            self.problem = "its gzip stream ends before its end"
        if self.problem is None and self._capture is not None:
            self.problem = "its tar stream ends inside an entry"
        if self.problem is not None:
            return f"its contents cannot be checked for install scripts: {self.problem}"
        found = [f"{folder}: {script}" if folder else script
                 for folder, scripts in sorted(self.scripts.items()) for script in scripts]
        # node-gyp rebuild runs for a binding.gyp unless `gypfile: false` says not to
        found += [f"{folder}: binding.gyp (node-gyp rebuild)" if folder
                  else "binding.gyp (node-gyp rebuild)"
                  for folder in sorted(self.gyp - self.gypfile_off)]
        if found:
            return (f"its tarball runs code at install ({', '.join(found)}), which the "
                    "registry's manifest does not show")
        return None

    def _tar(self, data: bytes) -> None:
        self._unpacked += len(data)
        if self._unpacked > MAX_UNPACKED_BYTES:
            self.problem = f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes"
            return
        if self._unpacked > BOMB_FROM and self._unpacked > BOMB_RATIO * self._compressed:
            self.problem = (f"it is a compression bomb: {self._compressed} bytes inflate to "
                            f"more than {self._unpacked} (over {BOMB_RATIO} times as many)")
            return
        view = memoryview(data)
        while view and self.problem is None:
            if self._skip:
                taken = min(self._skip, len(view))
                if self._capture is not None and self._capture_left:
                    keep = min(taken, self._capture_left)
                    self._capture += view[:keep]
                    self._capture_left -= keep
                    if not self._capture_left:
                        self._captured()
                self._skip -= taken
                view = view[taken:]
                continue
            need = _BLOCK - len(self._buffer)
            self._buffer += view[:need]
            view = view[need:]
            if len(self._buffer) == _BLOCK:
                header, self._buffer = bytes(self._buffer), bytearray()
                self._header(header)

    def _header(self, header: bytes) -> None:
        # node-tar skips a zero block or one whose checksum fails, 512 bytes only, and goes on
        if header == b"\0" * _BLOCK or not _checksum_ok(header):
            return
        self._entries += 1
        if self._entries > MAX_ENTRIES:
            self.problem = f"it holds more than {MAX_ENTRIES} entries"
            return
        size = _octal(header[124:136])
        if size is None:
            self.problem = "a tar header has an unreadable size"
            return
        kind = header[156:157]
        name = header[0:100].split(b"\0", 1)[0]
        # the prefix field is POSIX ustar's only (GNU tar keeps times there)
        if header[257:265] == b"ustar\x0000" and header[345:500].strip(b"\0"):
            name = header[345:500].split(b"\0", 1)[0] + b"/" + name
        path = self._next_path if self._next_path is not None else name.decode("utf-8",
                                                                                 "replace")
        self._skip = size + (-size) % _BLOCK
        if kind in _PAX_TYPES or kind in _LONGNAME_TYPES or kind == b"g":
            self._start(size, "pax" if kind in _PAX_TYPES else
                        "global" if kind == b"g" else "longname")
            return
        self._next_path = None
        if kind == b"K":
            return
        if len(self.escapes) < _ESCAPES_KEPT and (_escapes(path) or (
                kind in _LINK_TYPES
                and _link_escapes(path, header[157:257].split(b"\0", 1)[0]))):
            self.escapes.append(path[:200])
        if self._watch is not None and kind in _FILE_TYPES and size:
            keep = self._watch.wants(path, size)
            if keep > 0:
                # never a package.json or binding.gyp (a watch asks for code), so no capture
                # below is skipped; the rest of the entry is passed over as data
                self._watched = path
                self._capture, self._capture_left = bytearray(), min(keep, size)
                self._capture_kind, self._watched_size = "watched", size
                return
        found = _package_file(path)
        if found is None or found[1] not in ("package.json", "binding.gyp"):
            return
        folder, file = found
        where = f"{folder}/{file}" if folder else file
        if kind in _LINK_TYPES:
            self.problem = f"its {where} is a link"
        elif kind not in _FILE_TYPES:
            return
        elif file == "binding.gyp":
            self.gyp.add(folder)
        elif size > MAX_MANIFEST_BYTES:
            self.problem = f"its {where} is larger than {MAX_MANIFEST_BYTES} bytes"
        else:
            self._folder = folder
            self._start(size, "package.json")

    def _start(self, size: int, kind: str) -> None:
        if size > MAX_MANIFEST_BYTES:
            self.problem = f"a tar {kind} header is larger than {MAX_MANIFEST_BYTES} bytes"
            return
        self._capture, self._capture_left, self._capture_kind = bytearray(), size, kind
        if not size:
            self._captured()

    def _captured(self) -> None:
        data, kind = bytes(self._capture or b""), self._capture_kind
        self._capture = None
        if kind in ("pax", "global"):
            records = _pax_records(data)
            if b"size" in records:
                # node-tar takes an entry's size from pax (a global one included): the blocks
                # it then reads as headers are not the ones the ustar size says; no npm
                # tarball needs it (only files over 8 GiB do)
                self.problem = "a pax header overrides an entry's size"
            elif kind == "pax" and b"path" in records:
                self._next_path = records[b"path"].decode("utf-8", "replace")
        elif kind == "longname":
            self._next_path = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind == "watched":
            if self._watch is not None:
                self._watch.read(self._watched, data, self._watched_size)
        else:
            # every root package.json counts (the last one extracted wins on disk)
            scripts = self.scripts.setdefault(self._folder, [])
            scripts += [s for s in declared_scripts(data) if s not in scripts]
            if not scripts:
                del self.scripts[self._folder]
            try:
                document = orjson.loads(data)
            except orjson.JSONDecodeError:
                document = None
            if isinstance(document, dict) and document.get("gypfile") is False:
                self.gypfile_off.add(self._folder)
            if not self._folder:
                self.manifest = document if isinstance(document, dict) else None


def scripts_in(tarball: bytes) -> str | None:
    """`ScriptScan` over a whole tarball held in memory (the worker's download)."""
    scan = ScriptScan()
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        scan.feed(bytes(view[start:start + _STEP]))
    return scan.finish()
