"""Where a write to the disk points (`writes-outside`, `writes-home`): an fs call's path read
for the home directory, the installing project, an absolute path or a climb; the names in it
followed to their declarations, a path handed in by name followed to the calls of the function
that writes it, a base64 or hex literal decoded. Apart from the other calls (`npm.js.calls`)
for its own bounds on the parses a file's writes may cost. docs/serving.md tells the story."""

from __future__ import annotations

import base64
import re

from tree_sitter import Node

from mirrorgate.npm.js.found import NATIVE, WRITES, WRITES_HOME
from mirrorgate.npm.js.tree import (
    FUNCTION_TYPES,
    call_of,
    declaration_of,
    identifiers_named,
    node_text,
    record_use,
)
from mirrorgate.npm.js.windows import Reading, parsed_around
from mirrorgate.npm.js.words import HOME_VARIABLES, OUTSIDE_VARIABLES, WRITING_CALLS, ident_at

__all__ = ["FOLLOWS", "classify_write"]

_CALLERS = 24  # calls of a writing function looked at, and declarations looked for
FOLLOWS = 64  # small parses per file to follow a write's path (about 32 KB parsed)
_BEFORE = 32 * 1024  # bytes before a name looked through for its declaration
_DECLARING = (b"var", b"let", b"const", b",")
_REACH = 2048
"""Bytes parsed each side of a write to find the function around it, and of a one- or
two-letter name to find its declaration in scope."""
_SCRATCH = ("/" + "tmp", "/dev/null")  # absolute paths a write there changes nothing of the user's


def _outside(expression: Node | None, root: Node, reading: Reading | None = None,
             offset: int = 0, depth: int = 0) -> int:
    """Where a path expression points: `_USERS` (the home directory: `os.homedir()`,
    `homedir` itself, `process.env.HOME`, `~/`, `/Users/`, `%USERPROFILE%`; or a path hidden
    in a literal decoded to the outside, `Buffer.from('Li4v', 'base64')`, as node-ipc 10.1.1
    hid its `../`), `_PROJECT` (the project that installs it: `INIT_CWD`, `process.cwd()`;
    an absolute path at its head; a climb with `..`, but from the package's own
    `__dirname`), or 0: inside the package. The names in it are followed back to their
    declaration in the window, and with `reading` (the window at `offset` of its file) in
    the code before it (`_declared_before`)."""
    if expression is None:
        return 0
    climbs = depth > 0 or not _ANCHORED.match(node_text(expression))
    stack = [expression]
    seen = followed = found = 0
    while stack and seen < 200 and found < _USERS:
        node = stack.pop()
        seen += 1
        kind = node.type
        if kind == "string_fragment":
            found = max(found, _outside_text((node.text or b"").decode("utf-8", "replace"),
                                             _leading(node), climbs))
        elif kind == "string" and _leading(node):
            found = max(found, _drive(node_text(node)[1:]))  # its fragments are cut at escapes
        elif kind == "call_expression":
            name = node_text(node.child_by_field_name("function") or node)
            if name.endswith("homedir"):
                return _USERS
            if name == "process.cwd":
                found = max(found, _PROJECT)
            decoded = _decoded_literal(node, name)
            if decoded is not None and _outside_text(decoded, True, climbs):
                return _USERS  # a path outside, hidden
        elif kind == "member_expression":
            owner = node_text(node.child_by_field_name("object") or node)
            field_name = node_text(node.child_by_field_name("property") or node)
            if (owner == "process.env" and field_name in HOME_VARIABLES) or \
                    field_name == "homedir":  # `os.homedir` handed on as a value
                return _USERS
            if owner == "process.env" and field_name in OUTSIDE_VARIABLES:
                found = max(found, _PROJECT)
            stack.append(node.child_by_field_name("object") or node)
            continue  # a property's name is no path
        elif kind == "identifier":
            text = node_text(node)
            if text == "homedir":  # `import { homedir } from 'os'`, then `${homedir}/x`
                return _USERS
            if depth < 2 and followed < 4:
                followed += 1
                declared, where, at = declaration_of(root, text, node.start_byte), root, offset
                if declared is None and reading is not None:
                    declared, where, at = _declared_before(
                        reading, text, offset + node.start_byte) or (None, root, offset)
                if declared is not None:
                    found = max(found, _outside(declared, where, reading, at, depth + 1))
            continue
        stack.extend(node.named_children)
    return found


