"""Where one file's code sends: the hosts it names anywhere (`hosts_in`, a scan at memory
speed), and each network call whose destination is written in the code, a URL or a host in
a string or a template whose host is literal, possibly through a local `const`
(`record_destination`). What a release sends to that its predecessor never named is judged
in `rules.capabilities` (`new_destinations`); docs/verdicts.md tells why."""

from __future__ import annotations

import re

from tree_sitter import Node

from mirrorgate.npm.js.found import Destination
from mirrorgate.npm.js.tree import declaration_of, node_text
from mirrorgate.npm.js.windows import Reading
from mirrorgate.npm.js.words import Hit, ident_at

__all__ = ["HOSTS_PER_FILE", "URL_CALLS_PER_FILE", "host_option", "hosts_in", "record_destination",
           "url_call", "url_call_hits"]

HOSTS_PER_FILE = 512
"""Distinct hosts kept per file: a bundle of a cloud SDK names a few hundred endpoints."""
URL_CALLS_PER_FILE = 32
"""URLs handed straight to a call (`get('https://...')`) parsed per file at most."""
_HOST = re.compile(rb"([A-Za-z0-9][A-Za-z0-9.-]{0,252})")
"""A host, read where a `://` ends."""
_SCHEMES = (b"http", b"https", b"ws", b"wss")
_SCHEME_BYTES = frozenset(b"httpswHTTPSW")
# a URL string handed as a call's first argument (or an XMLHttpRequest's `open`'s second):
# what precedes its quote, read backwards from it (one anchored match per URL)
_CALLED = re.compile(rb"([A-Za-z_$][\w$]{0,40})\s{0,4}\(\s{0,8}(?:['\"][A-Za-z]{3,7}['\"]\s{0,4},"
                     rb"\s{0,8})?$")
_NETWORK_CALLEES = frozenset({
    "fetch", "request", "get", "post", "put", "patch", "delete", "del", "head", "open",
    "connect", "WebSocket", "EventSource", "sendBeacon", "axios", "got", "ky", "needle",
    "superagent", "ajax", "getJSON", "createConnection", "Request", "io", "send"})
"""What a URL handed straight to is a network call: a client's verbs (`axios.post`,
`https.get`, `got`, `needle`), node's `request`/`get`/`connect`, the browser's constructors."""
_SENDING = ("Buffer.from", "toString('base64')", 'toString("base64")', "btoa(", "process.env",
            "JSON.stringify")
"""What, in a call's arguments, says it sends something it encoded or read (the solana
stealer's `Buffer.from(secret).toString('base64')` in a header): told in the evidence."""


def _scheme_before(data: bytes, at: int) -> bool:
    """Whether a web scheme (`https`, `ws`, any case) ends at `at`, begun at a word's edge."""
    for scheme in _SCHEMES:
        start = at - len(scheme)
        if start >= 0 and data[start:at].lower() == scheme and not ident_at(data, start - 1):
            return True
    return False


def _host(raw: bytes) -> str | None:
    host = raw.decode("ascii", "replace").lower().rstrip(".")
    return host if "." in host or host == "localhost" else None


def hosts_in(data: bytes, urls: list[int]) -> tuple[str, ...]:
    """Every host `data` names after a `://` (`https://api.example.com/v1`, at each of `urls`,
    the ends `npm.js.words.hits_of` found), in code, strings or comments alike, whatever the
    scheme: the predecessor's hosts are read generously, so a host it names anywhere is not
    new."""
    found: dict[str, None] = {}
    for end in urls:
        match = _HOST.match(data, end)
        host = _host(match.group(1)) if match is not None else None
        if host is not None:
            found[host] = None
            if len(found) >= HOSTS_PER_FILE:
                break
    return tuple(found)


def url_call_hits(data: bytes, urls: list[int]) -> list[Hit]:
    """The URLs (`urls`: where each `://` ends) written straight into a call whose name is a
    network call's (`axios.post('https://...')`, `https.get("http://...")`,
    `xhr.open('POST', 'https://..')`), as hits to parse: the calls the words of
    `npm.js.words` do not name. At most `URL_CALLS_PER_FILE`."""
    found: list[Hit] = []
    for end in urls:
        scheme = end - 3
        quote = scheme
        while quote > 0 and scheme - quote < 6 and data[quote - 1] in _SCHEME_BYTES:
            quote -= 1  # back over the scheme to the quote before it
        quote -= 1
        if quote < 1 or data[quote] not in b"'\"`" or not _scheme_before(data, scheme):
            continue
        before = _CALLED.search(data, max(0, quote - 64), quote)
        if before is None or before.group(1).decode("ascii") not in _NETWORK_CALLEES:
            continue
        match = _HOST.match(data, end)
        found.append(Hit(quote, match.end() if match is not None else end, "url-call"))
        if len(found) >= URL_CALLS_PER_FILE:
            break
    return found


