"""What one file of JavaScript can do: the capabilities its code uses (network, processes, the
environment, files outside the package, dynamic code, native code, interception of globals),
each with its line and the call, read with a JavaScript parser (tree-sitter) where a word
that may show one stands. `npm.capabilities` gathers these over the files that run.

Pure and bounded. One pass at memory speed (Aho-Corasick automata over a few dozen words)
finds where a capability may be; the bytes around settle most places; only the code around
the rest is parsed (windows of about 512 bytes, merged), so a 10 MB bundle costs its scan and
a few dozen windows, not a whole parse (over 100 ms a MB). Past `ReadBudget` or `MAX_HITS`
the file is `unread`, never clean.
docs/serving.md "What a release's code can do" tells the story.
"""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass, field

import ahocorasick_rs
import tree_sitter_javascript
from tree_sitter import Language, Node, Parser, Tree

__all__ = ["CAPABILITIES", "CREDENTIALS", "DECODED", "DYNAMIC", "ENVIRONMENT", "HOME",
           "INTERCEPTS", "NATIVE", "NETWORK", "OBFUSCATED", "PROCESS", "UNREAD", "WRITES",
           "WRITES_HOME", "ReadBudget", "Use", "Uses", "uses_of"]

NETWORK = "network"
PROCESS = "processes"
ENVIRONMENT = "environment"
HOME = "home-directory"
CREDENTIALS = "credentials-files"
WRITES = "writes-outside"
WRITES_HOME = "writes-home"
DYNAMIC = "dynamic-code"
DECODED = "decoded-code"
NATIVE = "native-code"
INTERCEPTS = "intercepts-globals"
OBFUSCATED = "obfuscated"
UNREAD = "unread"
CAPABILITIES: dict[str, str] = {
    NETWORK: "reaches the network",
    PROCESS: "runs processes",
    ENVIRONMENT: "reads the environment whole",
    HOME: "reaches the home directory",
    CREDENTIALS: "names credentials files (npm, ssh, cloud, browser or wallet stores)",
    WRITES: "writes outside the package",
    WRITES_HOME: "writes into the home directory, or where it hides the path",
    DYNAMIC: "runs code made at run time",
    DECODED: "runs code decoded or decrypted at run time",
    NATIVE: "runs native code",
    INTERCEPTS: "intercepts globals (fetch, XMLHttpRequest, window.ethereum)",
    OBFUSCATED: "hides what it does (obfuscated code)",
    UNREAD: "could not be read whole",
}
"""Each capability and the words the evidence says it with."""

NETWORK_MODULES = frozenset({
    "http", "https", "http2", "net", "tls", "dgram", "dns", "undici",
    # the clients a package reaches the network through without a built-in module of its own
    "axios", "node-fetch", "got", "request", "needle", "superagent", "ws", "cross-fetch",
    "isomorphic-fetch", "make-fetch-happen", "minipass-fetch", "phin", "socket.io-client",
    "ky", "bent", "simple-get", "urllib", "request-promise", "request-promise-native",
    "sync-request", "then-request", "xmlhttprequest", "basic-ftp", "ftp", "ssh2", "mqtt",
    # the channels stolen tokens leave by: a chat's webhook or bot, a mail (an0n-chat-lib
    # 0.1.0 posts the browsers' Discord tokens through discord.js's `WebhookClient`)
    "discord.js", "discord-webhook-node", "@discordjs/rest", "node-telegram-bot-api",
    "telegraf", "@slack/webhook", "nodemailer",
})
PROCESS_MODULES = frozenset({"child_process", "execa", "cross-spawn", "shelljs"})
DYNAMIC_MODULES = frozenset({"vm"})
_CAPABLE_MODULES = NETWORK_MODULES | PROCESS_MODULES | DYNAMIC_MODULES

WINDOW = 256
"""Bytes parsed each side of a place a capability may be (merged where windows meet)."""
SCOPE = 4096
"""Bytes parsed each side of dynamic code, to find the function around it (`_decoded`)."""
MAX_HITS = 50_000
"""Places looked at per file at most: past it the file is `unread`."""
PARSED_PER_TARBALL = 16 * 1024 * 1024
"""Bytes of windows parsed per tarball at most (about 2 s of CPU at tree-sitter's 120 ms a
MB): past it the files read later are `unread`."""
KEPT_TREES = 64
KEPT_WINDOW = 2048
"""Windows' trees a tarball's reading keeps for the same bytes again (`_parsed`), and the
largest window kept: a tree holds about 23 times its window's bytes, so at most 3 MB."""
_CHUNK = 1024 * 1024  # bytes scanned at a time, so a hostile file's hits stop at the bound
_SHOWN = 100  # characters of a call kept as evidence

_LANGUAGE = Language(tree_sitter_javascript.language())
_IDENT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
_GLOBALS = frozenset({"window", "globalThis", "global", "self"})
_FUNCTIONS = frozenset({"function_declaration", "function_expression", "arrow_function",
                        "method_definition", "generator_function_declaration",
                        "generator_function"})
_DECODING = (b"atob", b"Buffer.from", b"decodeURIComponent", b"unescape", b"fromCharCode",
             b"Decipher", b"decrypt", b"inflate", b"gunzip", b"Gunzip", b"brotliDecompress",
             b"TextDecoder", b"base64", b"'hex'", b'"hex"', b"fromHex")
_HOME_VARIABLES = frozenset({"HOME", "USERPROFILE", "HOMEPATH", "APPDATA", "LOCALAPPDATA",
                             "XDG_CONFIG_HOME", "XDG_DATA_HOME"})
_OUTSIDE_VARIABLES = _HOME_VARIABLES | {"INIT_CWD"}
_OUTSIDE_WORDS = (b"homedir", b"HOME", b"USERPROFILE", b"APPDATA", b"INIT_CWD", b"XDG_",
                  b"cwd(", b"'/", b'"/', b"`/", b"~", b"..", b":\\", b"base64", b"atob(")