_PROJECT = 1
_USERS = 2
_ANCHORED = re.compile(r"(?:[\w$.]{0,40}\(\s?)?(?:__dirname|__filename|import\.meta)")
"""A path built from the package's own folder: its `..` climbs inside the package."""
_HOME_HEADS = ("~", "/Users/", "/home/", "/root/")
_PROFILE = re.compile(r"[A-Za-z]:[\\/]+Users[\\/]|%(?:USERPROFILE|APPDATA|HOMEPATH|"
                      r"LOCALAPPDATA)%", re.IGNORECASE)
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")


def _drive(text: str) -> int:
    """A Windows path's reach: a user's profile, or another drive's folder."""
    return _USERS if _PROFILE.match(text) else _PROJECT if _DRIVE.match(text) else 0


def _outside_text(text: str, leading: bool, climbs: bool) -> int:
    """Where a piece of a path points: a home folder, a drive or a profile variable at the
    path's head; an absolute path (but `/tmp`) there; or a climb."""
    if leading:
        if text.startswith(_HOME_HEADS) or _PROFILE.match(text):
            return _USERS
        if (text.startswith("/") and not text.startswith(_SCRATCH)) or _DRIVE.match(text):
            return _PROJECT
    return _PROJECT if climbs and (text == ".." or "../" in text or "..\\" in text
                                   or text.startswith("..")) else 0


def _leading(fragment: Node) -> bool:
    """Whether a string's text stands at the head of the path it is part of: not after a
    template's substitution (`${dir}/x`), the right of a `+`, or a later argument of a join
    (`path.join(base, '/x')`, `''.concat(home, '/Desktop')`)."""
    string = fragment.parent if fragment.type == "string_fragment" else fragment
    if string is None:
        return True
    if string.type == "template_string" and string.named_children[:1] != [fragment]:
        return False
    parent = string.parent
    if parent is not None and parent.type == "binary_expression":
        return parent.child_by_field_name("right") != string
    if parent is not None and parent.type == "arguments":
        return parent.named_children[:1] == [string]
    return True


def _decoded_literal(call: Node, name: str) -> str | None:
    """The text of `Buffer.from('...', 'base64' | 'hex')` or `atob('...')` over a plain
    string, decoded (at most 256 characters)."""
    if name not in ("Buffer.from", "atob", "window.atob", "globalThis.atob"):
        return None
    arguments = call.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    if not named or named[0].type != "string":
        return None
    literal = node_text(named[0])[1:-1][:344]
    encoding = node_text(named[1]).strip("'\"`") if len(named) > 1 else (
        "base64" if name != "Buffer.from" else "utf8")
    try:
        if encoding in ("base64", "base64url"):
            raw = base64.b64decode(literal + "=" * (-len(literal) % 4), altchars=b"-_"
                                   if encoding == "base64url" else None)
        elif encoding == "hex":
            raw = bytes.fromhex(literal)
        else:
            return None
    except ValueError:
        return None
    return raw[:256].decode("utf-8", "replace")


