"""Where in one file a capability may be, found at memory speed: Aho-Corasick automata over a
few dozen words (the modules, globals and calls that show one, the paths outside the package)
cut at identifier boundaries, and the bytes around each word read to settle most places
without a parse (`process.env.NODE_ENV`, `require('./x')`); only the rest is parsed
(`npm.js.windows`). Past `MAX_HITS` places the file is `unread`, never clean."""

from __future__ import annotations

import re
from dataclasses import dataclass

import ahocorasick_rs

__all__ = ["DYNAMIC_MODULES", "FAR_WORDS", "FOLLOWED_WRITES", "HOME_VARIABLES", "MAX_HITS",
           "MAX_URLS", "NETWORK_MODULES", "OUTSIDE_VARIABLES", "PROCESS_MODULES", "WINDOW",
           "WRITING_CALLS", "Hit", "capped_far_writes", "hits_of", "ident_at"]

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
MAX_HITS = 50_000
"""Places looked at per file at most: past it the file is `unread`."""
MAX_URLS = 50_000
"""URLs' places looked at per file at most (`hits_of`'s `urls`), apart from `MAX_HITS` (a
list of links is data, not a capability): past it the file is `unread`, never clean, so no
padding of links hides a destination written after them."""
_CHUNK = 1024 * 1024  # bytes scanned at a time, so a hostile file's hits stop at the bound
_IDENT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
HOME_VARIABLES = frozenset({"HOME", "USERPROFILE", "HOMEPATH", "APPDATA", "LOCALAPPDATA",
                            "XDG_CONFIG_HOME", "XDG_DATA_HOME"})
OUTSIDE_VARIABLES = HOME_VARIABLES | {"INIT_CWD"}
_OUTSIDE_WORDS = (b"homedir", b"HOME", b"USERPROFILE", b"APPDATA", b"INIT_CWD", b"XDG_",
                  b"cwd(", b"'/", b'"/', b"`/", b"~", b"..", b":\\", b"base64", b"atob(")
"""What a path outside the package is written with (`_outside`)."""
FAR_WORDS = (b"cwd(", b"base64", b"atob", b"HOME", b"homedir", b"USERPROFILE", b"APPDATA",
             b"INIT_CWD")
"""What a file names where a path handed to a write by name may come from outside
(`write-far`): without one of these, such a write is not followed to its callers. Looked
for in this order, the most often found first (`cwd(` in 18 of 30 large real files that
write, none of the last four in more than one): each search of a 9 MB bundle costs
milliseconds, and the first found ends them."""
FOLLOWED_WRITES = 8
"""Writes of a path handed in by name followed to their callers per file, at most: each a
wider parse and up to `_CALLERS` small ones."""
_NAMED_PATH = re.compile(rb"\s{0,8}\(\s{0,40}[A-Za-z_$][\w$]{0,64}\s{0,8}[,)]")
WRITING_CALLS = {"writeFile": 0, "writeFileSync": 0, "appendFile": 0, "appendFileSync": 0,
                 "createWriteStream": 0, "copyFile": 1, "copyFileSync": 1, "cp": 1,
                 "cpSync": 1, "symlink": 1, "symlinkSync": 1, "rename": 1, "renameSync": 1,
                 "rm": 0, "rmSync": 0, "unlink": 0, "unlinkSync": 0, "mkdir": 0,
                 "mkdirSync": 0, "chmod": 0, "chmodSync": 0}
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
    *[(name.encode(), "write") for name in sorted(WRITING_CALLS, key=len, reverse=True)
      if not name.endswith("Sync") and name not in ("cp", "rm")],
    (b"rmSync", "write"), (b"cpSync", "write"),
    # a URL's host: kept apart (`hits_of`'s `urls`), never a hit itself; by its scheme's
    # last letters (http, https, ws, wss, in either case): `://` alone, three bytes of
    # which the first is a minified bundle's commonest, costs the scan 60%, these 5%
    *[(f"{tail}://".encode(), "url") for tail in ("tp", "ps", "ws", "ss", "TP", "PS", "WS", "SS")],
    (b"hostname", "host-option"),  # `https.request({ hostname: 'x.test' })`
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
                         "host-option",
                         "worker", "fetch", "xhr", "socket", "beacon", "ethereum", "write",
                         "global-index"})


