"""What a maintainer's sabotage leaves in a file: a loop at module scope with no way out, so
every program that requires it hangs (colors 1.4.44-liberty-2 appended `for (let i = 666; i <
Infinity; i++) console.log(...)` to its entry), or no code at all (faker 6.6.6's `// endgame`).
The loops: a few words found at memory speed, kept where the header is endless and the braces
before stand near the module's depth, confirmed with tree-sitter (`endless_loops`);
conservative: any `break`, `return`, `throw`, `yield`, `await` or `exit` is a way out."""

from __future__ import annotations

import re

import ahocorasick_rs
from tree_sitter import Node

from mirrorgate.npm.js.found import ENDLESS, Use
from mirrorgate.npm.js.tree import FUNCTION_TYPES, node_text
from mirrorgate.npm.js.windows import ReadBudget, thread_parser

__all__ = ["WHOLE_PARSE", "endless_loops", "is_blank"]

_WORDS = (b"Infinity", b";;)", b"; true;", b";true;", b";!0;", b"while(true)", b"while (true)",
          b"while(1)", b"while (1)", b"while(!0)", b"while (!0)")
"""What an endless loop's header is written with (terser writes `while(true)` as `for(;;)`)."""
_AUTOMATON = ahocorasick_rs.BytesAhoCorasick(
    _WORDS, matchkind=ahocorasick_rs.MatchKind.LeftmostFirst)
_LOOKED = 4096  # words looked at per file, at most (a bundle's minified `for(;;)`s)
_DEPTH = 1
"""Braces open before a loop, at most: 0 is module scope; 1 a top-level IIFE's body or a
block at module scope (or a function's body, told apart by the parse). A bundler's module
functions (webpack's, inside an object or an array) stand deeper and are not read: whether
the bundle's runtime calls one at load is not known from its text."""
WHOLE_PARSE = 512 * 1024
"""A file this small with a candidate is parsed whole (about 60 ms at most), which tells an
IIFE's body from a function's; a larger one (a bundle) is read only for loops at depth 0,
from the loop's keyword on (`_WINDOW` bytes)."""
_WINDOW = 64 * 1024
_FOR_HEAD = re.compile(rb"for\s*\([^;(){}]{0,100}$")
_INFINITE_FOR = re.compile(rb"for\s*\([^;(){}]{0,100};\s*[\w$.]{1,64}\s*<=?\s*$")
_LOOPS = frozenset({"for_statement", "while_statement", "do_statement"})
_EXITS = frozenset({"break_statement", "return_statement", "throw_statement",
                    "yield_expression", "await_expression"})
_EXIT_CALLS = (b"exit", b"abort", b"kill")  # `process.exit()`, `process.abort()`, `kill(pid)`
_EXIT_WORDS = (b"break", b"return", b"throw", b"yield", b"await", *_EXIT_CALLS)
_PARENS = re.compile(rb"[()]")
_BRACES = re.compile(rb"[{}]")
_BLANK = re.compile(rb"(?:#![^\n]*+)?(?:\s++|//[^\n]*+|/\*(?s:.*?)\*/|(['\"])use strict\1;?+)*+")
"""Comments, whitespace, a shebang and a "use strict" directive: no code (possessive, so a long
run of them that ends in code fails in linear time)."""
# what may stand between a loop and the module: statements' containers, an IIFE (below)
_CONTAINERS = frozenset({"program", "statement_block", "if_statement", "else_clause",
                         "try_statement", "catch_clause", "finally_clause", "labeled_statement",
                         "for_statement", "for_in_statement", "while_statement", "do_statement",
                         "expression_statement", "parenthesized_expression", "unary_expression",
                         "sequence_expression", "switch_statement", "switch_body", "switch_case",
                         "switch_default"})