"""What a path outside the package is written with (`_outside`)."""
_FAR_WORDS = (b"homedir", b"HOME", b"USERPROFILE", b"APPDATA", b"INIT_CWD", b"cwd(",
              b"base64", b"atob")
"""What a file names where a path handed to a write by name may come from outside
(`write-far`): without one of these, such a write is not followed to its callers."""
FOLLOWED_WRITES = 8
"""Writes of a path handed in by name followed to their callers per file, at most: each a
wider parse and up to `_CALLERS` small ones."""
_CALLERS = 24  # calls of a writing function looked at, and declarations looked for
_FOLLOWS = 64  # small parses per file to follow a write's path (about 32 KB parsed)
_BEFORE = 32 * 1024  # bytes before a name looked through for its declaration
_DECLARING = (b"var", b"let", b"const", b",")
_REACH = 2048
"""Bytes parsed each side of a write to find the function around it, and of a one- or
two-letter name to find its declaration in scope."""
_NAMED_PATH = re.compile(rb"\s{0,8}\(\s{0,40}[A-Za-z_$][\w$]{0,64}\s{0,8}[,)]")
_SCRATCH = ("/" + "tmp", "/dev/null")  # absolute paths a write there changes nothing of the user's
_WRITERS = {"writeFile": 0, "writeFileSync": 0, "appendFile": 0, "appendFileSync": 0,
            "createWriteStream": 0, "copyFile": 1, "copyFileSync": 1, "cp": 1, "cpSync": 1,
            "symlink": 1, "symlinkSync": 1, "rename": 1, "renameSync": 1, "rm": 0,
            "rmSync": 0, "unlink": 0, "unlinkSync": 0, "mkdir": 0, "mkdirSync": 0,
            "chmod": 0, "chmodSync": 0}
"""fs's calls that change the disk, and which argument names the path changed."""
_CREDENTIAL_PATHS = (
    b".npmrc", b".ssh", b"id_rsa", b"id_ed25519", b".aws", b"gcloud", b".azure", b".kube",
    b".docker", b".git-credentials", b".netrc", b".gnupg", b"Login Data", b"Local State",
    b"Local Extension Settings", b"Local Storage", b"BraveSoftware", b"Chrome", b"Firefox",
    b".mozilla", b"wallet.dat", b"Exodus", b".electrum", b"keystore", b"solana",
    b"nkbihfbeogaeaoehlefnkodbefgpgknn")
"""Names in a string that point at a credentials store: npm's and ssh's, the cloud CLIs',
the browsers' (saved passwords, cookies, extension storage) and the wallets' (MetaMask's
extension id among them)."""

# the words that may show a capability, each with what it may be: few enough (under 64)
# that the automaton's vectorised prefilter holds (0.6 ms a MB; 1.8 past 64 words)
_WORDS: list[tuple[bytes, str]] = [
    (b"require", "require"), (b"import(", "require-call"),
    *[(f"{word}{space}{quote}".encode(), "module") for word in ("from", "import")
      for space in ("", " ") for quote in "'\""],
    (b"process.env", "env"), (b"process['env']", "env"), (b'process["env"]', "env"),
    (b"process.binding", "binding"), (b"process._linkedBinding", "binding"),
    (b"process.dlopen", "binding"),
    (b"homedir", "homedir"),
    (b"eval", "eval"), (b"Function", "function"), (b".constructor", "constructor"),
    (b"._compile", "compile"), (b"WebAssembly", "wasm"), (b"Worker", "worker"),
    (b"fetch", "fetch"), (b"XMLHttpRequest", "xhr"), (b"WebSocket", "socket"),
    (b"EventSource", "socket"), (b"sendBeacon", "beacon"), (b"ethereum", "ethereum"),
    # `self` apart: as often a local name (`const self = this`) as the global
    *[(f"{name}[".encode(), "global-index") for name in ("global", "globalThis", "window")],
    *[(name.encode(), "write") for name in sorted(_WRITERS, key=len, reverse=True)
      if not name.endswith("Sync") and name not in ("cp", "rm")],
    (b"rmSync", "write"), (b"cpSync", "write"),
]
_AUTOMATON = ahocorasick_rs.BytesAhoCorasick(
    [word for word, _ in _WORDS], matchkind=ahocorasick_rs.MatchKind.LeftmostFirst)
_PATHS = [ahocorasick_rs.BytesAhoCorasick(words, matchkind=ahocorasick_rs.MatchKind.LeftmostFirst)
          for words in (list(_CREDENTIAL_PATHS), [b"~/", b"/root/", b"/home/", b"/Users/"])]
"""The paths that reach outside the package, apart: short words (`~/`) or more than 64 in
one automaton leave its vectorised prefilter (0.6 ms a MB) for its slow path (1.8); three
automatons cost 1.0."""
_LONGEST = max(len(word) for word, _ in _WORDS)
_KINDS = [kind for _, kind in _WORDS]
_OPENING = frozenset(b"([")
_DOT = ord(".")
_WHOLE_WORD = frozenset({"require", "require-call", "homedir", "eval", "function", "wasm",
                         "worker", "fetch", "xhr", "socket", "beacon", "ethereum", "write",
                         "global-index"})


@dataclass(frozen=True, slots=True)
class Use:
    """One capability used: which, the line, and the code that uses it."""

    capability: str
    line: int
    call: str


@dataclass(frozen=True, slots=True)
class Uses:
    """What a file's code can do: its `found` uses, the bare modules it requires (a bundled
    dependency's name among them), why it was not read whole (None: it was), and the files
    it requires by a relative path."""

    found: tuple[Use, ...] = ()
    modules: tuple[str, ...] = ()
    unread: str | None = None
    requires: tuple[str, ...] = ()
    """The relative specifiers it requires or imports (`./lib/x`, `../y.dat`), as
    `npm.entrypoints.requires_of` finds them, from the same places: what the capability
    signals alone follow (`npm.contents`, lean)."""

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(use.capability for use in self.found)