@dataclass(slots=True)
class Hit:
    """A word found: where its identifier (or string) stands, and what it may be."""

    start: int
    end: int
    kind: str


def ident_at(data: bytes, at: int) -> bool:
    return 0 <= at < len(data) and data[at] in _IDENT


def hits_of(data: bytes, modules: dict[str, None], relative: dict[str, None],
            urls: list[int] | None = None) -> list[Hit] | None:
    """Where a capability may be, the words cut at identifier boundaries (`evaluate` is not
    `eval`), each narrowed to the identifier or string the tree holds; None past
    `MAX_HITS`. A module loaded by a plain string is settled here, its name kept; where each
    `://` ends, in `urls` (the first `MAX_URLS`: `npm.js.destinations` reads the hosts)."""
    found: list[Hit] = []
    ident, size, kinds, whole = _IDENT, len(data), _KINDS, _WHOLE_WORD  # the hot loop's
    matches = _matches(_AUTOMATON, data)
    if len(matches) > 4 * MAX_HITS:
        return None  # `_matches` stopped short: what follows was never looked at
    for index, start, end in matches:
        kind = kinds[index]
        if kind == "url":  # in the same scan as the words: no pass of its own over the file
            if urls is not None:
                if len(urls) >= MAX_URLS:
                    return None
                urls.append(end)
            continue
        if kind in whole and ((start > 0 and data[start - 1] in ident) or (
                kind != "write" and end < size and data[end] in ident
                and data[end - 1] in ident)):
            continue
        if data[end - 1] in _OPENING:
            end -= 1
        if data[start] == _DOT:
            start += 1
        hit = _quick(data, Hit(start, end, kind), modules, relative)
        if hit is not None:
            found.append(hit)
    for automaton, kind in zip(_PATHS, ("credentials", "home-path"), strict=True):
        found += [hit for _index, start, end in _matches(automaton, data)
                  if (hit := _quick(data, Hit(start, end, kind), modules, relative))
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
_HOST_OPTION = re.compile(rb"['\"]?\s{0,4}:\s{0,4}['\"`][A-Za-z0-9]")
_QUOTED = re.compile(rb"(['\"])([^'\"\\\n]{0,256})\1")
"""A call's first argument that is a plain string (no escape, no `${`), and a quoted name:
matched where the word ends (one anchored match, not a scan)."""


def _quick(data: bytes, hit: Hit, modules: dict[str, None],
           relative: dict[str, None]) -> Hit | None:
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
            return Hit(at, at + len(literal) + 2, "module")  # confirmed by the parse
        return None
    if kind == "env":
        if after[:1] in (b".", b"["):
            variable = after[1:].lstrip(b"'\"")
            length = next((i for i, c in enumerate(variable) if c not in _IDENT), len(variable))
            if variable[:length].decode("ascii") in OUTSIDE_VARIABLES:
                hit.kind = "env-home"
                return hit
            return None  # one variable by name: not the environment whole
        return None if ident_at(data, end) else hit
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
    if kind == "host-option":  # a request's options naming its host in a plain string
        return hit if _HOST_OPTION.match(data, end) else None
    return hit


def capped_far_writes(hits: list[Hit], far: bool) -> list[Hit]:
    """The hits with the writes of a path handed in by name kept only in a file that names
    an outside somewhere (`far`), the first `FOLLOWED_WRITES` of them."""
    followed = FOLLOWED_WRITES if far else 0
    kept: list[Hit] = []
    for hit in hits:
        if hit.kind == "write-far":
            if followed == 0:
                continue
            followed -= 1
        kept.append(hit)
    return kept
