"""What the capability reading asks of a parsed window's tree: a node's text, whether a word
stands in code, the call a node is the callee of, the assignment or `defineProperty` it is
part of, a name's declaration in the window, and a use recorded at its line. Shared by the
calls' recognisers (`npm.js.calls`) and the writes' paths (`npm.js.writes`)."""

from __future__ import annotations

from tree_sitter import Node

from mirrorgate.npm.js.found import Use
from mirrorgate.npm.js.windows import Reading
from mirrorgate.npm.js.words import ident_at

__all__ = ["FUNCTION_TYPES", "ancestor", "assignment_to", "call_of", "declaration_of", "defined_on",
           "identifiers_named", "in_code", "literal_arguments", "node_text", "record_use",
           "string_around"]

_SHOWN = 100  # characters of a call kept as evidence
FUNCTION_TYPES = frozenset({"function_declaration", "function_expression", "arrow_function",
                            "method_definition", "generator_function_declaration",
                            "generator_function"})


def node_text(node: Node) -> str:
    raw = node.text or b""
    return " ".join(raw[:400].decode("utf-8", "replace").split())[:_SHOWN]


def in_code(node: Node, kind: str) -> bool:
    """Whether the word stands in code: not in a comment, nor (but for the words that are
    strings: module names, credentials paths) in a string."""
    strings = kind in ("module", "credentials", "home-path", "global-index", "fetch", "xhr",
                       "ethereum", "eval", "url-call", "host-option")
    current: Node | None = node
    while current is not None:
        if current.type == "comment" or (current.type == "regex"):
            return False
        if not strings and current.type in ("string", "template_string"):
            return False
        current = current.parent
    return True


def record_use(reading: Reading, capability: str, node: Node, offset: int) -> None:
    line = reading.line(offset + node.start_byte)
    key = (capability, line)
    if key not in reading.found:
        reading.found[key] = Use(capability, line, node_text(node))


def ancestor(node: Node, *types: str) -> Node | None:
    """The nearest ancestor (or `node`) of one of `types`, within a few steps."""
    current: Node | None = node
    for _ in range(8):
        if current is None:
            return None
        if current.type in types:
            return current
        current = current.parent
    return None


def string_around(node: Node) -> Node | None:
    return ancestor(node, "string", "template_string")


def call_of(node: Node) -> Node | None:
    """The call or `new` whose callee `node` is, through parentheses and `(0, f)`."""
    current = node
    parent = current.parent
    while parent is not None and parent.type in ("parenthesized_expression",
                                                 "sequence_expression"):
        if parent.type == "sequence_expression" and parent.named_children[-1] != current:
            return None
        current = parent
        parent = current.parent
    if parent is not None and parent.type in ("call_expression", "new_expression"):
        callee = parent.child_by_field_name("function") or parent.child_by_field_name(
            "constructor")
        if callee is not None and callee == current:
            return parent
    return None


def assignment_to(node: Node) -> Node | None:
    """The assignment whose left side `node` is part of (`window.fetch = ...`,
    `XMLHttpRequest.prototype.open = ...`)."""
    current = node
    for _ in range(6):
        parent = current.parent
        if parent is None:
            return None
        if parent.type in ("assignment_expression", "augmented_assignment_expression"):
            return parent if parent.child_by_field_name("left") == current else None
        if parent.type not in ("member_expression", "subscript_expression", "string",
                               "parenthesized_expression"):
            return None
        current = parent
    return None


def defined_on(node: Node) -> Node | None:
    """The `Object.defineProperty(s)(...)` call `node` is an argument of, if any."""
    arguments = ancestor(node, "arguments")
    call = arguments.parent if arguments is not None else None
    if call is None or call.type != "call_expression":
        return None
    callee = node_text(call.child_by_field_name("function") or call)
    return call if callee in ("Object.defineProperty", "Object.defineProperties",
                              "Reflect.defineProperty") else None


def literal_arguments(call: Node) -> bool:
    """Whether every argument of `call` is a plain string: code in plain sight, read here
    as any other (`Function('return this')()`)."""
    arguments = call.child_by_field_name("arguments")
    if arguments is None:
        return True
    named = arguments.named_children
    return bool(named) and all(
        child.type == "string" or (child.type == "template_string"
                                   and not any(c.type == "template_substitution"
                                               for c in child.named_children))
        for child in named)


def identifiers_named(root: Node, name: str) -> list[Node]:
    """The identifiers `name` in the window, found from its bytes (at most 50)."""
    text = root.text or b""
    word = name.encode()
    found: list[Node] = []
    at = text.find(word)
    while at >= 0 and len(found) < 50:
        if not ident_at(text, at - 1) and not ident_at(text, at + len(word)):
            start = root.start_byte + at
            node = root.descendant_for_byte_range(start, start + len(word))
            if node is not None and node.type in ("identifier", "shorthand_property_identifier"):
                found.append(node)
        at = text.find(word, at + len(word))
    return found


def declaration_of(root: Node, name: str, before: int | None = None) -> Node | None:
    """The value `name` is declared with in the window (`const dir = path.join(...)`): the
    first declaration, or with `before` the last one before that byte of the window (the
    one in scope where minified code declares the same short name twice)."""
    found = None
    for node in identifiers_named(root, name):
        parent = node.parent
        if parent is not None and parent.type == "variable_declarator" \
                and parent.child_by_field_name("name") == node:
            if before is None:
                return parent.child_by_field_name("value")
            if node.start_byte < before:
                found = parent.child_by_field_name("value")
    return found
