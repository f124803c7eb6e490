"""What each word found shows, by where the parser places it (`classify`): a module loaded
or one named at run time, the environment taken whole, the home directory, credentials
files, dynamic code and whether what it runs was decoded first, network globals called or
globals intercepted, native code. A write's path is read in `npm.js.writes`."""

from __future__ import annotations

from tree_sitter import Node

from mirrorgate.npm.js.destinations import host_option, record_destination, url_call
from mirrorgate.npm.js.found import (
    CREDENTIALS,
    DECODED,
    DYNAMIC,
    ENVIRONMENT,
    HOME,
    INTERCEPTS,
    NATIVE,
    NETWORK,
    PROCESS,
)
from mirrorgate.npm.js.tree import (
    FUNCTION_TYPES,
    ancestor,
    assignment_to,
    call_of,
    declaration_of,
    defined_on,
    identifiers_named,
    literal_arguments,
    node_text,
    record_use,
    string_around,
)
from mirrorgate.npm.js.windows import Reading
from mirrorgate.npm.js.words import DYNAMIC_MODULES, NETWORK_MODULES, PROCESS_MODULES, Hit
from mirrorgate.npm.js.writes import classify_write

__all__ = ["SCOPE", "classify", "may_decode"]

SCOPE = 4096
"""Bytes parsed each side of dynamic code, to find the function around it (`_decoded`)."""
_GLOBALS = frozenset({"window", "globalThis", "global", "self"})
_DECODING = (b"atob", b"Buffer.from", b"decodeURIComponent", b"unescape", b"fromCharCode",
             b"Decipher", b"decrypt", b"inflate", b"gunzip", b"Gunzip", b"brotliDecompress",
             b"TextDecoder", b"base64", b"'hex'", b'"hex"', b"fromHex")


def _decoded(node: Node, root: Node, reading: Reading, offset: int) -> bool:
    """Whether what runs at `node` was decoded or decrypted first: the function around it
    (or, at the top level, its statement and the declarations of the names it is handed)
    decodes something (`atob`, `Buffer.from`, a decipher, an inflate)."""
    scopes: list[Node] = []
    current: Node | None = node
    while current is not None:
        if current.type in FUNCTION_TYPES:
            scopes = [current]
            break
        if current.parent is not None and current.parent.type == "program":
            scopes = [current]
        current = current.parent
    arguments = node.child_by_field_name("arguments")
    for argument in arguments.named_children[:4] if arguments is not None else []:
        declared = declaration_of(root, node_text(argument)) if argument.type == "identifier" \
            else None
        if declared is not None:
            scopes.append(declared)
    for scope in scopes or [root]:
        text = reading.data[offset + scope.start_byte:offset + scope.end_byte]
        if any(word in text for word in _DECODING):
            return True
    return False


def may_decode(code: bytes) -> bool:
    """Whether `code` names any decoding `_decoded` looks for."""
    return any(word in code for word in _DECODING)


def _dynamic(reading: Reading, node: Node, hit: Hit, offset: int, root: Node) -> None:
    """Dynamic code at `node`; decoded when the function around it decodes, read from a
    wider parse (`SCOPE` each side) than the window's."""
    record_use(reading, DYNAMIC, node, offset)
    start, end = offset + node.start_byte, offset + node.end_byte
    wide_start, wide_end = max(0, start - SCOPE), min(len(reading.data), end + SCOPE)
    if reading.budget.take(wide_end - wide_start):
        # `_decoded` reads the code of either parse (the wide one, or the window's where the
        # wide tree has no node there): with no decoding word in both, it says no, unparsed
        low, high = min(wide_start, offset), max(wide_end, offset + root.end_byte)
        if not may_decode(reading.data[low:high]):
            return
        wide = reading.parser.parse(reading.data[wide_start:wide_end]).root_node
        found = wide.descendant_for_byte_range(start - wide_start, end - wide_start)
        if found is not None:
            node, root, offset = found, wide, wide_start
    if _decoded(node, root, reading, offset):
        record_use(reading, DECODED, node, offset)