def _candidates(data: bytes) -> list[int]:
    """Where an endless loop's keyword (`for`, `while`) may stand: the header read from the
    bytes around each word, most `Infinity`s (`x === -Infinity`) dropped unparsed. One
    automaton's pass (0.2 ms a MB of code; a `bytes.find` a word costs 1.5)."""
    found: set[int] = set()
    for index, at, _end in _AUTOMATON.find_matches_as_indexes(data)[:_LOOKED]:
        word = _WORDS[index]
        if word == b"Infinity":
            head = _INFINITE_FOR.search(data, max(0, at - 200), at)
            if head is not None:
                found.add(head.start())
        elif word.startswith(b";"):
            head = _FOR_HEAD.search(data, max(0, at - 120), at)
            if head is not None:
                found.add(head.start())
        elif at == 0 or not (data[at - 1:at].isalnum() or data[at - 1:at] in b"_$."):
            found.add(at)
    return sorted(start for start in found if _no_exit_words(data, start))


def _no_exit_words(data: bytes, start: int) -> bool:
    """Whether the body of the loop at `start` may have no way out, from its bytes: its
    header's parentheses and its block's braces matched (a brace or parenthesis in a string
    miscounts, and the parse decides). A body that names `break`, `return`... anywhere, in a
    comment or a string too, is read as having a way out (most minified `for(;;)`); one
    not closed within `_WINDOW` is not read. `do {...} while (true)`: its body is before."""
    opened = data.find(b"(", start, start + 16)
    if opened < 0:
        return False
    depth = 0
    close = -1
    for match in _PARENS.finditer(data, opened, opened + 400):
        depth += 1 if match.group() == b"(" else -1
        if depth == 0:
            close = match.end()
            break
    if close < 0:
        return False
    rest = data[close:close + 64].lstrip()
    if not rest.startswith(b"{"):
        if data[max(0, start - 64):start].rstrip()[-1:] == b"}":
            return True  # maybe a `do`'s tail: the parse reads its body
        end = data.find(b";", close, close + 2048)
        return end >= 0 and not any(word in data[close:end] for word in _EXIT_WORDS)
    body = data.find(b"{", close)
    depth = 0
    for match in _BRACES.finditer(data, body, body + _WINDOW):
        depth += 1 if match.group() == b"{" else -1
        if depth == 0:
            return not any(word in data[body:match.end()] for word in _EXIT_WORDS)
    return False


def _depths(data: bytes, starts: list[int]) -> list[int]:
    """The braces open before each start (ascending), counted on from the last: a brace in
    a string or a comment miscounts, which only drops a loop unread (a candidate's depth
    must be near 0, which a miscount makes unlikely, not likely)."""
    depths: list[int] = []
    opened = closed = at = 0
    for start in starts:
        opened += data.count(b"{", at, start)
        closed += data.count(b"}", at, start)
        at = start
        depths.append(opened - closed)
    return depths


def _endless_header(loop: Node) -> bool:
    """Whether the loop's condition never turns false: none, `true`, `1`, `!0`, `< Infinity`."""
    conditions = [node for node in loop.children_by_field_name("condition")
                  if node.is_named and node.type != "empty_statement"]
    if not conditions:
        return loop.type == "for_statement"
    condition = conditions[0]
    while condition.type == "parenthesized_expression" and condition.named_child_count == 1:
        condition = condition.named_children[0]
    text = condition.text or b""
    if condition.type in ("true", "number"):
        return text.strip() not in (b"0", b"0.0")
    if condition.type == "unary_expression":
        return text.replace(b" ", b"") == b"!0"
    if condition.type == "binary_expression":
        operator = condition.child_by_field_name("operator")
        right = condition.child_by_field_name("right")
        return operator is not None and operator.type in ("<", "<=") and \
            right is not None and right.text == b"Infinity"
    return False


def _way_out(body: Node) -> bool:
    """Whether anything in the body may end the loop (conservative: a `break` of an inner
    loop, a `return` in a callback count too)."""
    pending = [body]
    while pending:
        node = pending.pop()
        if node.type in _EXITS:
            return True
        if node.type == "call_expression":
            callee = node.child_by_field_name("function")
            name = (callee.text or b"").rsplit(b".", 1)[-1] if callee is not None else b""
            if name in _EXIT_CALLS:
                return True
        pending.extend(node.named_children)
    return False