def _literal_host(expression: Node, root: Node, depth: int = 0) -> str | None:
    """The host a destination expression names literally: a string or a template whose
    scheme and host are written out, the left end of a `+`, or a local name declared so in
    the window. A host from a variable, a config or an argument is none."""
    kind = expression.type
    if kind in ("string", "template_string"):
        text = (expression.text or b"")[1:]
        if kind == "template_string":
            text = text.split(b"${", 1)[0]  # the host must stand before any substitution
        scheme = text.find(b"://")
        match = _HOST.match(text, scheme + 3) if 0 < scheme <= 5 else None
        if match is None or not _scheme_before(text, scheme):
            return None
        # a template's host is literal when something follows it before `${` (its path
        # or port); `https://${host}` and `https://api.${domain}` are not
        return _host(match.group(1)) if match.end() < len(text) or kind == "string" else None
    if kind == "binary_expression":
        left = expression.child_by_field_name("left")
        return _literal_host(left, root, depth) if left is not None else None
    if kind == "object":
        for pair in expression.named_children:
            key = pair.child_by_field_name("key") if pair.type == "pair" else None
            value = pair.child_by_field_name("value") if pair.type == "pair" else None
            if key is not None and value is not None and value.type == "string" \
                    and node_text(key).strip("'\"") in ("host", "hostname"):
                return _host((value.text or b"")[1:-1])
        return None
    if kind == "identifier" and depth == 0:
        declared = declaration_of(root, node_text(expression), expression.start_byte)
        return _literal_host(declared, root, 1) if declared is not None else None
    return None


def record_destination(reading: Reading, call: Node, offset: int, root: Node) -> None:
    """The destination of the network `call`, if its code writes the host: recorded with its
    line and whether the call's arguments encode or read what they send (`_SENDING`)."""
    arguments = call.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    callee = call.child_by_field_name("function") or call.child_by_field_name("constructor")
    # an XMLHttpRequest's `open(method, url)`: the URL second
    first = named[1] if len(named) > 1 and named[0].type == "string" and callee is not None \
        and node_text(callee).endswith(".open") else (named[0] if named else None)
    host = _literal_host(first, root) if first is not None else None
    if host is None:
        return
    line = reading.line(offset + call.start_byte)
    text = (call.text or b"")[:2048].decode("utf-8", "replace")
    sends = any(word in text for word in _SENDING)
    reading.destinations.setdefault((host, line), Destination(host, line, node_text(call), sends))


def host_option(reading: Reading, node: Node, offset: int, root: Node) -> None:
    """A `hostname:` key: recorded when its object is the options of a network call
    (`https.request({ hostname: 'x.test', path: '/c' })`, the bench's install stealer's)."""
    pair = node.parent.parent if node.type == "string_fragment" and node.parent else node.parent
    holder = pair.parent if pair is not None and pair.type == "pair" else None
    arguments = holder.parent if holder is not None and holder.type == "object" else None
    call = arguments.parent if arguments is not None and arguments.type == "arguments" \
        else None
    if call is None or call.type != "call_expression" or arguments is None \
            or arguments.named_children[:1] != [holder]:
        return
    callee = call.child_by_field_name("function")
    if callee is not None and node_text(callee).rsplit(".", 1)[-1] in _NETWORK_CALLEES:
        record_destination(reading, call, offset, root)


def url_call(reading: Reading, node: Node, offset: int, root: Node) -> None:
    """A `url-call` hit: the URL string at `node`, recorded when it is the destination of the
    call it is handed to."""
    string = node if node.type in ("string", "template_string") else node.parent
    while string is not None and string.type not in ("string", "template_string"):
        string = string.parent
    arguments = string.parent if string is not None else None
    call = arguments.parent if arguments is not None and arguments.type == "arguments" else None
    if call is None or arguments is None or call.type not in ("call_expression",
                                                              "new_expression"):
        return
    callee = call.child_by_field_name("function") or call.child_by_field_name("constructor")
    name = node_text(callee).rsplit(".", 1)[-1] if callee is not None else ""
    # `window.open(url)` opens a page; an XMLHttpRequest's `open(method, url)` sends
    if name in _NETWORK_CALLEES and (name != "open" or len(arguments.named_children) > 1):
        record_destination(reading, call, offset, root)