def _declared_before(reading: Reading, name: str, at: int) -> tuple[Node, Node, int] | None:
    """The value `name` is declared with nearest before `at` in the file (`var Desktops =
    ...` at a module's head, `const o = Buffer.from(...)` a few lines up), looked for in the
    `_BEFORE` bytes before it, with the window parsed around it and its offset; None when
    there is none, or past the follows a file may make (`FOLLOWS`)."""
    if reading.follows <= 0 or not name.isidentifier():
        return None
    reading.follows -= 1
    if len(name) < 3:
        # a minifier's one- or two-letter name is declared again in every scope: only a
        # declaration in a block around the use counts, parsed `_REACH` bytes each way (a
        # tree cut short of the blocks' ends is one of error recovery)
        start, end = max(0, at - _REACH), min(len(reading.data), at + _REACH)
        if not reading.budget.take(end - start):
            return None
        root = reading.parser.parse(reading.data[start:end]).root_node
        use = root.descendant_for_byte_range(at - start, at - start + len(name))
        declared = _scoped_declaration(root, use, name) if use is not None else None
        return (declared, root, start) if declared is not None else None
    data, word = reading.data, name.encode()
    named, looked, floor = at, 0, max(0, at - _BEFORE)
    while looked < _CALLERS:  # the nearest `var|let|const|, name =` before the use
        looked += 1
        named = data.rfind(word, floor, named)
        if named < 0:
            return None
        after = data[named + len(word):named + len(word) + 8].lstrip()
        if not ident_at(data, named - 1) and after[:1] == b"=" \
                and after[1:2] not in (b"=", b">") \
                and data[max(0, named - 8):named].rstrip().endswith(_DECLARING):
            break
    else:
        return None
    parsed = parsed_around(reading, named, named + len(word))
    if parsed is None:
        return None
    declared = declaration_of(parsed[0], name)
    return (declared, parsed[0], parsed[1]) if declared is not None else None


def _scoped_declaration(root: Node, use: Node, name: str) -> Node | None:
    """The value of the last declaration of `name` before `use` in a function (or block)
    around `use`: the one in scope there, not another function's of the same name."""
    around: set[tuple[int, int]] = set()
    current: Node | None = use.parent
    while current is not None:
        around.add((current.start_byte, current.end_byte))
        current = current.parent
    found = None
    for node in identifiers_named(root, name):
        declarator = node.parent
        if node.start_byte >= use.start_byte or declarator is None \
                or declarator.type != "variable_declarator" \
                or declarator.child_by_field_name("name") != node:
            continue
        scope = declarator.parent
        while scope is not None and scope.type not in ("statement_block", "program"):
            scope = scope.parent
        if scope is not None and (scope.start_byte, scope.end_byte) in around:
            found = declarator.child_by_field_name("value")
    return found


def classify_write(reading: Reading, node: Node, offset: int, root: Node) -> None:
    name = node_text(node)
    if name not in WRITING_CALLS or node.type not in ("identifier", "property_identifier"):
        return
    target = node.parent if node.type == "property_identifier" else node
    call = call_of(target) if target is not None else None
    if call is None or call.type != "call_expression":
        return
    arguments = call.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    path = named[WRITING_CALLS[name]] if len(named) > WRITING_CALLS[name] else None
    if name.startswith("chmod"):
        mode = named[1] if len(named) > 1 else None
        if mode is not None and _executable(mode):
            record_use(reading, NATIVE, call, offset)  # a file made executable: a binary to run
        return
    owner = target.child_by_field_name("object") if target is not None \
        and target.type == "member_expression" else None
    if owner is not None and node_text(owner) == "FS":
        return  # emscripten's file system, in memory: `FS.mkdir("/home/web_user")`
    reach = _outside(path, root)
    if reach < _USERS and path is not None and path.type == "identifier":
        reach = max(reach, _called_outside(reading, call, WRITING_CALLS[name], offset, root))
    if reach:
        record_use(reading, WRITES, call, offset)
    if reach == _USERS:
        record_use(reading, WRITES_HOME, call, offset)


def _called_outside(reading: Reading, call: Node, index: int, offset: int,
                    root: Node) -> int:
    """Where a write's path, handed in by name, points where its function is called (as
    `_outside` grades it, the furthest of its callers'): the path traced to a parameter of
    the named function around the write (in the window's tree, else parsed wider, `_REACH`
    each side), and each call of that function in the file (`_CALLERS` at most) read for
    that argument; only in a file that names an outside at all (`FAR_WORDS`). peacenotwar
    writes `deliverAPeacefulMessage(path, ...)`'s `path`, called with `${Desktops}...` where
    `Desktops` is `${homedir}/Desktop/`; node-ipc 10.1.1 overwrites each file `walk(dir)`
    lists, called with a decoded `../`."""
    if reading.follows <= 0 or not reading.names_outside():
        return 0
    reading.follows -= 1
    node: Node | None = call
    function = _around(call)
    if function is None or _function_name(function) is None:
        # the function's head lies before the window: parsed wider
        data = reading.data
        start, end = offset + call.start_byte, offset + call.end_byte
        wide_start, wide_end = max(0, start - _REACH), min(len(data), end + _REACH)
        if not reading.budget.take(wide_end - wide_start):
            return 0
        root = reading.parser.parse(data[wide_start:wide_end]).root_node
        node = root.descendant_for_byte_range(start - wide_start, end - wide_start)
        while node is not None and node.type != "call_expression":
            node = node.parent
        function = _around(node) if node is not None else None
    arguments = node.child_by_field_name("arguments") if node is not None else None
    if arguments is None or len(arguments.named_children) <= index or function is None:
        return 0
    name = _function_name(function)
    parameters = _parameters(function) if function is not None else []
    at = _traced(arguments.named_children[index], parameters, root)
    if name is None or at is None:
        return 0
    return max((_outside(argument, root, reading, first)
                for argument, root, first in _arguments_at(reading, name, at)), default=0)