def _iife(function: Node) -> bool:
    """Whether a function is called where it is written: `(function(){...})()`,
    `!function(){...}()`, `(() => {...})()`, `(function(){...}).call(this)`."""
    node = function
    while node.parent is not None and node.parent.type == "parenthesized_expression":
        node = node.parent
    parent = node.parent
    if parent is not None and parent.type == "member_expression":
        member = parent.child_by_field_name("property")
        if member is None or member.text not in (b"call", b"apply"):
            return False
        node, parent = parent, parent.parent
    return parent is not None and parent.type == "call_expression" and \
        parent.child_by_field_name("function") == node


def _at_module_scope(loop: Node) -> bool:
    """Whether the loop runs when the module loads: every container up to the program a
    statement's or an IIFE's (a bundle's wrapper runs at load; a function declared, a method,
    an object's or a call's argument (webpack's modules) may never be called)."""
    node = loop.parent
    while node is not None and node.type != "program":
        if node.type in FUNCTION_TYPES:
            if not _iife(node):
                return False
        elif node.type not in _CONTAINERS and node.type not in ("call_expression", "arguments",
                                                                 "member_expression"):
            return False
        node = node.parent
    return node is not None


def _loop_at(root: Node, start: int) -> Node | None:
    node = root.descendant_for_byte_range(start, start + 1)
    while node is not None and node.type not in _LOOPS:
        node = node.parent
        if node is not None and node.type == "program":
            return None
    return node


def _endless(loop: Node) -> bool:
    body = loop.child_by_field_name("body")
    return _endless_header(loop) and (body is None or not _way_out(body))


def endless_loops(data: bytes, budget: ReadBudget) -> list[Use]:
    """The loops at module scope in `data` with an endless header and no way out, each with
    its line and header."""
    starts = _candidates(data)
    if not starts:  # nearly every file
        return []
    kept = [start for start, depth in zip(starts, _depths(data, starts), strict=True)
            if depth <= (_DEPTH if len(data) <= WHOLE_PARSE else 0)]
    found: list[Use] = []
    if not kept:
        return found
    if len(data) <= WHOLE_PARSE:
        if not budget.take(len(data)):
            return found
        root = thread_parser().parse(data).root_node
        for start in kept:
            loop = _loop_at(root, start)
            # a `do {...} while (true)` is found from its `while`, after its body
            if loop is not None and (loop.start_byte == start or loop.type == "do_statement") \
                    and _endless(loop) and _at_module_scope(loop):
                found.append(Use(ENDLESS, data.count(b"\n", 0, start) + 1, node_text(loop)))
        return found
    for start in kept:
        if data.startswith(b"while", start) and \
                data[max(0, start - 64):start].rstrip()[-1:] == b"}" and \
                data[data.find(b")", start) + 1:start + 64].lstrip()[:1] != b"{":
            continue  # `do {...} while (true)` read from its `while`, without its `do`: not read
        end = data.rfind(b"\n", start, start + _WINDOW) if start + _WINDOW < len(data) \
            else len(data)
        end = end if end > start else min(len(data), start + _WINDOW)
        if not budget.take(end - start):
            break
        root = thread_parser().parse(data[start:end]).root_node
        loop = root.named_children[0] if root.named_child_count else None
        if loop is not None and loop.type in _LOOPS and loop.start_byte == 0 and \
                not loop.has_error and _endless(loop):
            found.append(Use(ENDLESS, data.count(b"\n", 0, start) + 1, node_text(loop)))
    return found


def is_blank(data: bytes) -> bool:
    """Whether a file holds no code: nothing node would run when it is required."""
    matched = _BLANK.match(data)
    return matched is not None and matched.end() == len(data)
