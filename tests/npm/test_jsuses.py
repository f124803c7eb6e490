"""What one file's code can do (`npm.jsuses`): each capability read where the parser places
the word (a call, an assignment, a module loaded), and the same words in a comment, a string,
prose or an ordinary use not read as one."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorgate.npm.js import words
from mirrorgate.npm.jsuses import (
    CREDENTIALS,
    DECODED,
    DYNAMIC,
    ENVIRONMENT,
    HOME,
    INTERCEPTS,
    NATIVE,
    NETWORK,
    PROCESS,
    WRITES,
    WRITES_HOME,
    ReadBudget,
    uses_of,
)
from tests.servers.payloads import (
    flatmap_payload,
    interceptor,
    own_walk,
    protest_writer,
    webhook_stealer,
    wiper,
)

RELEASES = Path(__file__).parent / "fixtures" / "releases"


@pytest.mark.parametrize(("code", "capability"), [
    ("const cp = require('child_process');", PROCESS),
    ("const { exec } = require(\"node:child_process\");", PROCESS),
    ("import { spawn } from 'child_process';", PROCESS),
    ("const execa = require('execa');", PROCESS),
    ("process.binding('spawn_sync');", PROCESS),
    ("new Worker(source, { eval: true });", PROCESS),
    ("const https = require('https');", NETWORK),
    ("import net from 'node:net';", NETWORK),
    ("const { fetch } = await import('undici');", NETWORK),
    ("fetch('https://a.test/x').then(r => r.json());", NETWORK),
    ("const x = new XMLHttpRequest();", NETWORK),
    ("const s = new WebSocket('wss://a.test');", NETWORK),
    ("navigator.sendBeacon('/t', data);", NETWORK),
    ("send(JSON.stringify(process.env));", ENVIRONMENT),
    ("for (const k in process.env) { out.push(k); }", ENVIRONMENT),
    ("const copy = { ...process.env };", ENVIRONMENT),
    ("const { ...all } = process.env;", ENVIRONMENT),
    ("const e = process.env;\npost(JSON.stringify(e));", ENVIRONMENT),
    ("const home = os.homedir();", HOME),
    ("const dir = process.env.HOME + '/.config';", HOME),
    ("const f = '~/.config/app.json';", HOME),
    ("fs.readFileSync(path.join(os.homedir(), '.npmrc'));", CREDENTIALS),
    ("const key = path.join(home, '.ssh', 'id_rsa');", CREDENTIALS),
    ("const store = path.join(home, 'Library/Application Support/Exodus/exodus.wallet');",
     CREDENTIALS),
    ("fs.writeFileSync(path.join(os.homedir(), '.bashrc'), line);", WRITES),
    ("fs.appendFileSync(process.env.INIT_CWD + '/.git/hooks/pre-commit', hook);", WRITES),
    ("const target = '../../.git/hooks/commit-msg';\nfs.writeFileSync(target, hook);", WRITES),
    ("fs.writeFileSync(`${os.homedir}/Desktop/x.txt`, text);", WRITES),
    ("fs.writeFile('C:\\\\Users\\\\Public\\\\x.txt', text, done);", WRITES),
    ("fs.rmSync(path.resolve(Buffer.from('Li4v', 'base64').toString()), {recursive: true});",
     WRITES),
    ("function put(file, text) { fs.writeFileSync(file, text); }\n"
     "put(path.join(os.homedir(), '.profile'), line);", WRITES),
    ("fs.appendFileSync(path.join(process.env.HOME, '.bashrc'), line);", WRITES_HOME),
    ("fs.writeFile('C:\\\\Users\\\\Public\\\\x.txt', text, done);", WRITES_HOME),
    ("fs.rmSync(path.resolve(Buffer.from('Li4v', 'base64').toString()), {recursive: true});",
     WRITES_HOME),
    ("const hook = require('discord.js');", NETWORK),
    ("import nodemailer from 'nodemailer';", NETWORK),
    ("eval(code);", DYNAMIC),
    ("(0, eval)(source);", DYNAMIC),
    ("window['eval'](source);", DYNAMIC),
    ("const f = new Function('a', body);", DYNAMIC),
    ("require('vm').runInNewContext(code);", DYNAMIC),
    ("const m = require('child_' + 'process');", DYNAMIC),
    ("var r = require;", DYNAMIC),
    ("WebAssembly.instantiate(bytes);", DYNAMIC),
    ("eval(atob(blob));", DECODED),
    ("new Function(Buffer.from(s, 'base64').toString())();", DECODED),
    ("fs.chmodSync(binary, 0o755);", NATIVE),
    ("process.dlopen(module, file);", NATIVE),
    ("window.fetch = function (url) { return steal(url); };", INTERCEPTS),
    ("XMLHttpRequest.prototype.open = hooked;", INTERCEPTS),
    ("window.ethereum.request = hooked;", INTERCEPTS),
    ("Object.defineProperty(window, 'ethereum', { get: () => fake });", INTERCEPTS),
    ("window[key] = wrapped;", INTERCEPTS),
])
def test_a_capability_is_read_where_the_code_uses_it(code: str, capability: str) -> None:
    found = uses_of(code.encode())

    assert capability in found.capabilities, found


@pytest.mark.parametrize("code", [
    "// require('child_process') would do it\nmodule.exports = 1;",
    "/* eval(atob(x)) in a comment */ exports.a = 1;",
    "const message = 'we never eval user input, nor require(\"https\")';",
    "if (process.env.NODE_ENV === 'production') { debug = false; }",
    "const level = process.env['LOG_LEVEL'] || 'info';",
    "spawnOptions = { env: process.env, stdio: 'inherit' };",
    "const g = Function('return this')();",
    "const isFn = typeof x === 'function' || x instanceof Function;",
    "const client = this.fetch(url);",
    "exports.evaluate = function evaluate(node) { return node.value; };",
    "const protocol = url.protocol === 'https:' ? 'https' : 'http';",
    "fs.writeFileSync(path.join(__dirname, 'build', 'config.json'), data);",
    "fs.writeFileSync(path.join(__dirname, '..', 'cache', 'index.json'), data);",
    "fs.writeFileSync(`${dir}/out/report.json`, data);",
    "fs.writeFileSync(''.concat(outDir, '/index.html'), html);",
    "fs.mkdirSync(path.resolve(Buffer.from('Li9idWlsZA==', 'base64').toString()));",
    "function put(file, text) { fs.writeFileSync(file, text); }\n"
    "put(path.join(__dirname, 'cache.json'), data);\nput(target, data);",
    "const mod = require(path.join(__dirname, 'lib', name));",
    "const prov = window.ethereum; prov.request({ method: 'eth_accounts' });",
    "self['webpackChunk'] = self['webpackChunk'] || [];",
    " * @param {Function} callback called with the fetched data",
])
def test_the_same_words_where_no_capability_is_used_are_not_read_as_one(code: str) -> None:
    found = uses_of(code.encode())

    assert found.found == (), found


# query-string 10.0.0's base.js, line 138: a `//` comment longer than a parse window names
# `openapi-fetch.` at its end, and the next line starts a statement
_LONG_COMMENT = (
    b"\t\tcase 'separator': {\n\t\t\treturn (key, value, accumulator) => {\n"
    b"\t\t\t\t// Split the raw value before decoding. A percent-encoded separator (`%2C`) is"
    b" part of an item, only a literal separator delimits items. This follows RFC 6570"
    b" \xc2\xa73.2.8, where list members are percent-encoded and joined with a literal `,`, and"
    b" matches `stringify()`, `qs`, and OpenAPI clients such as swagger-js and openapi-fetch.\n"
    b"\t\t\t\tconst isArray = typeof value === 'string'"
    b" && value.includes(options.arrayFormatSeparator);\n")


def test_a_word_at_the_end_of_a_comment_longer_than_a_window_is_read_as_comment() -> None:
    # a window begun inside the comment parsed `fetch.` + the next line's `const` as code:
    # query-string 10.0.0 refused as intercepting `fetch`, the one false positive of 2,308
    # updates; the window now begins at the line's start
    assert uses_of(_LONG_COMMENT).found == ()


def test_an_interception_after_a_comment_longer_than_a_window_is_still_read() -> None:
    # the control: the same long comment, then the chalk/debug shape's hook of `fetch`
    code = _LONG_COMMENT + b"window.fetch = function (url) { return steal(url); };\n"

    assert INTERCEPTS in uses_of(code).capabilities


def test_each_use_names_its_line_and_the_call() -> None:
    code = b"'use strict';\n\nconst a = 1;\nconst cp = require('child_process');\n"

    [use] = uses_of(code).found

    assert (use.capability, use.line, use.call) == (PROCESS, 4, "require('child_process')")


def test_bare_modules_required_are_kept_for_bundled_dependencies() -> None:
    found = uses_of(b"const a = require('left-pad'); const b = require('./local');")

    assert found.modules == ("left-pad",)


def test_the_chalk_debug_interceptor_is_read_through_its_obfuscation() -> None:
    found = uses_of(interceptor("colour-kit"))

    assert INTERCEPTS in found.capabilities
    assert any("window[_0x3ce1(0x0)]" in use.call for use in found.found)


def test_the_flatmap_stream_payload_compiles_decrypted_text_at_require() -> None:
    found = uses_of(flatmap_payload())

    assert {DYNAMIC, DECODED} <= found.capabilities
    assert any("new module.constructor" in use.call for use in found.found)


@pytest.mark.parametrize("code", [
    "fs.writeFileSync(path.join(process.cwd(), 'index.js'), '');",
    "fs.mkdirSync(process.env.INIT_CWD + '/.husky');",
    "fs.writeFileSync('/etc/app.conf', text);",
    "FS.mkdir('/home/web_user');",
])
def test_a_write_into_the_project_or_elsewhere_is_outside_but_not_into_the_home(
        code: str) -> None:
    found = uses_of(code.encode()).capabilities

    assert WRITES_HOME not in found
    assert (WRITES in found) == (not code.startswith("FS."))  # emscripten's FS: in memory


def test_a_token_stealer_posting_through_a_chat_webhook_reaches_the_network() -> None:
    # an0n-chat-lib 0.1.0: no http, no fetch; discord.js's WebhookClient is its network
    found = uses_of(webhook_stealer())

    assert {NETWORK, HOME, CREDENTIALS} <= found.capabilities
    assert any(use.call == 'require("discord.js")' for use in found.found)


def test_peacenotwar_writes_into_the_desktop_through_a_function_handed_the_path() -> None:
    # the write names only its parameter; the caller names `${Desktops}...`, declared at the
    # module's head from `os`'s `homedir`
    found = uses_of(protest_writer())

    [write] = [use for use in found.found if use.capability == WRITES]
    assert (write.line, write.call.split("(")[0]) == (9, "fs.writeFile")


def test_node_ipc_overwrites_each_file_of_a_walk_from_a_climb_hidden_in_base64() -> None:
    found = uses_of(wiper())

    assert {NETWORK, WRITES} <= found.capabilities
    assert any(use.call.startswith("a.writeFile(i,") for use in found.found)


def test_a_walk_that_writes_what_it_lists_inside_its_own_folder_writes_nothing_outside() -> None:
    # the same walk as node-ipc's, handed the package's own folder
    assert WRITES not in uses_of(own_walk()).capabilities


def test_a_real_bundle_reaches_the_network_and_nothing_else_it_is_held_for() -> None:
    bundle = (RELEASES / "axios-1.7.9" / "dist" / "node" / "axios.cjs").read_bytes()

    found = uses_of(bundle)

    assert NETWORK in found.capabilities
    assert not found.capabilities & {PROCESS, ENVIRONMENT, DECODED, WRITES, CREDENTIALS}
    assert found.unread is None


def test_a_file_past_the_parse_budget_is_unread_not_clean() -> None:
    code = b"\n".join([b"eval(x%d);" % i + b" " * 600 for i in range(40)])

    found = uses_of(code, ReadBudget(parsed=2_000))

    assert found.unread is not None
    assert "parsed per tarball" in found.unread


def test_a_file_of_nothing_but_places_to_look_stops_at_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(words, "MAX_HITS", 100)

    found = uses_of(b"eval(a);" * 1000)

    assert found.unread is not None
    assert "places where a capability may be" in found.unread
