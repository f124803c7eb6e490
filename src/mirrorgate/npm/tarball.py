"""A package tarball's entries as npm unpacks them: one incremental, bounded, pure reader that
every check of a tarball's contents reads through (the install-scripts scan, the release
signals' reading, the publish checks), so none of them sees other files than npm writes.

It follows node-tar 7 (npm's `tar`, called by pacote's `#tarxOptions`: `strip: 1`, links
and all but regular files filtered out, `.gitignore` renamed) header by header, decompressing
what node-tar detects (gzip, zstd by its magic; anything else is read as plain tar). Where
node-tar and another client's reader could disagree (a pax size unlike the ustar size, a
checksum node-tar skips, a path it strips), the tarball is refused with the reason instead.
tests/npm/test_tarball_differential.py holds it to node-tar and pacote themselves.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Protocol

import zstandard
from isal import isal_zlib

from mirrorgate.errors import MirrorgateError

__all__ = ["BOMB_FROM", "BOMB_RATIO", "MAX_DEPTH", "MAX_ENTRIES", "MAX_FRAMES", "MAX_META_BYTES",
           "MAX_PATH_BYTES", "MAX_PAX_KEYED", "MAX_UNPACKED_BYTES", "Entry", "EntryReader",
           "TarballReader"]

MAX_UNPACKED_BYTES = 512 * 1024 * 1024
"""Decompressing further than this stops the reading, and the tarball is refused. Real
tarballs stay well under it (the largest unpack to a few hundred MB)."""
BOMB_RATIO = 100
BOMB_FROM = 64 * 1024 * 1024
"""Past `BOMB_FROM` unpacked bytes, more than `BOMB_RATIO` unpacked bytes per compressed byte
is a compression bomb: the reading stops. JavaScript compresses 3 to 10 times, binaries 2 to
3 (node-tar itself aborts past 1000 times)."""
MAX_ENTRIES = 200_000
"""Tar headers read at most: more is refused. The largest packages hold a few tens of
thousands of files."""
MAX_META_BYTES = 1024 * 1024
"""node-tar's `maxMetaEntrySize`: a pax or long-name header larger than this is skipped there
(its path not applied) and would be applied by others, so it is refused here."""
MAX_DEPTH = 1024
"""node-tar's `DEFAULT_MAX_DEPTH`: a deeper path is skipped there, written by others."""
MAX_FRAMES = 4096
"""gzip members or zstd frames (skippable ones too) read at most: more is refused. node's
zlib reads any number one after another; npm pack writes one member, and an empty one costs
a decompressor's start and unpacks nothing, so only this bounds what they cost."""
MAX_PATH_BYTES = 32 * 1024 * 1024
"""Bytes of the paths of the files npm writes, all added up, read at most: more is refused.
node-tar has no such bound; the largest packages' paths add up to a few MB."""
MAX_PAX_KEYED = 3 * MAX_ENTRIES
"""pax records that may set a path, link, size or type (a line holding `path=`, `size=` or
`type=`), read at most in a tarball: more is refused. node-tar reads any number; old npm's
pax headers hold three a file (`path`, `size`, `NODETAR.type`), so this is its shape at the
bound on entries (about a second of CPU)."""

_BLOCK = 512
_STEP = 256 * 1024
_GZIP_STEP = 16 * 1024  # compressed bytes inflated a call: what a member's end copies at most
_ZSTD_STEP = 128  # zstd has no output bound per call: a few bytes can stand for 128 KiB
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
# node-tar's types.js, by type flag ('' is a NUL flag)
_NAMES = {"0": "File", "": "OldFile", "1": "Link", "2": "SymbolicLink",
          "3": "CharacterDevice", "4": "BlockDevice", "5": "Directory", "6": "FIFO",
          "7": "ContiguousFile", "g": "GlobalExtendedHeader", "x": "ExtendedHeader",
          "A": "SolarisACL", "D": "GNUDumpDir", "I": "Inode", "K": "NextFileHasLongLinkpath",
          "L": "NextFileHasLongPath", "M": "ContinuationFile", "N": "OldGnuLongPath",
          "S": "SparseFile", "V": "TapeVolumeHeader", "X": "OldExtendedHeader"}