@dataclass(slots=True)
class ReadBudget:
    """The bytes of windows a tarball's reading may still parse (`PARSED_PER_TARBALL`), and
    the trees of the windows parsed last (`_parsed`)."""

    parsed: int = PARSED_PER_TARBALL
    trees: dict[bytes, Tree] = field(default_factory=dict)

    def take(self, size: int) -> bool:
        if size > self.parsed:
            self.parsed = 0
            return False
        self.parsed -= size
        return True


@dataclass(slots=True)
class _Hit:
    """A word found: where its identifier (or string) stands, and what it may be."""

    start: int
    end: int
    kind: str


@dataclass(slots=True)
class _Reading:
    data: bytes
    parser: Parser
    budget: ReadBudget
    found: dict[tuple[str, int], Use] = field(default_factory=dict)
    modules: dict[str, None] = field(default_factory=dict)
    counted: tuple[int, int] = (0, 1)
    """The last offset whose line was counted, and its line: lines are counted on from it."""
    follows: int = 0
    """The small parses a write's path may still cost to follow (`_FOLLOWS` a file)."""
    far: bool | None = None
    """Whether the file names an outside anywhere (`_FAR_WORDS`; None: not looked yet):
    else a path handed in by name is not followed."""

    def names_outside(self) -> bool:
        if self.far is None:
            self.far = any(word in self.data for word in _FAR_WORDS)
        return self.far

    def line(self, offset: int) -> int:
        at, line = self.counted
        # a call begins before the word found in it: counted back from there, not from the
        # file's start (a 9 MB bundle's every use would count its lines again)
        line += self.data.count(b"\n", at, offset) if offset >= at else \
            -self.data.count(b"\n", offset, at)
        self.counted = (offset, line)
        return line


def _ident_at(data: bytes, at: int) -> bool:
    return 0 <= at < len(data) and data[at] in _IDENT


def _hits(data: bytes, modules: dict[str, None],
          relative: dict[str, None]) -> list[_Hit] | None:
    """Where a capability may be, the words cut at identifier boundaries (`evaluate` is not
    `eval`), each narrowed to the identifier or string the tree holds; None past
    `MAX_HITS`. A module loaded by a plain string is settled here, its name kept."""
    found: list[_Hit] = []
    ident, size, kinds, whole = _IDENT, len(data), _KINDS, _WHOLE_WORD  # the hot loop's
    for index, start, end in _matches(_AUTOMATON, data):
        kind = kinds[index]
        if kind in whole and ((start > 0 and data[start - 1] in ident) or (
                kind != "write" and end < size and data[end] in ident
                and data[end - 1] in ident)):
            continue
        if data[end - 1] in _OPENING:
            end -= 1
        if data[start] == _DOT:
            start += 1
        hit = _quick(data, _Hit(start, end, kind), modules, relative)
        if hit is not None:
            found.append(hit)
    for automaton, kind in zip(_PATHS, ("credentials", "home-path"), strict=True):
        found += [hit for _index, start, end in _matches(automaton, data)
                  if (hit := _quick(data, _Hit(start, end, kind), modules, relative))
                  is not None]
    if len(found) > MAX_HITS:
        return None
    found.sort(key=lambda hit: hit.start)
    return found


def _matches(automaton: ahocorasick_rs.BytesAhoCorasick,
             data: bytes) -> list[tuple[int, int, int]]:
    """The automaton's matches, a chunk at a time, stopped past `MAX_HITS` (a hostile
    file of `eval;eval;...` would otherwise make millions of tuples)."""
    if len(data) <= _CHUNK:  # most files: one call
        matches: list[tuple[int, int, int]] = automaton.find_matches_as_indexes(data)
        return matches
    found: list[tuple[int, int, int]] = []
    view = memoryview(data)
    size = len(data)
    for chunk in range(0, size, _CHUNK):
        stop = min(size, chunk + _CHUNK + _LONGEST)
        found += [(index, start + chunk, end + chunk) for index, start, end
                  in automaton.find_matches_as_indexes(view[chunk:stop])
                  if start < _CHUNK]  # one that starts past the chunk is the next one's
        if len(found) > 4 * MAX_HITS:
            break
    return found


_FOLLOWED_BY: dict[str, tuple[bytes, ...]] = {
    # what may follow a word that uses a capability: a call, an assignment, a reference
    # handed on; prose (a JSDoc `{Function}`, "fetch the data") is not parsed
    "eval": tuple(b"(),;?]}'\"`"[i:i + 1] for i in range(10)),
    "function": (b"(",), "socket": (b"(",), "beacon": (b"(",), "homedir": (b"(",),
    "worker": (b"(",), "wasm": (b".",),
    "fetch": tuple(b"(=?,;)[.'\"`"[i:i + 1] for i in range(11)),
    "xhr": tuple(b"(.=;,)['\"`"[i:i + 1] for i in range(10)),
    "ethereum": tuple(b".=,);['\"`"[i:i + 1] for i in range(9)),
}


_CALLED_WITH = re.compile(rb"\s{0,8}\(\s{0,8}(['\"`])([^'\"`\\\n$]{0,256})\1\s{0,8}[),]")
_QUOTED = re.compile(rb"(['\"])([^'\"\\\n]{0,256})\1")
"""A call's first argument that is a plain string (no escape, no `${`), and a quoted name:
matched where the word ends (one anchored match, not a scan)."""