def _around(node: Node) -> Node | None:
    """The function `node` stands in, if the tree holds it."""
    current: Node | None = node
    while current is not None and current.type not in FUNCTION_TYPES:
        current = current.parent
    return current


def _function_name(function: Node) -> str | None:
    """The name a function is called by: its declaration's, or the variable it is kept in."""
    named = function.child_by_field_name("name")
    if named is not None:
        return node_text(named)
    parent = function.parent
    if parent is not None and parent.type == "variable_declarator":
        declared = parent.child_by_field_name("name")
        return node_text(declared) if declared is not None and declared.type == "identifier" \
            else None
    return None


def _parameters(function: Node) -> list[str]:
    """A function's parameters' names by position (a default's name; '' for a pattern)."""
    listed = function.child_by_field_name("parameters") or function.child_by_field_name(
        "parameter")
    if listed is None:
        return []
    if listed.type == "identifier":  # `dir => ...`
        return [node_text(listed)]
    names = []
    for parameter in listed.named_children:
        if parameter.type == "assignment_pattern":
            parameter = parameter.child_by_field_name("left") or parameter
        names.append(node_text(parameter) if parameter.type == "identifier" else "")
    return names


def _traced(expression: Node, parameters: list[str], root: Node) -> int | None:
    """The position of the parameter a path is built from (`path.join(dir, entry)`, through
    one declaration in the window: `const full = path.join(dir, entry)`), if any."""
    stack = [(expression, 0)]
    seen = 0
    while stack and seen < 100:
        node, depth = stack.pop()
        seen += 1
        if node.type == "identifier":
            text = node_text(node)
            if text and text in parameters:
                return parameters.index(text)
            declared = declaration_of(root, text, node.start_byte) if depth == 0 else None
            if declared is not None:
                stack.append((declared, depth + 1))
            continue
        stack.extend((child, depth) for child in node.named_children)
    return None


def _arguments_at(reading: Reading, name: str,
                  index: int) -> list[tuple[Node, Node, int]]:
    """The argument at `index` of each call of the function `name` in the file (at most
    `_CALLERS` looked at), each with the window it was parsed in and its offset."""
    data, word = reading.data, name.encode() + b"("
    found: list[tuple[Node, Node, int]] = []
    at = data.find(word)
    looked = 0
    while at >= 0 and looked < _CALLERS and reading.follows > 0:
        looked += 1
        if not ident_at(data, at - 1) and data[max(0, at - 9):at] != b"function ":
            reading.follows -= 1
            parsed = parsed_around(reading, at, at + len(name))
            if parsed is None:
                break
            root, first = parsed
            node = root.descendant_for_byte_range(at - first, at - first + len(name))
            call = call_of(node) if node is not None else None
            arguments = call.child_by_field_name("arguments") if call is not None else None
            if arguments is not None and len(arguments.named_children) > index:
                found.append((arguments.named_children[index], root, first))
        at = data.find(word, at + len(word))
    return found


def _executable(mode: Node) -> bool:
    text = node_text(mode).strip("'\"")
    try:
        value = int(text, 0) if not text.isdigit() or text.startswith("0o") else (
            int(text, 8) if len(text) in (3, 4) and text.startswith(("0", "7", "5"))
            else int(text))
    except ValueError:
        return "x" in text or "755" in text or "777" in text
    return bool(value & 0o111)