# `normalFsTypes`: the only types a pax header or a long name applies to
_NORMAL_FS = frozenset(("0", "", "1", "2", "3", "4", "5", "6", "7", "D"))
_META = frozenset(("NextFileHasLongLinkpath", "NextFileHasLongPath", "OldGnuLongPath",
                   "GlobalExtendedHeader", "ExtendedHeader", "OldExtendedHeader"))
_READ = frozenset(("File", "OldFile", "ContiguousFile", "Link", "SymbolicLink",
                   "CharacterDevice", "BlockDevice", "Directory", "FIFO", "GNUDumpDir"))
_LINKS = frozenset(("Link", "SymbolicLink"))
_FILES = frozenset(("File", "OldFile", "ContiguousFile"))  # pacote's `/File$/`
# JavaScript's `/\0.*/`: `.` stops at a line terminator, so only up to one is cut
_NUL_TAIL = re.compile("\x00[^\n\r\u2028\u2029]*")
_NUL_TO_END = re.compile("\x00[^\n\r\u2028\u2029]*\\Z")
_JS_SPACE = "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
            "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_INT = re.compile(r"[+-]?\d+")
_JS_OCTAL = re.compile(r"[+-]?[0-7]+")
_OCTAL_BYTES = re.compile(rb"[\t\n\v\f\r ]*([+-]?[0-7]+)")
_DRIVE = re.compile(r"[A-Za-z]:")
# a path inside the package that strip, the root and `..` checks and resolve leave as it is:
# no empty, `.` or `..` component, no backslash or NUL, no trailing slash, no `.gitignore`
_PLAIN_PATH = re.compile(r"(?:[^/\\.\0][^/\\\0]*/)*[^/\\.\0][^/\\\0]*")
_TERMINATOR = re.compile(b"[\n\r]|\xe2\x80[\xa8\xa9]")
_JS_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Infinity")
_JS_RADIX = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")
_PAX_KEYED = re.compile("(?:path|size|type)=")  # in every line a kept key can be read from
_SAFE = 2**53 - 1

# isal's stub types `error` as an instance of Exception; it is the class IsalError
_ISAL_ERROR: type[Exception] = isal_zlib.error  # type: ignore[assignment]


class _RefusedError(MirrorgateError):
    """Why the tarball is refused: raised where the reading stops."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One tar entry as node-tar reads it. `kind`: node-tar's type name (`File`,
    `SymbolicLink`, `Directory`...); `path` and `linkpath`: node-tar's, pax records and GNU
    long names applied, `package/` still first; `placed`: where npm writes it inside the
    package folder (`lib/index.js`), None when npm does not write it (links, folders, the
    first component alone); `size`: its data's bytes."""

    kind: str
    path: str
    linkpath: str | None
    size: int
    placed: str | None


class EntryReader(Protocol):
    """What a reader of the entries does with each: `entry()` says how many of its first
    data bytes it wants (0: none), `data()` then hands them over."""

    def entry(self, entry: Entry) -> int: ...

    def data(self, entry: Entry, data: bytes) -> None: ...


def _cut_nul(text: str) -> str:
    return _NUL_TAIL.sub("", text, count=1)


def _string(block: bytes, start: int, size: int) -> str:
    # header.js decString: `buf.subarray(...).toString('utf8').replace(/\0.*/, '')`
    field = block[start:start + size]
    text, nul, rest = field.partition(b"\0")
    if not nul or rest.count(0) == len(rest) or not _TERMINATOR.search(rest):
        return text.decode("utf-8", "replace")  # the usual field: all cut from its first NUL
    return _cut_nul(field.decode("utf-8", "replace"))