def _quick(data: bytes, hit: _Hit, modules: dict[str, None],
           relative: dict[str, None]) -> _Hit | None:
    """What the bytes around a word already settle without a parse: most words are not a
    capability (`process.env.NODE_ENV`, `require('./x')`, `x.constructor.name`)."""
    end, kind = hit.end, hit.kind
    if kind == "require-call" or (kind == "require" and data[end:end + 1] == b"("):
        kind = hit.kind = "require-call"  # the common case first: one anchored match
    after = data[end:end + 24] if kind != "require-call" else b""
    if kind == "require":
        following = after.lstrip()[:1]
        if following == b".":
            return None  # require.resolve, require.cache: no module loaded
        if following != b"(":
            return hit  # `require` read as a value: parsed
        kind = hit.kind = "require-call"
    if kind in ("require-call", "module"):
        # `require('name')` / `from 'name'`: the plain string, settled without a parse
        found = (_CALLED_WITH if kind == "require-call" else _QUOTED).match(
            data, end if kind == "require-call" else end - 1)
        if found is None:
            return hit if kind == "require-call" else None  # a computed name: parsed
        at, literal = found.start(1), found.group(2)
        name = literal.decode("utf-8", "replace")
        if name.startswith("."):
            relative[name] = None
        elif name and not name.startswith("/"):
            modules[name] = None  # maybe a bundled dependency: a superset is harmless
        if name.removeprefix("node:") in _CAPABLE_MODULES:
            return _Hit(at, at + len(literal) + 2, "module")  # confirmed by the parse
        return None
    if kind == "env":
        if after[:1] in (b".", b"["):
            variable = after[1:].lstrip(b"'\"")
            length = next((i for i, c in enumerate(variable) if c not in _IDENT), len(variable))
            if variable[:length].decode("ascii") in _OUTSIDE_VARIABLES:
                hit.kind = "env-home"
                return hit
            return None  # one variable by name: not the environment whole
        return None if _ident_at(data, end) else hit
    if kind == "home-path":
        return hit if data[hit.start - 1:hit.start] in (b"'", b'"', b"`") else None
    if kind == "constructor":
        before = data[max(0, hit.start - 7):hit.start - 1]
        return hit if after.lstrip()[:1] == b"(" or before == b"module" else None
    if kind == "write":
        rest = after[4:] if after.startswith(b"Sync") else after
        if rest.lstrip()[:1] != b"(":
            return None
        if data[hit.start:end] == b"chmod":
            return hit  # its mode is read, not its path
        # a write outside the package names the outside within the window `_outside` reads
        # (the path, or the declaration of the variable handed in); a path handed in by
        # name may name it where the function is called (`_called_outside`), looked for
        # only in a file that names an outside at all (`uses_of`)
        around = data[max(0, hit.start - WINDOW):end + WINDOW]
        if any(word in around for word in _OUTSIDE_WORDS):
            return hit
        if _NAMED_PATH.match(data, end + (4 if after.startswith(b"Sync") else 0)):
            hit.kind = "write-far"
            return hit
        return None
    if kind == "credentials":
        # a store's path: a dot-name (`.npmrc`) is one; a bare word (`Chrome`, `Exodus`) is
        # one beside a path separator (not a browser's name in a user-agent test)
        word = data[hit.start:end]
        around = data[max(0, hit.start - 64):end + 64]
        return hit if word[:1] == b"." or b"/" in around or b"\\" in around else None
    followers = _FOLLOWED_BY.get(kind)
    if followers is not None:
        return hit if after.lstrip()[:1] in followers else None
    if kind == "global-index":
        return None if after[1:2] in (b"'", b'"') else hit
    return hit


def _far_writes(hits: list[_Hit], far: bool) -> list[_Hit]:
    """The hits with the writes of a path handed in by name kept only in a file that names
    an outside somewhere (`far`), the first `FOLLOWED_WRITES` of them."""
    followed = FOLLOWED_WRITES if far else 0
    kept: list[_Hit] = []
    for hit in hits:
        if hit.kind == "write-far":
            if followed == 0:
                continue
            followed -= 1
        kept.append(hit)
    return kept


def _windows(data: bytes, hits: list[_Hit]) -> list[tuple[int, int, list[_Hit]]]:
    """The hits grouped into windows of code to parse, each begun at a line's or a
    statement's edge and never inside a block comment (prose parsed as code sends the
    parser's error recovery through every quote and backtick of it: 30 times the cost)."""
    windows: list[tuple[int, int, list[_Hit]]] = []
    for hit in hits:  # in order of their start
        start = max(0, hit.start - WINDOW)
        end = min(len(data), hit.end + WINDOW)
        if windows and start <= windows[-1][1]:
            open_start, open_end, open_group = windows[-1]
            windows[-1] = (open_start, max(open_end, end), [*open_group, hit])
            continue
        windows.append((start, end, [hit]))
    placed: list[tuple[int, int, list[_Hit]]] = []
    for start, end, group in windows:
        first, last = group[0].start, max(hit.end for hit in group)
        if start > 0:
            edges = [at for at in (data.find(b"\n", start, first), data.find(b";", start, first),
                                   data.find(b"}", start, first)) if at >= 0]
            start = min(edges) + 1 if edges else start
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


def _parser() -> Parser:
    """This thread's parser (a parser is not shared between threads; making one per file
    would cost more than most files' reading)."""
    parser: Parser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = _PARSERS.parser = Parser(_LANGUAGE)
    return parser


def uses_of(data: bytes, budget: ReadBudget | None = None) -> Uses:
    """What the code in `data` (one file's bytes) can do, read as described above."""
    budget = budget if budget is not None else ReadBudget()
    modules: dict[str, None] = {}
    relative: dict[str, None] = {}
    hits = _hits(data, modules, relative)
    if hits is None:
        return Uses(unread=f"past {MAX_HITS:,} places where a capability may be")
    far = None
    if any(hit.kind == "write-far" for hit in hits):
        far = any(word in data for word in _FAR_WORDS)
        hits = _far_writes(hits, far)
    if not hits:  # most files: nothing to parse
        return Uses(modules=tuple(modules), requires=tuple(relative))
    reading = _Reading(data, _parser(), budget, modules=modules, follows=_FOLLOWS, far=far)
    for start, end, group in _windows(data, hits):
        if not budget.take(end - start):
            return Uses(tuple(reading.found.values()), tuple(reading.modules),
                        f"past the {PARSED_PER_TARBALL:,} bytes of code parsed per tarball",
                        tuple(relative))
        root = _parsed(reading, data[start:end])
        for hit in group:
            node = root.descendant_for_byte_range(hit.start - start, hit.end - start)
            if node is not None and _in_code(node, hit.kind):
                _classify(reading, node, hit, start, root)
    found = sorted(reading.found.values(), key=lambda use: (use.line, use.capability))
    return Uses(tuple(found), tuple(reading.modules), requires=tuple(relative))


