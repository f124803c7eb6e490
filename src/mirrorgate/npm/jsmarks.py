"""The marks of obfuscation or packing in one JavaScript file's bytes, each with where it is.

The `obfuscated-code` release signal compares these between a file and the same file in the
previous version (`rules.release`); this module only measures. Pure, bounded by the bytes it is
given (the caller reads at most `READ_PER_FILE` of each file), regular expressions that run in
linear time.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import ahocorasick_rs

from mirrorgate.npm.jsuses import Uses

__all__ = ["BASE64_BLOB", "ESCAPES", "EVAL_DECODED", "HEX_IDENTIFIERS", "LONG_LINE",
           "MARK_TEXT", "READ_PER_FILE", "STRONG", "UNMEASURED", "FileMarks", "Mark",
           "digest_of", "is_code", "marks_of", "obfuscator_marks"]

READ_PER_FILE = 2 * 1024 * 1024
"""Bytes of one file measured at most: the head of a larger file (the rest is not read). A
file that runs (`npm.entrypoints`) is measured whole, up to `npm.contents.READ_RUN_FILE`."""
LONG_LINE = "long-line"
ESCAPES = "escapes"
HEX_IDENTIFIERS = "hex-identifiers"
EVAL_DECODED = "eval-decoded"
BASE64_BLOB = "base64-blob"
UNMEASURED = "unmeasured"
STRONG = frozenset((ESCAPES, HEX_IDENTIFIERS, EVAL_DECODED, BASE64_BLOB, UNMEASURED))
"""The marks that fire alone; a long line fires only where the file had none before (a
minified build is common, a minified blob appended to a hand-written file is not)."""
MARK_TEXT = {
    LONG_LINE: "a very long line",
    ESCAPES: "a density of hex or unicode escapes",
    HEX_IDENTIFIERS: "obfuscator-style `_0x` identifiers",
    EVAL_DECODED: "eval or Function over a decoded string",
    BASE64_BLOB: "a large base64 literal",
    UNMEASURED: "code that runs, not measured",
}

LONG_LINE_CHARS = 10_000
"""A line this long is written by a machine: a minifier, a packer or an obfuscator."""
ESCAPES_AT_LEAST = 300
ESCAPE_SHARE = 0.3
"""At least this many `\\xNN`/`\\uNNNN` escapes, making up this share of the file's bytes:
strings hidden from a reader (javascript-obfuscator's `stringArray` with hex encoding). A
bundled table of unicode ranges (emoji and width tables) stays under the share: 24% in the
densest measured (docs/serving.md#release-signals)."""
HEX_IDENTIFIERS_AT_LEAST = 40
"""javascript-obfuscator renames every identifier `_0x` and hex digits; a hand-written or
minified file has none, or a handful."""
BASE64_CHARS = 4096
"""A quoted run of base64 this long is a payload carried as text (data: URIs, whose prefix
breaks the run, are not counted)."""

_JS = (".js", ".cjs", ".mjs")
_ESCAPE = re.compile(rb"\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}")
_HEX_ID = re.compile(rb"\b_0x[0-9a-f]{4,6}\b")
# `eval(`, and the indirect spellings that run in the global scope: `(0,eval)(`,
# `window["eval"](`, `eval?.(`; the decoding call may come through one wrapper (`x.y(atob(`)
_HEX_PREFIX = ahocorasick_rs.BytesAhoCorasick([b"_0x"])
_HEX_CHUNK = 64 * 1024
_EVAL = re.compile(
    rb"(?:eval|Function)(?:[\"'`]\])?\s*\)?\s*(?:\?\.)?\(\s*(?:[\w$.]+\s*\(\s*)?"
    rb"(?:atob|unescape|decodeURIComponent|String\.fromCharCode|Buffer\.from)\s*\(")
_EVAL_WORDS = (b"eval", b"Function")
_EVAL_LOOKS = 10_000
"""Occurrences of `eval`/`Function` looked at per file at most (each one regex match)."""
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64 = re.compile(rb"[\"'`]([A-Za-z0-9+/]{%d,}={0,2})[\"'`]" % BASE64_CHARS)


def is_code(path: str) -> bool:
    """Whether a tarball entry is a JavaScript file the signal reads."""
    return path.lower().endswith(_JS)


@dataclass(frozen=True, slots=True)
class Mark:
    """One mark found: which, where it starts (byte offset, 1-based line) and how much."""

    kind: str
    offset: int
    line: int
    measure: str

    def text(self) -> str:
        if self.kind == UNMEASURED:  # nowhere in the file: none of it was measured
            return f"{MARK_TEXT[self.kind]} ({self.measure})"
        return f"{MARK_TEXT[self.kind]} ({self.measure}) at line {self.line}, byte {self.offset}"


@dataclass(frozen=True, slots=True)
class FileMarks:
    """What one file carries: its marks by kind, its size, whether it was read whole, a digest
    of the bytes read (the same bytes carry the same marks: they are not read twice), and the
    relative paths it requires (`npm.entrypoints.requires_of`, of a file read whole), and
    what its code can do (`npm.jsuses`, of a file read whole; None: not read so)."""

    size: int
    marks: tuple[Mark, ...] = ()
    whole: bool = True
    digest: bytes = b""
    requires: tuple[str, ...] = ()
    uses: Uses | None = None

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(mark.kind for mark in self.marks)


def _eval_decoded(data: bytes) -> re.Match[bytes] | None:
    """The first `eval(`/`Function(` over a decoding call. Found from the words themselves
    (`bytes.find` runs at memory speed; a regex starting with an alternation tries every
    position), each matched where it stands."""
    first: re.Match[bytes] | None = None
    for word in _EVAL_WORDS:
        at = data.find(word)
        looks = 0
        while at >= 0 and looks < _EVAL_LOOKS:
            looks += 1
            before = data[at - 1:at]
            if not (before.isalnum() or before in (b"_", b"$")):
                found = _EVAL.match(data, at)
                if found is not None:
                    if first is None or found.start() < first.start():
                        first = found
                    break
            at = data.find(word, at + len(word))
    return first


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _first_long_line(data: bytes) -> tuple[int, int] | None:
    """(start, length) of the first line of `LONG_LINE_CHARS` or more, as a multi-line
    `^[^\n]{10000,}` finds it. A line that long holds a whole block of half its length,
    aligned to that length, so only the blocks without a newline (`bytes.find` at memory
    speed) are looked at closer."""
    step = LONG_LINE_CHARS // 2
    block = 0
    while block + step <= len(data):
        if data.find(b"\n", block, block + step) >= 0:
            block += step
            continue
        start = data.rfind(b"\n", 0, block) + 1
        end = data.find(b"\n", block + step)
        end = len(data) if end < 0 else end
        if end - start >= LONG_LINE_CHARS:
            return start, end - start
        block = (end // step + 1) * step
    return None


def _first_base64(data: bytes) -> re.Match[bytes] | None:
    """The first match of `_BASE64`, found as `_first_long_line` finds a line: a run of
    `BASE64_CHARS` holds a whole aligned block of half that length that is all base64
    (`bytes.strip` of the alphabet leaves nothing, and gives up at the first other byte)."""
    step = BASE64_CHARS // 2
    block = 0
    size = len(data)
    while block + step <= size:
        if data[block:block + step].strip(_BASE64_ALPHABET):
            block += step
            continue
        start = block  # the run of base64 around the block, both ways
        while start > 0:
            piece = data[max(0, start - step):start]
            kept = len(piece.rstrip(_BASE64_ALPHABET))
            start -= len(piece) - kept
            if kept:
                break
        end = block + step
        while end < size:
            piece = data[end:end + step]
            rest = len(piece.lstrip(_BASE64_ALPHABET))
            end += len(piece) - rest
            if rest:
                break
        if end - start >= BASE64_CHARS and start > 0:
            found = _BASE64.match(data, start - 1)  # its quote, its padding and closing quote
            if found is not None:
                return found
        block = (end // step + 1) * step
    return None


def _may_hold_escapes(data: bytes) -> bool:
    """Whether the backslashes are many enough for `ESCAPES_AT_LEAST` escapes of at most six
    bytes each to make up `ESCAPE_SHARE` of the bytes (most files: far from it)."""
    slashes = data.count(b"\\")
    return slashes >= ESCAPES_AT_LEAST and 6 * slashes >= ESCAPE_SHARE * len(data) * 0.99


def digest_of(data: bytes) -> bytes:
    # sha256: collision-resistant (a file of the other version vouches for one of this by
    # it) and, with the CPU's SHA extensions, twice as fast as blake2b
    return hashlib.sha256(data).digest()


def obfuscator_marks(data: bytes, escapes: bool = True) -> list[Mark]:
    """The marks javascript-obfuscator leaves (dense escapes, `_0x` names), apart so the
    capability reading (`npm.capabilities`, `obfuscated`) pays for these alone; without
    `escapes`, its `_0x` names alone (a pass over the bytes less: an appended blob of
    escapes is too small a share of its file to show anyway, its names are not)."""
    found: list[Mark] = []
    if escapes:
        found += _escape_marks(data)
    hex_ids = _HEX_ID.findall(data) if _hex_prefixes(data, HEX_IDENTIFIERS_AT_LEAST) else []
    if len(hex_ids) >= HEX_IDENTIFIERS_AT_LEAST:
        first = _HEX_ID.search(data)
        at = first.start() if first is not None else 0
        found.append(Mark(HEX_IDENTIFIERS, at, _line(data, at),
                          f"{len(hex_ids):,} of them"))
    return found


def _hex_prefixes(data: bytes, least: int) -> bool:
    """Whether `_0x` stands at least `least` times in `data`, as `data.count(b"_0x") >=
    least` says (the word cannot overlap itself), found by an automaton that seeks its one
    word at memory speed (0.03 ms a MB, `count` 0.9 to 1.3), a bounded chunk at a time (an
    obfuscated file holds hundreds of thousands)."""
    if len(data) <= _HEX_CHUNK:  # most files: one call
        return len(_HEX_PREFIX.find_matches_as_indexes(data)) >= least
    found = 0
    view = memoryview(data)
    for chunk in range(0, len(data), _HEX_CHUNK):
        found += sum(1 for _index, start, _end in _HEX_PREFIX.find_matches_as_indexes(
            view[chunk:chunk + _HEX_CHUNK + 2]) if start < _HEX_CHUNK)
        if found >= least:
            return True
    return False


def _escape_marks(data: bytes) -> list[Mark]:
    found: list[Mark] = []
    escapes = _ESCAPE.findall(data) if _may_hold_escapes(data) else []
    if len(escapes) >= ESCAPES_AT_LEAST:
        share = sum(map(len, escapes)) / max(1, len(data))
        if share >= ESCAPE_SHARE:
            first = _ESCAPE.search(data)
            at = first.start() if first is not None else 0
            found.append(Mark(ESCAPES, at, _line(data, at),
                              f"{len(escapes):,} escapes, {share:.0%} of the bytes"))
    return found


def marks_of(data: bytes, size: int, digest: bytes | None = None) -> FileMarks:
    """The marks in `data`, the first bytes of a file of `size` bytes. Each mark is the first
    match of its regular expression; each is looked for only where a pass at memory speed
    (`bytes.find`, `count`, `strip`) shows it may be, since the regular expressions hold the
    interpreter lock and run several times slower (docs/serving.md#release-signals)."""
    found: list[Mark] = []
    long = _first_long_line(data)
    if long is not None:
        found.append(Mark(LONG_LINE, long[0], _line(data, long[0]), f"{long[1]:,} characters"))
    found += obfuscator_marks(data)
    decoded = _eval_decoded(data)
    if decoded is not None:
        shown = decoded.group(0).decode("ascii", "replace")[:60]
        found.append(Mark(EVAL_DECODED, decoded.start(), _line(data, decoded.start()),
                          f"`{shown}`"))
    blob = _first_base64(data)
    if blob is not None:
        found.append(Mark(BASE64_BLOB, blob.start(), _line(data, blob.start()),
                          f"{len(blob.group(1)):,} characters"))
    return FileMarks(size, tuple(found), whole=len(data) >= size,
                     digest=digest if digest is not None else digest_of(data))