def _number(block: bytes, start: int, size: int) -> int | None:
    """header.js decNumber: base-256 when the high bit is set (only 0x80 and 0xff lead one;
    node-tar throws on any other, and on a value past 2^53), else `parseInt(..., 8)`."""
    field = block[start:start + size]
    if field[0] & 0x80:
        if field[0] == 0x80:
            value = int.from_bytes(field[1:], "big")
        elif field[0] == 0xFF:
            value = int.from_bytes(field, "big", signed=True)
        else:
            raise _RefusedError("a tar header has a number node-tar cannot decode")
        if abs(value) > _SAFE:
            raise _RefusedError("a tar header has a number past 2^53")
        return value
    if field.isascii():
        # parseInt reads the octal digits after leading spaces and stops at anything else, so
        # what the `\0` cut removes after them never matters; only non-ASCII spaces need the
        # decoding below
        fast = _OCTAL_BYTES.match(field)
        return int(fast.group(1), 8) if fast else None
    text = _NUL_TO_END.sub("", field.decode("utf-8", "replace"), count=1).strip(_JS_SPACE)
    found = _JS_OCTAL.match(text)
    return int(found.group(), 8) if found else None


def _byte_sum(data: bytes) -> int:
    """The sum of at most 256 bytes, as `sum(data)` (a header's checksum) at a third of its
    CPU: Adler-32's first half is 1 plus that sum modulo 65521, which 256 bytes of 0xff
    (65,280) stay under."""
    return (zlib.adler32(data) & 0xFFFF) - 1


def _decodable(block: bytes, start: int, size: int) -> None:
    """A numeric field npm decodes only to throw on it (mode, owner, times): refused where
    node-tar throws, that is where it is base-256 and not decodable."""
    if block[start] & 0x80:
        _number(block, start, size)


def _js_number(text: str) -> float | None:
    """JavaScript's `+text` for what a pax record's value can hold; None for NaN."""
    text = text.strip(_JS_SPACE)
    if not text:
        return 0
    if (radix := _JS_RADIX.fullmatch(text)) is not None:
        base = {"x": 16, "o": 8, "b": 2}[radix.group(1).lower()]
        try:
            return int(radix.group(2), base)
        except ValueError:
            return None
    if _JS_DECIMAL.fullmatch(text):
        return float(text)
    return None


def _pax(text: str) -> dict[str, object]:
    """pax.js parseKV, for the keys that change what npm reads (`path`, `linkpath`, `size`,
    `type`; the others set owners, times, comments): each record must be exactly as long as
    its length prefix says (in UTF-8 bytes of the decoded text: `if (n !==
    Buffer.byteLength(line) + 1) return set`), or it is dropped; the last of a key wins.
    Only the lines that can hold one of those keys are read, so a header of a million short
    records costs a search, not a million parses (`MAX_PAX_KEYED` bounds the rest)."""
    records: dict[str, object] = {}
    if text.endswith("\n"):  # `.replace(/\n$/, '')`
        text = text[:-1]
    last = -1
    for found in _PAX_KEYED.finditer(text):
        start = text.rfind("\n", 0, found.start()) + 1
        if start <= last:
            continue  # a second key on the line already read
        end = text.find("\n", found.end())
        last = start
        _pax_record(text[start:] if end < 0 else text[start:end], records)
    return records


def _pax_record(line: str, records: dict[str, object]) -> None:
    """One line of a pax header, read into `records` when it is a valid record of a key
    `_pax` keeps."""
    found = _JS_INT.match(line.lstrip(_JS_SPACE))  # parseInt(line, 10)
    if found is None or int(found.group()) != len(line.encode("utf-8")) + 1:
        return
    cut = len(str(int(found.group()))) + 1  # `line.slice((n + ' ').length)`, in UTF-16
    rest = line[cut:] if line.isascii() else line.encode("utf-16-le", "surrogatepass")[
        2 * cut:].decode("utf-16-le", "surrogatepass")
    key, _, value = rest.partition("=")
    # node-tar renames `SCHILY.dev`, `.ino` and `.nlink` only: none of the keys kept here
    value = _cut_nul(value)
    if key in ("path", "linkpath", "type"):
        records[key] = value
    elif key == "size":
        size = _js_number(value)
        if size is not None and size >= 0:
            records[key] = size