def _parsed(reading: _Reading, window: bytes) -> Node:
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


# -- the parsed code ----------------------------------------------------------------------


def _text(node: Node) -> str:
    raw = node.text or b""
    return " ".join(raw[:400].decode("utf-8", "replace").split())[:_SHOWN]


def _in_code(node: Node, kind: str) -> bool:
    """Whether the word stands in code: not in a comment, nor (but for the words that are
    strings: module names, credentials paths) in a string."""
    strings = kind in ("module", "credentials", "home-path", "global-index", "fetch", "xhr",
                       "ethereum", "eval")
    current: Node | None = node
    while current is not None:
        if current.type == "comment" or (current.type == "regex"):
            return False
        if not strings and current.type in ("string", "template_string"):
            return False
        current = current.parent
    return True


def _use(reading: _Reading, capability: str, node: Node, offset: int) -> None:
    line = reading.line(offset + node.start_byte)
    key = (capability, line)
    if key not in reading.found:
        reading.found[key] = Use(capability, line, _text(node))


def _up(node: Node, *types: str) -> Node | None:
    """The nearest ancestor (or `node`) of one of `types`, within a few steps."""
    current: Node | None = node
    for _ in range(8):
        if current is None:
            return None
        if current.type in types:
            return current
        current = current.parent
    return None


def _string_node(node: Node) -> Node | None:
    return _up(node, "string", "template_string")


def _callee(node: Node) -> Node | None:
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


def _assigned(node: Node) -> Node | None:
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


def _defined_on(node: Node) -> Node | None:
    """The `Object.defineProperty(s)(...)` call `node` is an argument of, if any."""
    arguments = _up(node, "arguments")
    call = arguments.parent if arguments is not None else None
    if call is None or call.type != "call_expression":
        return None
    callee = _text(call.child_by_field_name("function") or call)
    return call if callee in ("Object.defineProperty", "Object.defineProperties",
                              "Reflect.defineProperty") else None


def _literal_arguments(call: Node) -> bool:
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


def _decoded(node: Node, root: Node, reading: _Reading, offset: int) -> bool:
    """Whether what runs at `node` was decoded or decrypted first: the function around it
    (or, at the top level, its statement and the declarations of the names it is handed)
    decodes something (`atob`, `Buffer.from`, a decipher, an inflate)."""
    scopes: list[Node] = []
    current: Node | None = node
    while current is not None:
        if current.type in _FUNCTIONS:
            scopes = [current]
            break
        if current.parent is not None and current.parent.type == "program":
            scopes = [current]
        current = current.parent
    arguments = node.child_by_field_name("arguments")
    for argument in arguments.named_children[:4] if arguments is not None else []:
        declared = _declaration(root, _text(argument)) if argument.type == "identifier" \
            else None
        if declared is not None:
            scopes.append(declared)
    for scope in scopes or [root]:
        text = reading.data[offset + scope.start_byte:offset + scope.end_byte]
        if any(word in text for word in _DECODING):
            return True
    return False


def _may_decode(code: bytes) -> bool:
    """Whether `code` names any decoding `_decoded` looks for."""
    return any(word in code for word in _DECODING)


def _dynamic(reading: _Reading, node: Node, hit: _Hit, offset: int, root: Node) -> None:
    """Dynamic code at `node`; decoded when the function around it decodes, read from a
    wider parse (`SCOPE` each side) than the window's."""
    _use(reading, DYNAMIC, node, offset)
    start, end = offset + node.start_byte, offset + node.end_byte
    wide_start, wide_end = max(0, start - SCOPE), min(len(reading.data), end + SCOPE)
    if reading.budget.take(wide_end - wide_start):
        # `_decoded` reads the code of either parse (the wide one, or the window's where the
        # wide tree has no node there): with no decoding word in both, it says no, unparsed
        low, high = min(wide_start, offset), max(wide_end, offset + root.end_byte)
        if not _may_decode(reading.data[low:high]):
            return
        wide = reading.parser.parse(reading.data[wide_start:wide_end]).root_node
        found = wide.descendant_for_byte_range(start - wide_start, end - wide_start)
        if found is not None:
            node, root, offset = found, wide, wide_start
    if _decoded(node, root, reading, offset):
        _use(reading, DECODED, node, offset)


