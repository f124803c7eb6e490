"""The code around the places left to settle, parsed with tree-sitter in windows (about 512
bytes, merged, begun and ended at a line's or a statement's edge): a 10 MB bundle costs its
scan and a few dozen windows, not a whole parse (over 100 ms a MB). Holds what a tarball may
still parse (`ReadBudget`) and the trees of the windows parsed last, kept for the same bytes
again, each thread's parser, and one file's reading as it goes (`Reading`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import tree_sitter_javascript
from tree_sitter import Language, Node, Parser, Tree

from mirrorgate.npm.js.found import Destination, Use
from mirrorgate.npm.js.words import FAR_WORDS, WINDOW, Hit

__all__ = ["KEPT_TREES", "KEPT_WINDOW", "LINE_REACH", "PARSED_PER_TARBALL", "ReadBudget", "Reading",
           "parsed_around", "parsed_window", "thread_parser", "windows_of"]

LINE_REACH = 4096
"""How far before a window's start its line's start is looked for, when nothing nearer marks
where a statement begins: a source file's long line (a comment, a string) is within it, a
bundle's line is not (its windows begin where they did)."""

PARSED_PER_TARBALL = 16 * 1024 * 1024
"""Bytes of windows parsed per tarball at most (about 2 s of CPU at tree-sitter's 120 ms a
MB): past it the files read later are `unread`."""
KEPT_TREES = 64
KEPT_WINDOW = 2048
"""Windows' trees a tarball's reading keeps for the same bytes again (`parsed_window`), and the
largest window kept: a tree holds about 23 times its window's bytes, so at most 3 MB."""
_LANGUAGE = Language(tree_sitter_javascript.language())


@dataclass(slots=True)
class ReadBudget:
    """The bytes of windows a tarball's reading may still parse (`PARSED_PER_TARBALL`), and
    the trees of the windows parsed last (`parsed_window`)."""

    parsed: int = PARSED_PER_TARBALL
    trees: dict[bytes, Tree] = field(default_factory=dict)

    def take(self, size: int) -> bool:
        if size > self.parsed:
            self.parsed = 0
            return False
        self.parsed -= size
        return True


@dataclass(slots=True)
class Reading:
    data: bytes
    parser: Parser
    budget: ReadBudget
    found: dict[tuple[str, int], Use] = field(default_factory=dict)
    modules: dict[str, None] = field(default_factory=dict)
    counted: tuple[int, int] = (0, 1)
    """The last offset whose line was counted, and its line: lines are counted on from it."""
    follows: int = 0
    """The small parses a write's path may still cost to follow (`FOLLOWS` a file)."""
    destinations: dict[tuple[str, int], Destination] = field(default_factory=dict)
    """The network calls to a written host found, by host and line (`npm.js.destinations`)."""
    far: bool | None = None
    """Whether the file names an outside anywhere (`FAR_WORDS`; None: not looked yet):
    else a path handed in by name is not followed."""

    def names_outside(self) -> bool:
        if self.far is None:
            self.far = any(word in self.data for word in FAR_WORDS)
        return self.far

    def line(self, offset: int) -> int:
        at, line = self.counted
        # a call begins before the word found in it: counted back from there, not from the
        # file's start (a 9 MB bundle's every use would count its lines again)
        line += self.data.count(b"\n", at, offset) if offset >= at else \
            -self.data.count(b"\n", offset, at)
        self.counted = (offset, line)
        return line


def windows_of(data: bytes, hits: list[Hit]) -> list[tuple[int, int, list[Hit]]]:
    """The hits grouped into windows of code to parse, each begun at a line's or a
    statement's edge and never inside a block comment (prose parsed as code sends the
    parser's error recovery through every quote and backtick of it: 30 times the cost)."""
    windows: list[tuple[int, int, list[Hit]]] = []
    for hit in hits:  # in order of their start
        start = max(0, hit.start - WINDOW)
        end = min(len(data), hit.end + WINDOW)
        if windows and start <= windows[-1][1]:
            open_start, open_end, open_group = windows[-1]
            windows[-1] = (open_start, max(open_end, end), [*open_group, hit])
            continue
        windows.append((start, end, [hit]))
    placed: list[tuple[int, int, list[Hit]]] = []
    for start, end, group in windows:
        first, last = group[0].start, max(hit.end for hit in group)
        if start > 0:
            edges = [at for at in (data.find(b"\n", start, first), data.find(b";", start, first),
                                   data.find(b"}", start, first)) if at >= 0]
            newline = data.rfind(b"\n", max(0, start - LINE_REACH), start)
            line = newline + 1 if newline >= 0 else (0 if start <= LINE_REACH else start)
            # no edge before the hit: begin at its line's start when that is near, so a `//`
            # comment the hit stands in is parsed as one (query-string 10.0.0: a long comment
            # naming `openapi-fetch.` read from its middle was `fetch` intercepted); a bundle's
            # long line has no start that near, and keeps the window as it was
            start = min(edges) + 1 if edges else line
            closed = data.rfind(b"*/", start, first)
            if closed >= 0 and data.find(b"/*", start, closed) < 0:
                start = closed + 2  # the window began inside a comment
        if end < len(data):
            edges = [at for at in (data.find(b"\n", last, end), data.rfind(b";", last, end))
                     if at >= 0]
            end = max(edges) + 1 if edges else end
            opened = data.rfind(b"/*", last, end)
            if opened >= 0 and data.find(b"*/", opened, end) < 0:
                end = opened  # it would end inside a comment
        placed.append((start, end, group))
    return placed


_PARSERS = threading.local()


def thread_parser() -> Parser:
    """This thread's parser (a parser is not shared between threads; making one per file
    would cost more than most files' reading)."""
    parser: Parser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = _PARSERS.parser = Parser(_LANGUAGE)
    return parser


def parsed_window(reading: Reading, window: bytes) -> Node:
    """The tree of `window`, parsed or, where the same bytes were parsed last in the tarball,
    kept: a compiler's or bundler's helpers stand the same in every file of a package (a
    fifth of the windows of 21 real tarballs, a quarter of their parsing, were bytes parsed
    before), and the same bytes parse the same. At most `KEPT_TREES` windows of
    `KEPT_WINDOW` bytes, the least recently used dropped first."""
    trees = reading.budget.trees
    tree = trees.pop(window, None)
    if tree is None:
        tree = reading.parser.parse(window)
        if len(window) > KEPT_WINDOW:
            return tree.root_node
        if len(trees) >= KEPT_TREES:
            del trees[next(iter(trees))]
    trees[window] = tree  # the most recently used last
    return tree.root_node


def parsed_around(reading: Reading, start: int, end: int) -> tuple[Node, int] | None:
    """The window around `start:end` parsed (its edges placed as `windows_of` places them),
    and its offset; None past the budget."""
    [(first, last, _group)] = windows_of(reading.data, [Hit(start, end, "call")])
    if not reading.budget.take(last - first):
        return None
    return reading.parser.parse(reading.data[first:last]).root_node, first