def classify(reading: Reading, node: Node, hit: Hit, offset: int, root: Node) -> None:
    """Record what the word at `node` shows, if anything, by where it stands in the tree."""
    kind = hit.kind
    if kind == "module":
        _module(reading, node, offset)
    elif kind == "require-call":
        _require_call(reading, node, hit, offset, root)
    elif kind == "require":
        # `require` read as a value (`var r = require`): every module it loads is computed
        parent = node.parent
        if node.type == "identifier" and call_of(node) is None and parent is not None \
                and parent.type in ("variable_declarator", "assignment_expression",
                                    "arguments", "sequence_expression", "pair") \
                and parent.child_by_field_name("left") != node:
            record_use(reading, DYNAMIC, parent, offset)
    elif kind == "env-home":
        record_use(reading, HOME, node.parent or node, offset)
    elif kind == "env":
        _environment(reading, node, offset, root)
    elif kind == "binding":
        member = ancestor(node, "member_expression")
        if member is not None and call_of(member) is not None:
            what = NATIVE if "dlopen" in node_text(member) else PROCESS
            record_use(reading, what, member.parent or member, offset)
    elif kind == "homedir":
        call = call_of(node.parent if node.type == "property_identifier" and node.parent
                       else node)
        if call is not None:
            record_use(reading, HOME, call, offset)
    elif kind == "credentials":
        string = string_around(node)
        if string is not None:
            record_use(reading, CREDENTIALS, string, offset)
    elif kind == "home-path":
        string = string_around(node)
        if string is not None and string.start_byte + offset + 1 == hit.start:
            record_use(reading, HOME, string, offset)
    elif kind in ("eval", "function", "constructor", "compile", "wasm", "worker"):
        _code(reading, node, hit, offset, root)
    elif kind in ("fetch", "xhr", "socket", "beacon", "ethereum", "global-index"):
        _globals(reading, node, hit, offset, root)
    elif kind == "url-call":
        url_call(reading, node, offset, root)
    elif kind == "host-option":
        host_option(reading, node, offset, root)
    elif kind in ("write", "write-far"):
        classify_write(reading, node, offset, root)


def _module(reading: Reading, node: Node, offset: int) -> None:
    string = string_around(node)
    if string is None or string.parent is None:
        return
    name = (string.text or b"")[1:-1].decode("utf-8", "replace").removeprefix("node:")
    parent = string.parent
    loaded = parent.type in ("import_statement", "export_statement")
    if parent.type == "arguments" and parent.parent is not None:
        callee = parent.parent.child_by_field_name("function")
        loaded = callee is not None and (callee.type == "import" or node_text(callee) in (
            "require", "module.require"))
    if not loaded:
        return
    where = parent.parent if parent.type == "arguments" and parent.parent else parent
    if name in NETWORK_MODULES:
        record_use(reading, NETWORK, where, offset)
    elif name in PROCESS_MODULES:
        record_use(reading, PROCESS, where, offset)
    elif name in DYNAMIC_MODULES:
        record_use(reading, DYNAMIC, where, offset)


def _require_call(reading: Reading, node: Node, hit: Hit, offset: int, root: Node) -> None:
    """A module loaded by a name not written whole: dynamic code when the name is assembled
    (`'child_' + 'process'`, a template, a join) or decoded; a path handed in a variable or
    built with `path.join(__dirname, ...)` loads one of the package's own files."""
    call = call_of(node) if node.type in ("identifier", "import") else None
    if call is None:
        return
    arguments = call.child_by_field_name("arguments")
    first = arguments.named_children[0] if arguments and arguments.named_children else None
    if first is None or first.type == "string":
        return
    if _decoded(call, root, reading, offset):
        record_use(reading, DYNAMIC, call, offset)
        record_use(reading, DECODED, call, offset)
    elif _assembled(first, root):
        record_use(reading, DYNAMIC, call, offset)