def _outside(expression: Node | None, root: Node, reading: _Reading | None = None,
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
    climbs = depth > 0 or not _ANCHORED.match(_text(expression))
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
            found = max(found, _drive(_text(node)[1:]))  # its fragments are cut at escapes
        elif kind == "call_expression":
            name = _text(node.child_by_field_name("function") or node)
            if name.endswith("homedir"):
                return _USERS
            if name == "process.cwd":
                found = max(found, _PROJECT)
            decoded = _decoded_literal(node, name)
            if decoded is not None and _outside_text(decoded, True, climbs):
                return _USERS  # a path outside, hidden
        elif kind == "member_expression":
            owner = _text(node.child_by_field_name("object") or node)
            field_name = _text(node.child_by_field_name("property") or node)
            if (owner == "process.env" and field_name in _HOME_VARIABLES) or \
                    field_name == "homedir":  # `os.homedir` handed on as a value
                return _USERS
            if owner == "process.env" and field_name in _OUTSIDE_VARIABLES:
                found = max(found, _PROJECT)
            stack.append(node.child_by_field_name("object") or node)
            continue  # a property's name is no path
        elif kind == "identifier":
            text = _text(node)
            if text == "homedir":  # `import { homedir } from 'os'`, then `${homedir}/x`
                return _USERS
            if depth < 2 and followed < 4:
                followed += 1
                declared, where, at = _declaration(root, text, node.start_byte), root, offset
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
    literal = _text(named[0])[1:-1][:344]
    encoding = _text(named[1]).strip("'\"`") if len(named) > 1 else (
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


def _declared_before(reading: _Reading, name: str, at: int) -> tuple[Node, Node, int] | None:
    """The value `name` is declared with nearest before `at` in the file (`var Desktops =
    ...` at a module's head, `const o = Buffer.from(...)` a few lines up), looked for in the
    `_BEFORE` bytes before it, with the window parsed around it and its offset; None when
    there is none, or past the follows a file may make (`_FOLLOWS`)."""
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
        if not _ident_at(data, named - 1) and after[:1] == b"=" \
                and after[1:2] not in (b"=", b">") \
                and data[max(0, named - 8):named].rstrip().endswith(_DECLARING):
            break
    else:
        return None
    parsed = _parsed_around(reading, named, named + len(word))
    if parsed is None:
        return None
    declared = _declaration(parsed[0], name)
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
    for node in _named(root, name):
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


def _parsed_around(reading: _Reading, start: int, end: int) -> tuple[Node, int] | None:
    """The window around `start:end` parsed (its edges placed as `_windows` places them),
    and its offset; None past the budget."""
    [(first, last, _group)] = _windows(reading.data, [_Hit(start, end, "call")])
    if not reading.budget.take(last - first):
        return None
    return reading.parser.parse(reading.data[first:last]).root_node, first


def _named(root: Node, name: str) -> list[Node]:
    """The identifiers `name` in the window, found from its bytes (at most 50)."""
    text = root.text or b""
    word = name.encode()
    found: list[Node] = []
    at = text.find(word)
    while at >= 0 and len(found) < 50:
        if not _ident_at(text, at - 1) and not _ident_at(text, at + len(word)):
            start = root.start_byte + at
            node = root.descendant_for_byte_range(start, start + len(word))
            if node is not None and node.type in ("identifier", "shorthand_property_identifier"):
                found.append(node)
        at = text.find(word, at + len(word))
    return found


def _declaration(root: Node, name: str, before: int | None = None) -> Node | None:
    """The value `name` is declared with in the window (`const dir = path.join(...)`): the
    first declaration, or with `before` the last one before that byte of the window (the
    one in scope where minified code declares the same short name twice)."""
    found = None
    for node in _named(root, name):
        parent = node.parent
        if parent is not None and parent.type == "variable_declarator" \
                and parent.child_by_field_name("name") == node:
            if before is None:
                return parent.child_by_field_name("value")
            if node.start_byte < before:
                found = parent.child_by_field_name("value")
    return found


def _classify(reading: _Reading, node: Node, hit: _Hit, offset: int, root: Node) -> None:
    """Record what the word at `node` shows, if anything, by where it stands in the tree."""
    kind = hit.kind
    if kind == "module":
        _module(reading, node, offset)
    elif kind == "require-call":
        _require_call(reading, node, hit, offset, root)
    elif kind == "require":
        # `require` read as a value (`var r = require`): every module it loads is computed
        parent = node.parent
        if node.type == "identifier" and _callee(node) is None and parent is not None \
                and parent.type in ("variable_declarator", "assignment_expression",
                                    "arguments", "sequence_expression", "pair") \
                and parent.child_by_field_name("left") != node:
            _use(reading, DYNAMIC, parent, offset)
    elif kind == "env-home":
        _use(reading, HOME, node.parent or node, offset)
    elif kind == "env":
        _environment(reading, node, offset, root)
    elif kind == "binding":
        member = _up(node, "member_expression")
        if member is not None and _callee(member) is not None:
            what = NATIVE if "dlopen" in _text(member) else PROCESS
            _use(reading, what, member.parent or member, offset)
    elif kind == "homedir":
        call = _callee(node.parent if node.type == "property_identifier" and node.parent
                       else node)
        if call is not None:
            _use(reading, HOME, call, offset)
    elif kind == "credentials":
        string = _string_node(node)
        if string is not None:
            _use(reading, CREDENTIALS, string, offset)
    elif kind == "home-path":
        string = _string_node(node)
        if string is not None and string.start_byte + offset + 1 == hit.start:
            _use(reading, HOME, string, offset)
    elif kind in ("eval", "function", "constructor", "compile", "wasm", "worker"):
        _code(reading, node, hit, offset, root)
    elif kind in ("fetch", "xhr", "socket", "beacon", "ethereum", "global-index"):
        _globals(reading, node, hit, offset)
    elif kind in ("write", "write-far"):
        _write(reading, node, offset, root)


def _module(reading: _Reading, node: Node, offset: int) -> None:
    string = _string_node(node)
    if string is None or string.parent is None:
        return
    name = (string.text or b"")[1:-1].decode("utf-8", "replace").removeprefix("node:")
    parent = string.parent
    loaded = parent.type in ("import_statement", "export_statement")
    if parent.type == "arguments" and parent.parent is not None:
        callee = parent.parent.child_by_field_name("function")
        loaded = callee is not None and (callee.type == "import" or _text(callee) in (
            "require", "module.require"))
    if not loaded:
        return
    where = parent.parent if parent.type == "arguments" and parent.parent else parent
    if name in NETWORK_MODULES:
        _use(reading, NETWORK, where, offset)
    elif name in PROCESS_MODULES:
        _use(reading, PROCESS, where, offset)
    elif name in DYNAMIC_MODULES:
        _use(reading, DYNAMIC, where, offset)


def _require_call(reading: _Reading, node: Node, hit: _Hit, offset: int, root: Node) -> None:
    """A module loaded by a name not written whole: dynamic code when the name is assembled
    (`'child_' + 'process'`, a template, a join) or decoded; a path handed in a variable or
    built with `path.join(__dirname, ...)` loads one of the package's own files."""
    call = _callee(node) if node.type in ("identifier", "import") else None
    if call is None:
        return
    arguments = call.child_by_field_name("arguments")
    first = arguments.named_children[0] if arguments and arguments.named_children else None
    if first is None or first.type == "string":
        return
    if _decoded(call, root, reading, offset):
        _use(reading, DYNAMIC, call, offset)
        _use(reading, DECODED, call, offset)
    elif _assembled(first, root):
        _use(reading, DYNAMIC, call, offset)


def _assembled(expression: Node, root: Node, depth: int = 0) -> bool:
    """Whether a module name is put together from pieces rather than a path: a `+` over
    strings, a template whose head is no path or scoped name, an array `join`."""
    kind = expression.type
    if kind == "binary_expression":
        return any(child.type in ("string", "template_string")
                   for child in expression.named_children) and "__dirname" not in _text(
            expression)
    if kind == "template_string":
        parts = expression.named_children
        if not any(part.type == "template_substitution" for part in parts):
            return False
        head = _text(parts[0]) if parts and parts[0].type == "string_fragment" else ""
        return not head.startswith(("@", ".", "/")) and "/" not in head
    if kind == "call_expression":
        callee = _text(expression.child_by_field_name("function") or expression)
        return callee.endswith((".join", "fromCharCode", ".reverse", ".concat")) and not \
            callee.startswith(("path.", "path2.", "posix.", "require(\"path"))
    if kind == "identifier" and depth == 0:
        declared = _declaration(root, _text(expression))
        return declared is not None and _assembled(declared, root, depth + 1)
    return False


def _environment(reading: _Reading, node: Node, offset: int, root: Node) -> None:
    """`process.env` whole: serialised, spread, enumerated or handed to a call (not as a
    child process's `env`), or its alias (`const e = process.env`) so used in the window."""
    member = _up(node, "member_expression", "subscript_expression")
    if member is None:
        return
    if _wholesale(member):
        shown = member.parent or member
        _use(reading, ENVIRONMENT, shown.parent if shown.type == "arguments" and shown.parent
             else shown, offset)
        return
    parent = member.parent
    if parent is not None and parent.type == "variable_declarator":
        name = parent.child_by_field_name("name")
        if name is not None and name.type == "object_pattern" and any(
                child.type == "rest_pattern" for child in name.named_children):
            _use(reading, ENVIRONMENT, parent, offset)
        elif name is not None and name.type == "identifier":
            alias = _text(name)
            for use in _named(root, alias):
                if use != name and _wholesale(use):
                    shown = use.parent or use
                    _use(reading, ENVIRONMENT, shown.parent if shown.type == "arguments"
                         and shown.parent else shown, offset)
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
            callee = _text(current.child_by_field_name("function") or current)
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
        return key is not None and (_text(key).strip("'\"") != "env" or _serialised(parent))
    if kind in ("spread_element", "arguments"):
        # a child process's environment: `{env: {...process.env}}`, `Object.assign({},
        # process.env, {...})` under an `env:` key
        holder = _up(parent, "pair")
        key = holder.child_by_field_name("key") if holder is not None else None
        return key is None or _text(key).strip("'\"") != "env" or _serialised(parent)
    if kind == "for_in_statement":
        return parent.child_by_field_name("right") == node
    return kind in ("template_substitution", "array", "return_statement")


def _code(reading: _Reading, node: Node, hit: _Hit, offset: int, root: Node) -> None:
    kind = hit.kind
    if kind == "eval":
        string = _string_node(node)
        if string is not None:  # `window['eval']`, `(0, self["eval"])`
            holder = string.parent
            if holder is None or holder.type != "subscript_expression":
                return
            node = holder
        elif node.type == "property_identifier":
            member = node.parent
            target = member.child_by_field_name("object") if member is not None else None
            if member is None or target is None or _text(target) not in _GLOBALS:
                return
            node = member
        elif node.type != "identifier":
            return
        call = _callee(node)
        if call is not None and _literal_arguments(call):
            return
        _dynamic(reading, call or node, hit, offset, root)
    elif kind == "function":
        if node.type != "identifier":
            return
        call = _callee(node)
        arguments = call.child_by_field_name("arguments") if call is not None else None
        if call is None or arguments is None or not arguments.named_children \
                or _literal_arguments(call):
            return
        _dynamic(reading, call, hit, offset, root)
    elif kind == "constructor":
        member = _up(node, "member_expression")
        if member is None:
            return
        owner = _text(member.child_by_field_name("object") or member)
        call = _callee(member)
        if owner == "module" and call is not None and call.type == "new_expression":
            _dynamic(reading, call, hit, offset, root)  # a module compiled from text
        elif call is not None and call.type == "call_expression" \
                and not _literal_arguments(call) and owner not in ("this", "super"):
            _dynamic(reading, call, hit, offset, root)  # `(function(){}).constructor(code)`
    elif kind == "compile":
        member = _up(node, "member_expression")
        call = _callee(member) if member is not None else None
        if call is not None:
            _dynamic(reading, call, hit, offset, root)
    elif kind == "wasm":
        member = _up(node, "member_expression")
        call = _callee(member) if member is not None else None
        if call is not None and member is not None and _text(
                member.child_by_field_name("property") or member) in (
                "instantiate", "compile", "Module", "instantiateStreaming",
                "compileStreaming"):
            _dynamic(reading, call, hit, offset, root)
    elif kind == "worker":
        call = _up(node, "new_expression")
        if call is not None and any(
                pair.type == "pair" and _text(pair).replace(" ", "") == "eval:true"
                for pair in _descendants(call, 200)):
            _use(reading, PROCESS, call, offset)  # worker_threads over code text


def _descendants(node: Node, limit: int) -> list[Node]:
    found: list[Node] = []
    stack = [node]
    while stack and len(found) < limit:
        current = stack.pop()
        found.append(current)
        stack.extend(current.named_children)
    return found


def _globals(reading: _Reading, node: Node, hit: _Hit, offset: int) -> None:
    """Network globals called (`fetch(...)`, `new WebSocket(...)`), and globals replaced or
    redefined (`window.fetch = ...`, `XMLHttpRequest.prototype.open = ...`,
    `Object.defineProperty(window, 'ethereum', ...)`, `window[key] = ...`)."""
    kind = hit.kind
    string = _string_node(node)
    if kind == "global-index":
        subscript = _up(node, "subscript_expression")
        if subscript is not None and _text(subscript.child_by_field_name("object")
                                           or subscript) in _GLOBALS:
            assigned = _assigned(subscript)
            if assigned is not None:
                _use(reading, INTERCEPTS, assigned, offset)
        return
    if string is not None:  # `window['fetch']`, `defineProperty(window, 'ethereum', ...)`
        holder = string.parent
        if holder is not None and holder.type == "subscript_expression":
            node = holder
        elif _defined_on(string) is not None:
            _use(reading, INTERCEPTS, _defined_on(string) or string, offset)
            return
        else:
            return
    elif node.type == "property_identifier":
        member = node.parent
        if member is None:
            return
        target = _text(member.child_by_field_name("object") or member)
        if target not in _GLOBALS and kind not in ("ethereum", "beacon") and not (
                kind == "xhr" and target.endswith("XMLHttpRequest")):
            return
        node = member
    elif node.type != "identifier":
        return
    assigned = _assigned(node)
    if assigned is not None and kind in ("fetch", "xhr", "ethereum"):
        _use(reading, INTERCEPTS, assigned, offset)
        return
    defined = _defined_on(node)
    if defined is not None and kind in ("fetch", "xhr", "ethereum"):
        _use(reading, INTERCEPTS, defined, offset)
        return
    if kind == "ethereum":
        return  # reading a wallet's provider is what a dapp does; hooking it is not
    call = _callee(node)
    if call is not None:
        _use(reading, NETWORK, call, offset)


def _write(reading: _Reading, node: Node, offset: int, root: Node) -> None:
    name = _text(node)
    if name not in _WRITERS or node.type not in ("identifier", "property_identifier"):
        return
    target = node.parent if node.type == "property_identifier" else node
    call = _callee(target) if target is not None else None
    if call is None or call.type != "call_expression":
        return
    arguments = call.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    path = named[_WRITERS[name]] if len(named) > _WRITERS[name] else None
    if name.startswith("chmod"):
        mode = named[1] if len(named) > 1 else None
        if mode is not None and _executable(mode):
            _use(reading, NATIVE, call, offset)  # a file made executable: a binary to run
        return
    owner = target.child_by_field_name("object") if target is not None \
        and target.type == "member_expression" else None
    if owner is not None and _text(owner) == "FS":
        return  # emscripten's file system, in memory: `FS.mkdir("/home/web_user")`
    reach = _outside(path, root)
    if reach < _USERS and path is not None and path.type == "identifier":
        reach = max(reach, _called_outside(reading, call, _WRITERS[name], offset, root))
    if reach:
        _use(reading, WRITES, call, offset)
    if reach == _USERS:
        _use(reading, WRITES_HOME, call, offset)


def _called_outside(reading: _Reading, call: Node, index: int, offset: int,
                    root: Node) -> int:
    """Where a write's path, handed in by name, points where its function is called (as
    `_outside` grades it, the furthest of its callers'): the path traced to a parameter of
    the named function around the write (in the window's tree, else parsed wider, `_REACH`
    each side), and each call of that function in the file (`_CALLERS` at most) read for
    that argument; only in a file that names an outside at all (`_FAR_WORDS`). peacenotwar
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
    while current is not None and current.type not in _FUNCTIONS:
        current = current.parent
    return current


def _function_name(function: Node) -> str | None:
    """The name a function is called by: its declaration's, or the variable it is kept in."""
    named = function.child_by_field_name("name")
    if named is not None:
        return _text(named)
    parent = function.parent
    if parent is not None and parent.type == "variable_declarator":
        declared = parent.child_by_field_name("name")
        return _text(declared) if declared is not None and declared.type == "identifier" \
            else None
    return None


def _parameters(function: Node) -> list[str]:
    """A function's parameters' names by position (a default's name; '' for a pattern)."""
    listed = function.child_by_field_name("parameters") or function.child_by_field_name(
        "parameter")
    if listed is None:
        return []
    if listed.type == "identifier":  # `dir => ...`
        return [_text(listed)]
    names = []
    for parameter in listed.named_children:
        if parameter.type == "assignment_pattern":
            parameter = parameter.child_by_field_name("left") or parameter
        names.append(_text(parameter) if parameter.type == "identifier" else "")
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
            text = _text(node)
            if text and text in parameters:
                return parameters.index(text)
            declared = _declaration(root, text, node.start_byte) if depth == 0 else None
            if declared is not None:
                stack.append((declared, depth + 1))
            continue
        stack.extend((child, depth) for child in node.named_children)
    return None


def _arguments_at(reading: _Reading, name: str,
                  index: int) -> list[tuple[Node, Node, int]]:
    """The argument at `index` of each call of the function `name` in the file (at most
    `_CALLERS` looked at), each with the window it was parsed in and its offset."""
    data, word = reading.data, name.encode() + b"("
    found: list[tuple[Node, Node, int]] = []
    at = data.find(word)
    looked = 0
    while at >= 0 and looked < _CALLERS and reading.follows > 0:
        looked += 1
        if not _ident_at(data, at - 1) and data[max(0, at - 9):at] != b"function ":
            reading.follows -= 1
            parsed = _parsed_around(reading, at, at + len(name))
            if parsed is None:
                break
            root, first = parsed
            node = root.descendant_for_byte_range(at - first, at - first + len(name))
            call = _callee(node) if node is not None else None
            arguments = call.child_by_field_name("arguments") if call is not None else None
            if arguments is not None and len(arguments.named_children) > index:
                found.append((arguments.named_children[index], root, first))
        at = data.find(word, at + len(word))
    return found


def _executable(mode: Node) -> bool:
    text = _text(mode).strip("'\"")
    try:
        value = int(text, 0) if not text.isdigit() or text.startswith("0o") else (
            int(text, 8) if len(text) in (3, 4) and text.startswith(("0", "7", "5"))
            else int(text))
    except ValueError:
        return "x" in text or "755" in text or "777" in text
    return bool(value & 0o111)