def _basename(path: str) -> str:
    # node's path.basename ignores trailing separators; posixpath's does not
    trimmed = path.rstrip("/")
    return trimmed.rsplit("/", 1)[-1] if trimmed else ""


def _normalized(path: str) -> str:
    # path.resolve(cwd, p) relative to cwd: empty and `.` components dropped (no `..` here)
    return "/".join(part for part in path.split("/") if part not in ("", "."))


_NO_RECORDS: dict[str, object] = {}  # no pax records apply (read, never written)

_Folder = dict[str, "_Folder | None"]
"""The files written under a folder, by name: a folder's own, or None for a file."""
_ABSENT: _Folder = {}  # `dict.get`'s answer for a name not there yet


@dataclass(slots=True)
class _Header:
    kind: str
    flag: str
    path: str
    linkpath: str
    size: int


class TarballReader:
    """Feed a tarball's bytes in order, then `finish()`; `reader` is told each entry on the
    way. `problem` says why the tarball is refused (what npm would do with it cannot be known
    here, or another client would do something else), after which nothing more is read."""

    def __init__(self, reader: EntryReader) -> None:
        self._reader = reader
        self.problem: str | None = None
        self._mode = ""  # "", then "gzip", "zstd" or "tar"
        self._head = bytearray()  # the first bytes, until the compression is known
        self._inflate: isal_zlib.Decompress | None = None
        self._dctx: zstandard.ZstdDecompressor | None = None  # one context for every frame
        self._zstd: zstandard.ZstdDecompressionObj | None = None
        self._between = b""  # the first byte after a gzip member, while it is all there is
        self._zeros = False  # zeros followed a gzip member: nothing else may
        self._frames = 0
        self._compressed = 0
        self._unpacked = 0
        self._entries = 0
        self._buffer = bytearray()
        self._skip = 0  # data (and padding) bytes of the current entry still to pass over
        self._capture: list[bytes] | None = None  # the captured data's pieces, joined once
        self._capture_left = 0
        self._current: Entry | None = None  # the entry whose data is captured
        self._meta = ""  # the kind of the meta header whose data is captured
        self._ex: dict[str, object] | None = None
        self._keyed = 0  # pax records read that may set a path, link, size or type
        self._null = False
        self._eof = False
        self._npmignores: set[str] = set()
        self._placed_bytes = 0
        self._tree: _Folder = {}  # the files written, in their folders (`_claim`)
        self._parent, self._folder = "", self._tree  # the last file's folder, and its names

    # -- bytes in ----------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        if self.problem is not None or not chunk:
            return
        self._compressed += len(chunk)
        try:
            self._feed(chunk)
        except _RefusedError as refused:
            self.problem = str(refused)
        except (zlib.error, _ISAL_ERROR):
            self.problem = "its gzip stream does not inflate"
        except zstandard.ZstdError:
            self.problem = "its zstd stream does not decompress"

    def finish(self) -> None:
        """The end of the bytes: a stream or an entry cut short is refused."""
        if self.problem is not None:
            return
        try:
            if not self._mode:  # under 4 bytes: node-tar reads them as (no) tar
                self._mode = "tar"
                self._tar(bytes(self._head))
            if self._inflate is not None or self._between:
                raise _RefusedError("its gzip stream ends before its end")
            if self._zstd is not None:
                raise _RefusedError("its zstd stream ends before its end")
            if self._capture is not None or self._skip or (self._buffer and not self._eof):
                # node-tar warns "Truncated input" and keeps what it had
                raise _RefusedError("its tar stream ends inside an entry or a header")
        except _RefusedError as refused:
            self.problem = str(refused)

    def _feed(self, chunk: bytes) -> None:
        if not self._mode:
            self._head += chunk
            if len(self._head) < len(_ZSTD):
                return
            # parse.js: gzip by its two bytes, zstd by its four, anything else plain tar
            # (brotli only from a `.tbr` file name, which a stream never has)
            chunk, self._head = bytes(self._head), bytearray()
            self._mode = ("gzip" if chunk.startswith(_GZIP) else
                          "zstd" if chunk.startswith(_ZSTD) else "tar")
        if self._mode == "tar":
            self._tar(chunk)
        elif self._mode == "gzip":
            self._gunzip(chunk)
        else:
            self._unzstd(chunk)

    def _frame(self) -> None:
        """A gzip member or zstd frame begins."""
        self._frames += 1
        if self._frames > MAX_FRAMES:
            raise _RefusedError(f"it holds more than {MAX_FRAMES} gzip members or zstd frames "
                                "(npm pack writes one)")

    def _gunzip(self, data: bytes) -> None:
        # `data` is read through a view, a slice at a time: a member's end copies what follows
        # it in the slice (`unused_data`), so thousands of empty members in one chunk would
        # each copy the rest of the chunk
        view = memoryview(data)
        at = 0
        while at < len(view) and self.problem is None:
            if self._zeros:
                # node's zlib reads on only where a non-zero byte follows a member: zeros are
                # padding, and anything after them is ignored there
                if bytes(view[at:]).count(0) != len(view) - at:
                    raise _RefusedError("bytes follow its gzip stream after zeros")
                return
            if self._inflate is None:  # between two gzip members
                head = self._between + bytes(view[at:at + 2 - len(self._between)])
                at += len(head) - len(self._between)
                if head[:1] == b"\0":
                    self._zeros, self._between = True, b""
                    if head[1:2] not in (b"", b"\0"):
                        raise _RefusedError("bytes follow its gzip stream after zeros")
                    continue
                if len(head) < 2:
                    self._between = head
                    return
                self._between = b""
                if head != _GZIP:
                    raise _RefusedError("bytes that are not a gzip member follow its gzip stream")
                self._frame()
                # ISA-L's inflate: zlib's format and interface at a third of its CPU (the
                # release signals inflate every first pull, and the version before it)
                self._inflate = isal_zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._tar(self._inflate.decompress(head))  # a header's first bytes: no output
            piece = bytes(view[at:at + _GZIP_STEP])
            at += len(piece)
            at -= self._inflate_piece(piece)

    def _inflate_piece(self, piece: bytes) -> int:
        """Inflate `piece` into the tar reader, `_STEP` bytes out at a time; returns how many
        of its bytes follow the member's end (node's zlib reads them as the next member)."""
        inflate = self._inflate
        assert inflate is not None
        while True:
            out = inflate.decompress(piece, _STEP)
            self._tar(out)
            if inflate.eof:
                self._inflate = None
                return len(inflate.unused_data)
            piece = inflate.unconsumed_tail
            if not piece and len(out) < _STEP:  # a full output may leave more inside
                return 0

    def _unzstd(self, data: bytes) -> None:
        view = memoryview(data)
        at = 0
        while at < len(view) and self.problem is None:
            if self._zstd is None:  # a frame ended: node's zstd reads the next one
                self._frame()
                if self._dctx is None:
                    self._dctx = zstandard.ZstdDecompressor()
                # a new frame on the same context (a reset, not a new context's allocation)
                self._zstd = self._dctx.decompressobj()
            piece = bytes(view[at:at + _ZSTD_STEP])
            at += len(piece)
            self._tar(self._zstd.decompress(piece))
            if self._zstd.eof:
                at -= len(self._zstd.unused_data)  # the next frame starts in this piece
                self._zstd = None

    # -- tar blocks --------------------------------------------------------------------

    def _tar(self, data: bytes) -> None:
        if not data:
            return
        self._unpacked += len(data)
        if self._unpacked > MAX_UNPACKED_BYTES:
            raise _RefusedError(f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        if self._unpacked > BOMB_FROM and self._unpacked > BOMB_RATIO * self._compressed:
            raise _RefusedError(f"it is a compression bomb: {self._compressed} bytes inflate to "
                           f"more than {self._unpacked} (over {BOMB_RATIO} times as many)")
        view = memoryview(data)
        while view:
            if self._skip:
                taken = min(self._skip, len(view))
                if self._capture is not None and self._capture_left:
                    keep = min(taken, self._capture_left)
                    # a piece that is the whole chunk is kept as it is (a large file's middle),
                    # others copied once: the data is copied once more, when joined
                    self._capture.append(data if keep == len(view) == len(data)
                                         and type(data) is bytes else bytes(view[:keep]))
                    self._capture_left -= keep
                    if not self._capture_left:
                        self._captured()
                self._skip -= taken
                view = view[taken:]
                continue
            if not self._buffer and len(view) >= _BLOCK:
                block = bytes(view[:_BLOCK])  # a header whole in the chunk (most): unbuffered
                view = view[_BLOCK:]
            else:
                need = _BLOCK - len(self._buffer)
                self._buffer += view[:need]
                view = view[need:]
                if len(self._buffer) < _BLOCK:
                    continue
                block, self._buffer = bytes(self._buffer), bytearray()
            if self._eof:
                self._after_end(block)
            else:
                self._block(block)

    def _after_end(self, block: bytes) -> None:
        # node-tar stops at two zero blocks; tar-stream (yarn 1) reads on past them
        try:
            found = block.count(0) != _BLOCK and self._decode(block, checked=False)
        except _RefusedError:
            return  # not a header anyone reads
        if found:
            raise _RefusedError("an entry follows the end-of-archive blocks: npm stops there, "
                           "other clients read it")

    def _decode(self, block: bytes, *, checked: bool = True) -> _Header | None:
        """header.js decode, for a block that is neither null nor refused; None for a null
        block (node-tar's `nullBlock`: no checksum, every other byte zero)."""
        code = block[156]  # decString of one byte: NUL is '', a byte past ASCII U+FFFD
        flag = chr(code) if 0 < code < 0x80 else "" if not code else "\ufffd"
        normal = flag in _NORMAL_FS
        ex = self._ex if normal and self._ex is not None else _NO_RECORDS
        # every numeric field decoded, so a header node-tar throws on is refused here (only
        # a base-256 one, its high bit set, can throw)
        if block[100] & 0x80 or block[108] & 0x80 or block[116] & 0x80 or block[136] & 0x80:
            for start, size in ((100, 8), (108, 8), (116, 8), (136, 12)):
                _decodable(block, start, size)
        ustar_size = _number(block, 124, 12)
        checksum = _number(block, 148, 12)
        total = 8 * 0x20 + _byte_sum(block[:148]) + _byte_sum(block[156:412]) \
            + _byte_sum(block[412:])
        if checksum is None and total == 8 * 0x20:
            return None
        if total != checksum:
            if not checked:
                return None
            raise _RefusedError("a tar header's checksum is wrong: npm skips the block and reads "
                           "its data as headers, other clients stop")
        path = _string(block, 0, 100)
        if isinstance(ex.get("path"), str):
            path = str(ex["path"])
        ustar = block[257:265] == b"ustar\x0000"
        if ustar:
            if block[329] & 0x80 or block[337] & 0x80 or (not block[475] and (
                    block[476] & 0x80 or block[488] & 0x80)):
                for start in (329, 337) + (() if block[475] else (476, 488)):
                    _decodable(block, start, 8 if start < 345 else 12)
            prefix = _string(block, 345, 155 if block[475] else 130)
            if block[475] or prefix:
                path = f"{prefix}/{path}"
        kind = _NAMES.get(flag, "Unsupported")
        if kind == "OldFile":
            kind = "File"  # `this.#type = t || '0'`
        if ustar_size is None and not block[124:136].strip(b"\0 "):
            ustar_size = 0  # an empty field: node-tar's `header.size ?? 0`, 0 to every reader
        if ustar_size is None or ustar_size < 0:
            raise _RefusedError("a tar header's size is not a number")
        size = ustar_size
        if "size" in ex and ex["size"] != ustar_size:
            # node-tar takes the pax size, a naive reader the ustar one: the blocks each
            # reads as the next header differ (old npm's pax headers repeat the ustar size)
            raise _RefusedError("a pax header's size is not the entry's ustar size")
        if kind == "File" and path.endswith("/"):
            kind = "Directory"  # node-tar reads a file named like a folder as one
        if kind == "Directory" and size:  # `if (this.#type === '5') this.size = 0`
            raise _RefusedError("a folder entry carries data, which npm reads as headers")
        return _Header(kind, flag, path, _string(block, 157, 100), size)

    def _block(self, block: bytes) -> None:
        header = self._decode(block)
        if header is None:
            # parse.js: `if (this[SAW_NULL_BLOCK]) { this[SAW_EOF] = true` (two in a row)
            self._eof, self._null = self._null, True
            return
        self._null = False
        self._entries += 1
        if self._entries > MAX_ENTRIES:
            raise _RefusedError(f"it holds more than {MAX_ENTRIES} entries")
        kind = header.kind
        if not header.path:
            raise _RefusedError("a tar header has no path, which npm skips by one block")
        if kind in _LINKS and not header.linkpath:
            raise _RefusedError("a link entry has no target, which npm skips by one block")
        if kind not in _LINKS and kind not in ("ExtendedHeader", "GlobalExtendedHeader") \
                and header.linkpath:
            raise _RefusedError("a non-link entry has a link target, which npm skips by one block")
        self._skip = header.size + (-header.size) % _BLOCK
        if kind in _META:
            if header.size > MAX_META_BYTES:  # `entry.size > this.maxMetaEntrySize`: ignored
                raise _RefusedError(f"a pax or long-name header is larger than {MAX_META_BYTES} "
                               "bytes, which npm ignores")
            if header.size:  # an empty one changes nothing in node-tar
                self._meta = kind
                self._start_capture(header.size, None)
            return
        ex = self._ex
        self._ex = None  # parse.js, for an entry that is not meta: `this[EX] = undefined`
        linkpath: str | None = header.linkpath or None
        path = header.path  # the pax path over the prefix: ReadEntry slurps `ex` last
        if ex:
            if isinstance(ex.get("linkpath"), str):
                linkpath = str(ex["linkpath"])
            if isinstance(ex.get("path"), str):
                path = str(ex["path"])
        entry = Entry(kind, path, linkpath, header.size,
                      self._placed(kind, path) if kind in _READ else None)
        wanted = min(self._reader.entry(entry), header.size)
        if wanted > 0:
            self._meta = ""
            self._start_capture(wanted, entry)

    def _start_capture(self, size: int, entry: Entry | None) -> None:
        self._capture, self._capture_left, self._current = [], size, entry
        if not size:
            self._captured()

    def _captured(self) -> None:
        # one piece (most files: inside one inflated chunk) is handed over without a copy
        data, entry = b"".join(self._capture or ()), self._current
        self._capture, self._current = None, None
        if entry is not None:
            self._reader.data(entry, data)
            return
        # node-tar decodes a meta entry's chunks as UTF-8 one by one; read whole here (a
        # character split across node's 16 KiB chunks would come out as two U+FFFD there)
        text = data.decode("utf-8", "replace")
        if self._meta in ("ExtendedHeader", "OldExtendedHeader", "GlobalExtendedHeader"):
            self._keyed += text.count("path=") + text.count("size=") + text.count("type=")
            if self._keyed > MAX_PAX_KEYED:
                raise _RefusedError(f"it holds more than {MAX_PAX_KEYED} pax records that may "
                                    "set a path, size or type (npm's packers write one or two "
                                    "a file)")
            records = _pax(text)
            if self._meta == "GlobalExtendedHeader":
                if records:
                    # node-tar applies a global size and link target to every later entry
                    # and ignores a global path; other readers do otherwise
                    raise _RefusedError("a global pax header sets a path, link, size or type")
            elif "type" in records:
                raise _RefusedError("a pax header sets an entry's type, which only node-tar reads")
            else:
                self._ex = {**(self._ex or {}), **records}
        else:
            self._ex = dict(self._ex or {})
            field = "linkpath" if self._meta == "NextFileHasLongLinkpath" else "path"
            self._ex[field] = _cut_nul(text)

    # -- npm's processing ----------------------------------------------------------------

    def _placed(self, kind: str, path: str) -> str | None:
        """Where pacote's extraction writes an entry, relative to the package folder."""
        # pacote #tarxOptions filter: `if (/Link$/.test(entry.type)) return false`, and
        # only `/File$/` types return true (folders are made for the files inside them)
        if kind not in _FILES:
            return None
        _, _, inside = path.partition("/")
        if inside and _PLAIN_PATH.fullmatch(inside) and inside[1:2] != ":" \
                and inside.count("/") < MAX_DEPTH:
            # the usual path, which none of the steps below changes
            self._claim(inside)
            return inside
        base = _basename(path)
        if base == ".npmignore":
            self._npmignores.add(path)
        elif base == ".gitignore":
            # "rename, but only if there's not already a .npmignore"
            renamed = path[:-len(".gitignore")] + ".npmignore" if path.endswith(
                ".gitignore") else path
            if renamed in self._npmignores:
                return None
            path = renamed
        # unpack.js CHECKPATH: `strip: 1` drops the first component, whatever it is
        parts = path.split("/")[1:]
        if len(parts) > MAX_DEPTH:
            raise _RefusedError(f"an entry is more than {MAX_DEPTH} folders deep, which npm skips")
        stripped = "/".join(parts)
        # STRIPABSOLUTEPATH: a leading `/` is stripped (npm writes `/x` as `x`); a Windows
        # root is too, which another client on Windows would not
        while stripped.startswith("/") and not stripped.startswith("//?/"):
            stripped = stripped[1:]
        if stripped.startswith(("\\", "//?/")) or _DRIVE.match(stripped):
            raise _RefusedError("an entry's path is absolute on Windows")
        if ".." in stripped.replace("\\", "/").split("/"):
            raise _RefusedError("an entry's path climbs out with '..', which npm skips")
        placed = _normalized(stripped)
        if not placed:
            return None  # the package folder itself: not a file
        if "\0" in placed:
            # left by decString's `/\0.*/` when a line break follows the NUL: node-tar passes
            # it on, and writing it throws (npm's extraction fails)
            raise _RefusedError("an entry's path holds a NUL byte, which npm cannot write")
        self._claim(placed)
        return placed

    def _claim(self, placed: str) -> None:
        # the same path as a file and as a folder: which one lands depends on the order
        # and on the client (node-tar keeps the first, others replace it). Held as a tree of
        # names, each kept once: a path's every parent as a string of its own would hold
        # 1,000 folders of 999 characters as 500 MB
        self._placed_bytes += len(placed)
        if self._placed_bytes > MAX_PATH_BYTES:
            raise _RefusedError(f"the paths of its files add up to more than {MAX_PATH_BYTES} "
                                "bytes")
        parent, _, last = placed.rpartition("/")
        if parent == self._parent:
            # the folder of the file before (a tar lists a folder's files together): walked
            # then, and a folder stays one (a file by its name is refused below)
            folder = self._folder
        else:
            names = parent.split("/") if parent else []
            folder = self._tree
            for depth, name in enumerate(names):
                inside = folder.get(name, _ABSENT)
                if inside is None:
                    raise _RefusedError(f"{'/'.join(names[:depth + 1])[:200]!r} is both a "
                                        "file and a folder")
                if inside is _ABSENT:
                    inside = folder[name] = {}
                folder = inside
            self._parent, self._folder = parent, folder
        if folder.get(last) is not None:
            raise _RefusedError(f"{placed[:200]!r} is both a file and a folder")
        folder[last] = None