def _assembled(expression: Node, root: Node, depth: int = 0) -> bool:
    """Whether a module name is put together from pieces rather than a path: a `+` over
    strings, a template whose head is no path or scoped name, an array `join`."""
    kind = expression.type
    if kind == "binary_expression":
        return any(child.type in ("string", "template_string")
                   for child in expression.named_children) and "__dirname" not in node_text(
            expression)
    if kind == "template_string":
        parts = expression.named_children
        if not any(part.type == "template_substitution" for part in parts):
            return False
        head = node_text(parts[0]) if parts and parts[0].type == "string_fragment" else ""
        return not head.startswith(("@", ".", "/")) and "/" not in head
    if kind == "call_expression":
        callee = node_text(expression.child_by_field_name("function") or expression)
        return callee.endswith((".join", "fromCharCode", ".reverse", ".concat")) and not \
            callee.startswith(("path.", "path2.", "posix.", "require(\"path"))
    if kind == "identifier" and depth == 0:
        declared = declaration_of(root, node_text(expression))
        return declared is not None and _assembled(declared, root, depth + 1)
    return False


def _environment(reading: Reading, node: Node, offset: int, root: Node) -> None:
    """`process.env` whole: serialised, spread, enumerated or handed to a call (not as a
    child process's `env`), or its alias (`const e = process.env`) so used in the window."""
    member = ancestor(node, "member_expression", "subscript_expression")
    if member is None:
        return
    if _wholesale(member):
        shown = member.parent or member
        record_use(reading, ENVIRONMENT, shown.parent if shown.type == "arguments"
                   and shown.parent else shown, offset)
        return
    parent = member.parent
    if parent is not None and parent.type == "variable_declarator":
        name = parent.child_by_field_name("name")
        if name is not None and name.type == "object_pattern" and any(
                child.type == "rest_pattern" for child in name.named_children):
            record_use(reading, ENVIRONMENT, parent, offset)
        elif name is not None and name.type == "identifier":
            alias = node_text(name)
            for use in identifiers_named(root, alias):
                if use != name and _wholesale(use):
                    shown = use.parent or use
                    record_use(reading, ENVIRONMENT, shown.parent
                               if shown.type == "arguments" and shown.parent else shown, offset)
                    return


_SERIALISING = ("stringify", "fetch", ".write", ".end", ".send", ".post", ".request", "btoa",
                "Buffer.from", "encodeURIComponent", "inspect", "format")


def _serialised(node: Node) -> bool:
    """Whether a call around `node` (a few levels up) serialises or sends it."""
    current: Node | None = node
    for _ in range(8):
        if current is None:
            return False
        if current.type == "call_expression":
            callee = node_text(current.child_by_field_name("function") or current)
            if callee.endswith(_SERIALISING):
                return True
        current = current.parent
    return False


def _wholesale(node: Node) -> bool:
    """Whether the environment object at `node` is taken whole (a child process's `env:`
    is not, unless what holds it is serialised or sent)."""
    parent = node.parent
    if parent is None:
        return False
    kind = parent.type
    if kind == "pair":
        key = parent.child_by_field_name("key")
        return key is not None and (node_text(key).strip("'\"") != "env" or _serialised(parent))
    if kind in ("spread_element", "arguments"):
        # a child process's environment: `{env: {...process.env}}`, `Object.assign({},
        # process.env, {...})` under an `env:` key
        holder = ancestor(parent, "pair")
        key = holder.child_by_field_name("key") if holder is not None else None
        return key is None or node_text(key).strip("'\"") != "env" or _serialised(parent)
    if kind == "for_in_statement":
        return parent.child_by_field_name("right") == node
    return kind in ("template_substitution", "array", "return_statement")


def _code(reading: Reading, node: Node, hit: Hit, offset: int, root: Node) -> None:
    kind = hit.kind
    if kind == "eval":
        string = string_around(node)
        if string is not None:  # `window['eval']`, `(0, self["eval"])`
            holder = string.parent
            if holder is None or holder.type != "subscript_expression":
                return
            node = holder
        elif node.type == "property_identifier":
            member = node.parent
            target = member.child_by_field_name("object") if member is not None else None
            if member is None or target is None or node_text(target) not in _GLOBALS:
                return
            node = member
        elif node.type != "identifier":
            return
        call = call_of(node)
        if call is not None and literal_arguments(call):
            return
        _dynamic(reading, call or node, hit, offset, root)
    elif kind == "function":
        if node.type != "identifier":
            return
        call = call_of(node)
        arguments = call.child_by_field_name("arguments") if call is not None else None
        if call is None or arguments is None or not arguments.named_children \
                or literal_arguments(call):
            return
        _dynamic(reading, call, hit, offset, root)
    elif kind == "constructor":
        member = ancestor(node, "member_expression")
        if member is None:
            return
        owner = node_text(member.child_by_field_name("object") or member)
        call = call_of(member)
        if owner == "module" and call is not None and call.type == "new_expression":
            _dynamic(reading, call, hit, offset, root)  # a module compiled from text
        elif call is not None and call.type == "call_expression" \
                and not literal_arguments(call) and owner not in ("this", "super"):
            _dynamic(reading, call, hit, offset, root)  # `(function(){}).constructor(code)`
    elif kind == "compile":
        member = ancestor(node, "member_expression")
        call = call_of(member) if member is not None else None
        if call is not None:
            _dynamic(reading, call, hit, offset, root)
    elif kind == "wasm":
        member = ancestor(node, "member_expression")
        call = call_of(member) if member is not None else None
        if call is not None and member is not None and node_text(
                member.child_by_field_name("property") or member) in (
                "instantiate", "compile", "Module", "instantiateStreaming",
                "compileStreaming"):
            _dynamic(reading, call, hit, offset, root)
    elif kind == "worker":
        call = ancestor(node, "new_expression")
        if call is not None and any(
                pair.type == "pair" and node_text(pair).replace(" ", "") == "eval:true"
                for pair in _descendants(call, 200)):
            record_use(reading, PROCESS, call, offset)  # worker_threads over code text


def _descendants(node: Node, limit: int) -> list[Node]:
    found: list[Node] = []
    stack = [node]
    while stack and len(found) < limit:
        current = stack.pop()
        found.append(current)
        stack.extend(current.named_children)
    return found


def _globals(reading: Reading, node: Node, hit: Hit, offset: int, root: Node) -> None:
    """Network globals called (`fetch(...)`, `new WebSocket(...)`, with their destination
    where the code writes it), and globals replaced or
    redefined (`window.fetch = ...`, `XMLHttpRequest.prototype.open = ...`,
    `Object.defineProperty(window, 'ethereum', ...)`, `window[key] = ...`)."""
    kind = hit.kind
    string = string_around(node)
    if kind == "global-index":
        subscript = ancestor(node, "subscript_expression")
        if subscript is not None and node_text(subscript.child_by_field_name("object")
                                               or subscript) in _GLOBALS:
            assigned = assignment_to(subscript)
            if assigned is not None:
                record_use(reading, INTERCEPTS, assigned, offset)
        return
    if string is not None:  # `window['fetch']`, `defineProperty(window, 'ethereum', ...)`
        holder = string.parent
        if holder is not None and holder.type == "subscript_expression":
            node = holder
        elif defined_on(string) is not None:
            record_use(reading, INTERCEPTS, defined_on(string) or string, offset)
            return
        else:
            return
    elif node.type == "property_identifier":
        member = node.parent
        if member is None:
            return
        target = node_text(member.child_by_field_name("object") or member)
        if target not in _GLOBALS and kind not in ("ethereum", "beacon") and not (
                kind == "xhr" and target.endswith("XMLHttpRequest")):
            return
        node = member
    elif node.type != "identifier":
        return
    assigned = assignment_to(node)
    if assigned is not None and kind in ("fetch", "xhr", "ethereum"):
        record_use(reading, INTERCEPTS, assigned, offset)
        return
    defined = defined_on(node)
    if defined is not None and kind in ("fetch", "xhr", "ethereum"):
        record_use(reading, INTERCEPTS, defined, offset)
        return
    if kind == "ethereum":
        return  # reading a wallet's provider is what a dapp does; hooking it is not
    call = call_of(node)
    if call is not None:
        record_use(reading, NETWORK, call, offset)
        record_destination(reading, call, offset, root)
