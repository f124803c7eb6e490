"""The npm incidents of 2018-2026 rebuilt on their real predecessors, for the side-by-side bench.

Each `Incident` names the real release the attack was published after (its tarball downloaded
from the registry npm is configured with, at bench time), and its `Shape`: what the
compromised release changed, as the write-ups cited beside it describe it (install hooks
added or changed, files added, a payload appended to the entry file, dependencies added,
every file emptied). `successor` applies a shape to the predecessor's files, purely; the
payloads are `bench.payloads`' benign stand-ins with the real ones' capabilities. A package
an incident published beside (flatmap-stream, plain-crypto-js) is rebuilt on a real package's
code under its name. Three more shapes are the issue's own: the sleeper, and a payload in
`main` with no install script in a young and in an established package.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench import payloads
from bench.corpus import SHAPE, Case, Published, files_of, in_order, pack, stored
from bench.registry_history import created_of, time_of
from bench.release_signals import Reader

__all__ = ["INCIDENTS", "Incident", "Shape", "build_shapes", "entry_of", "successor"]

Files = dict[str, bytes]
_PROVENANCE = {"url": "https://registry.invalid/-/npm/v1/attestations/bench",
               "provenance": {"predicateType": "https://slsa.dev/provenance/v1"}}
"""A provenance attestation as the registry lists it in `dist` (the bench's own, for a
predecessor whose copy here carries none)."""


@dataclass(frozen=True)
class Shape:
    """What a compromised release changed against its predecessor."""

    scripts: Mapping[str, str] = field(default_factory=dict)
    """Install hooks set, new or replacing the predecessor's."""
    dependencies: Mapping[str, str] = field(default_factory=dict)
    """Dependencies added."""
    added: Mapping[str, Callable[[], bytes]] = field(default_factory=dict)
    """New files, by path inside the package."""
    appended: Callable[[], bytes] | None = None
    """A payload appended to the entry file (`main`, `exports`)."""
    required: str | None = None
    """A new file the entry file now loads first (`require` or `import`, as the entry is)."""
    emptied: bool = False
    """Every file but package.json gone (faker 6.6.6), before `added`."""


@dataclass(frozen=True)
class Incident:
    key: str
    package: str
    """The real package whose release the attack followed (or whose code it reused)."""
    base: str
    """The real version whose tarball is the predecessor."""
    after: str
    shape: Shape
    sources: tuple[str, ...]
    name: str | None = None
    """Published under this name instead (a package the incident published beside)."""
    before: str | None = None
    """The predecessor's version under `name` (a clean first release of it)."""
    provenance: bool = False
    """Both releases carry provenance from the same repository and workflow."""
    first_published: timedelta | None = None
    """How long before the judged release the package was first published, when it is not
    the real package's own age (the sleeper, a package published beside)."""
    new_package: bool = False
    """The compromised release is the package's first version (no predecessor served)."""
    also: tuple[Incident, ...] = ()

    @property
    def served_name(self) -> str:
        return self.name or self.package


def _json(value: Mapping[str, Any]) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


def entry_of(manifest: Mapping[str, Any], files: Mapping[str, bytes]) -> str:
    """The file `require` or `import` of the package loads, as node resolves `main` and the
    usual `exports` conditions; `index.js` when neither names one."""
    named: list[str] = []
    main = manifest.get("main")
    if isinstance(main, str):
        named.append(main)
    exports: Any = manifest.get("exports")
    if isinstance(exports, Mapping) and "." in exports:
        exports = exports["."]
    for _ in range(4):  # nested conditions: {"node": {"require": ...}}
        if isinstance(exports, str):
            named.append(exports)
            break
        if not isinstance(exports, Mapping):
            break
        exports = next((exports[key] for key in ("require", "node", "default", "import")
                        if key in exports), None)
    for text in [*named, "index.js"]:
        path = text.removeprefix("./")
        for candidate in (path, f"{path}.js", f"{path.rstrip('/')}/index.js"):
            if candidate in files:
                return candidate
    raise ValueError(f"no entry file among {len(files)} files")


def _is_esm(path: str, manifest: Mapping[str, Any]) -> bool:
    return path.endswith(".mjs") or (manifest.get("type") == "module"
                                     and not path.endswith(".cjs"))


def successor(shape: Shape, files: Mapping[str, bytes], manifest: Mapping[str, Any],
              version: str, name: str | None = None) -> tuple[Files, dict[str, Any]]:
    """The compromised release built from its predecessor's files and registry manifest: the
    package.json inside and the registry's manifest carry the same changes."""
    changed: dict[str, Any] = {**manifest, "version": version}
    if name is not None:
        changed["name"] = name
    if shape.scripts:
        changed["scripts"] = {**(manifest.get("scripts") or {}), **shape.scripts}
    if shape.dependencies:
        changed["dependencies"] = {**(manifest.get("dependencies") or {}), **shape.dependencies}
    new: Files = {} if shape.emptied else dict(files)
    # a CLI with no `main` (only `bin`) has no entry, and a shape that adds files needs none
    touches = shape.appended is not None or shape.required is not None
    entry = entry_of(manifest, files) if touches and not shape.emptied else None
    if shape.required is not None and entry is not None:
        line = (f"import './{shape.required}';\n" if _is_esm(entry, manifest)
                else f"require('./{shape.required}');\n")
        new[entry] = line.encode() + new[entry]
    if shape.appended is not None and entry is not None:
        new[entry] = new[entry] + shape.appended()
    new.update({path: make() for path, make in shape.added.items()})
    inside = json.loads(files["package.json"]) if "package.json" in files else {}
    for key in ("name", "version", "scripts", "dependencies"):
        if key in changed:
            inside[key] = changed[key]
    new["package.json"] = _json(inside)
    return new, changed


def _renamed(files: Mapping[str, bytes], manifest: Mapping[str, Any], name: str,
             version: str) -> tuple[Files, dict[str, Any]]:
    """A real package's code published under another name and version (clean)."""
    return successor(Shape(), files, manifest, version, name)


# -- the incidents, each with the write-ups its shape follows ------------------------------

FLATMAP_STREAM = Incident(
    "flatmap-stream", "map-stream", "0.0.7", "0.1.1",
    Shape(appended=payloads.decrypt_and_compile,
          added={"test/data.js": payloads.encrypted_data}),
    ("https://snyk.io/blog/a-post-mortem-of-the-malicious-event-stream-backdoor/",
     "https://incidents.cremit.io/incidents/event-stream-flatmap-stream-2018"),
    name="flatmap-stream", before="0.1.0", first_published=timedelta(days=27))
"""Published by event-stream's new maintainer; 0.1.1's minified entry decrypts its payload with
a key from the depending package's description and compiles it, at `require`."""

PLAIN_CRYPTO_JS = Incident(
    "plain-crypto-js", "crypto-js", "4.2.0", "4.2.1",
    Shape(scripts={"postinstall": "node setup.js"}, added={"setup.js": payloads.dropper}),
    ("https://diegorodrigo.dev/en/2026/04/17/the-axios-case-trusting-npm/",
     "https://lumstep.fr/fr/guides/axios-supply-chain-attack-2026"),
    name="plain-crypto-js", before="4.2.0", first_published=timedelta(days=1))
"""crypto-js's code under a look-alike name: 4.2.0 clean, 4.2.1 hours later with a postinstall
dropper (setup.js fetches and runs a per-platform RAT, then deletes itself)."""

def _bun_loaded(loader: str, payload: str, size: int) -> Shape:
    """Shai-Hulud 2's shape and its heirs' (the Bitwarden CLI, SAP CAP): a preinstall runs a
    small loader that fetches the Bun runtime and runs a large obfuscated payload with it."""
    return Shape(scripts={"preinstall": f"node {loader}"},
                 added={loader: lambda: payloads.bun_loader(payload),
                        payload: lambda: payloads.obfuscated_payload(payload.split(".")[0],
                                                                     size)})


COA_RC = Shape(scripts={"preinstall": "start /B node compile.js & node compile.js"},
               added={"compile.js": lambda: payloads.obfuscated_blob_with(
                   payloads.spawn_script("compile")),
                      "compile.bat": lambda: payloads.downloader_script(True)})
"""coa and rc, the same day, the same hands: an obfuscated compile.js runs compile.bat, which
downloads a DLL and registers it."""
COA_RC_SOURCES = ("https://connortumbleson.com/2021/11/08/malware-and-npm-packages/",
                  "https://www.osmondvanhemert.nl/posts/211111-npm-coa-rc-supply-chain-attacks/")

INCIDENTS: tuple[Incident, ...] = (
    Incident("event-stream", "event-stream", "3.3.5", "3.3.6",
             Shape(dependencies={"flatmap-stream": "^0.1.0"}),
             ("https://snyk.io/blog/a-post-mortem-of-the-malicious-event-stream-backdoor/",
              "https://breachnotes.vulnetix.com/supply-chain/2018-11_event-stream-npm-malware"),
             also=(FLATMAP_STREAM,)),
    Incident("ua-parser-js", "ua-parser-js", "0.7.28", "0.7.29",
             Shape(scripts={"preinstall": "start /B node preinstall.js & node preinstall.js"},
                   added={"preinstall.js": lambda: payloads.spawn_script("preinstall"),
                          "preinstall.sh": lambda: payloads.downloader_script(False),
                          "preinstall.bat": lambda: payloads.downloader_script(True)}),
             ("https://checkmarx.com/blog/our-response-to-npm-account-takeover-attacks-"
              "chainalert-a-community-backed-open-source-tool/",
              "https://www.osmondvanhemert.nl/posts/211021-ua-parser-js-npm-supply-chain-attack/")),
    Incident("coa", "coa", "2.0.2", "2.0.3", COA_RC, COA_RC_SOURCES),
    Incident("rc", "rc", "1.2.8", "1.2.9", COA_RC, COA_RC_SOURCES),
    Incident("node-ipc", "node-ipc", "10.1.0", "10.1.1",
             Shape(required="dao/ssl-geospec.cjs",
                   added={"dao/ssl-geospec.cjs": lambda: payloads.destroyer(esm=False)}),
             ("https://safeguard.sh/resources/blog/node-ipc-protestware-peacenotwar-supply-chain",
              "https://andrei.xyz/post/the-node-ipc-incident")),
    Incident("colors", "colors", "1.4.0", "1.4.1",
             Shape(appended=lambda: (b"\nconst am = require('./custom/american');\n"
                                     b"for (let i = 666; i < Infinity; i++) {\n"
                                     b"  console.log(am('LIBERTY LIBERTY LIBERTY'));\n}\n"),
                   added={"lib/custom/american.js": lambda: (
                       b"module.exports = function (text) { return text.split('').map("
                       b"(c, i) => i % 2 ? c : c.toUpperCase()).join(''); };\n")}),
             ("https://hackaday.com/tag/tlstorm/",
              "https://www.synapticweb.co/news/21776-corrupted-open-source-software-enters-"
              "the-russian-battlefield")),
    Incident("faker", "faker", "5.5.3", "6.6.6",
             Shape(emptied=True,
                   added={"README.md": lambda: b"# What really happened with Aaron Swartz?\n",
                          "index.js": lambda: b"// endgame\n"}),
             ("https://hackaday.com/tag/tlstorm/",)),
    Incident("chalk", "chalk", "5.6.0", "5.6.1",
             Shape(appended=lambda: payloads.interceptor("chalk")),
             ("https://www.fidesium.xyz/npm-supply-chain-attack-wallet-swap",
              "https://www.guardrail.ai/blog/supply-chain-attacks-are-targeting-web3-what-the-"
              "september-npm-hack-reveals")),
    Incident("debug", "debug", "4.4.1", "4.4.2",
             Shape(appended=lambda: payloads.interceptor("debug")),
             ("https://www.fidesium.xyz/npm-supply-chain-attack-wallet-swap",
              "https://evgenverzun.com/lessons-from-the-recent-supply-chain-attack")),
    Incident("shai-hulud-1", "@ctrl/tinycolor", "4.1.0", "4.1.1",
             Shape(scripts={"postinstall": "node bundle.js"},
                   added={"bundle.js": lambda: payloads.obfuscated_payload("bundle", 1_500_000)}),
             ("https://depsguard.com/shai-hulud/",
              "https://tdstuff.com/reading/selfpropagating-npm-attack-tinycolor-and-40-"
              "packages-backdoored-via-github-actions")),
    Incident("shai-hulud-2", "posthog-node", "5.11.2", "5.11.3",
             _bun_loaded("setup_bun.js", "bun_environment.js", 1_000_000),
             ("https://depsguard.com/shai-hulud/",
              "https://ryanwentzel.me/blog/shai-hulud-npm-supply-chain-worm")),
    Incident("nx", "nx", "21.4.1", "21.5.0",
             Shape(scripts={"postinstall": "node telemetry.js"},
                   added={"telemetry.js": payloads.telemetry}),
             ("https://www.cremit.io/blog/nx-supply-chain-attack-comprehensive-security-"
              "analysis-2025",)),
    Incident("eslint-config-prettier", "eslint-config-prettier", "10.1.5", "10.1.6",
             Shape(scripts={"install": "node install.js"},
                   added={"install.js": lambda: (
                       b"const { spawn } = require('child_process');\n"
                       b"const path = require('path');\n"
                       b"if (process.platform === 'win32') {\n"
                       b"  spawn('rundll32', [path.join(__dirname, 'node-gyp.dll') + ',main'],\n"
                       b"        { detached: true, stdio: 'ignore' }).unref();\n}\n"),
                          "node-gyp.dll": lambda: payloads.binary("node-gyp.dll", 120_000)}),
             ("https://qian.cx/posts/A2DF5A7F-1148-4ADF-9973-9FCBD865F3FB",
              "https://trends.glance.com/story/articles/Technology/US/en/rapid-read/"
              "s-c06640630b-333f92ab-4069-5a00-ad9f-1d34e4195d0b")),
    Incident("rspack", "@rspack/core", "1.1.6", "1.1.7",
             Shape(scripts={"postinstall": "node support.js"},
                   added={"support.js": payloads.dropper}),
             ("https://en.ittrends.news/Information+Technology/Software/2024/12/rspack-supply-"
              "chain-attack-prevention-implications.html",)),
    Incident("solana-web3", "@solana/web3.js", "1.95.5", "1.95.6",
             Shape(appended=payloads.key_stealer),
             ("https://vulert.com/blog/solana-web3js-npm-backdoor/",
              "https://safeguard.sh/resources/blog/solana-web3-js-npm-backdoor-2024")),
    Incident("axios", "axios", "1.14.0", "1.14.1",
             Shape(dependencies={"plain-crypto-js": "^4.2.1"}),
             ("https://diegorodrigo.dev/en/2026/04/17/the-axios-case-trusting-npm/",
              "https://hari7261.github.io/trend-research/research/axios-supply-chain-"
              "compromise-march-2026/"),
             also=(PLAIN_CRYPTO_JS,)),
    Incident("bitwarden-cli", "@bitwarden/cli", "2026.3.0", "2026.4.0",
             _bun_loaded("bw_setup.js", "bw1.js", 600_000),
             ("https://blog.crawley.systems/posts/bitwarden-cli-supply-chain-defense.html",
              "https://www.securitytoday.de/en/2026/04/27/bitwarden-cli-supply-chain-2026-04-"
              "22-npm-preinstall-hook/")),
    Incident("sap-cap", "@cap-js/sqlite", "2.2.1", "2.2.2",
             _bun_loaded("setup.mjs", "execution.js", 600_000),
             ("https://securitybridge.com/blog/a-mini-shai-hulud-has-appeared-when-the-npm-"
              "supply-chain-reaches-into-sap/",
              "https://pathlock.com/blog/security-alerts/sap-npm-supply-chain-incident-"
              "malicious-packages-impact-cap-mta/")),
    Incident("tanstack", "@tanstack/react-router", "1.169.1", "1.169.2",
             Shape(scripts={"preinstall": "node router_init.js"},
                   added={"router_init.js": payloads.install_stealer}),
             ("https://happyberg.com/blog/tanstack-mini-shai-hulud/",
              "https://tanstack.com/blog/incident-followup",
              "https://appsecuritystandards.org/blog/84-malicious-packages-with-valid-"
              "provenance"),
             provenance=True),
    # the issue's own shapes (issue 55): what the defaults let through once a day old
    Incident("sleeper", "is-number", "7.0.0", "7.0.1",
             Shape(scripts={"postinstall": "node setup.js"},
                   added={"setup.js": payloads.install_stealer}),
             ("issue 55: a package first published 40 days ago whose 2-day-old release adds "
              "a postinstall",),
             name="is-number-extra", before="7.0.0", first_published=timedelta(days=40)),
    Incident("main-payload-young", "left-pad", "1.3.0", "1.0.0",
             Shape(appended=payloads.install_stealer),
             ("issue 55: a payload in main with no install script, in a young package",),
             name="left-pad-plus", new_package=True),
    Incident("main-payload-established", "left-pad", "1.3.0", "1.3.1",
             Shape(appended=payloads.install_stealer),
             ("issue 55: a payload in main with no install script, in an established "
              "package",)),
)


async def _case(incident: Incident, reader: Reader, store: Path, now: datetime) -> Case:
    document = await reader.packument(incident.package)
    if document is None or incident.base not in (document.get("versions") or {}):
        raise LookupError(f"{incident.key}: the registry has no {incident.package}@"
                          f"{incident.base}")
    real = document["versions"][incident.base]
    tarball = await reader.tarball(real)
    files = files_of(tarball)
    manifest = {key: value for key, value in real.items()
                if key not in ("dist", "_id", "_resolved", "_integrity", "_from", "_shasum")}
    judged_at, _previous = in_order(now, now)
    new_files, new_manifest = successor(incident.shape, files, manifest, incident.after,
                                        incident.name)
    dist: dict[str, Any] = {}
    if incident.provenance:
        dist["attestations"] = (real.get("dist") or {}).get("attestations") or _PROVENANCE
    after = Published(incident.after, new_manifest, stored(store, pack(new_files)), judged_at,
                      dist)
    versions: tuple[Published, ...]
    if incident.new_package:
        versions, created = (after,), judged_at
    elif incident.name is not None:
        assert incident.before is not None
        first = judged_at - (incident.first_published or timedelta(days=365))
        old_files, old_manifest = _renamed(files, manifest, incident.name, incident.before)
        versions = (Published(incident.before, old_manifest, stored(store, pack(old_files)),
                              first, dist), after)
        created = first
    else:
        _judged, previous = in_order(time_of(document, incident.base) or judged_at, now,
                                     created_of(document))
        before = Published(incident.base, manifest, stored(store, tarball), previous, dist)
        versions, created = (before, after), previous
    also = tuple([await _case(other, reader, store, now) for other in incident.also])
    return Case(SHAPE, f"{incident.key}: {incident.served_name}@{incident.after}",
                incident.served_name, versions, (incident.after,), created, True,
                " ".join(incident.sources),
                tuple(document.get("maintainers") or ()) if incident.name is None else (),
                also=also)


async def build_shapes(reader: Reader, store: Path, now: datetime) -> list[Case]:
    """Every incident rebuilt; one whose predecessor the registry lacks is said and left out."""
    cases: list[Case] = []
    for incident in INCIDENTS:
        try:
            cases.append(await _case(incident, reader, store, now))
        except (LookupError, ValueError) as error:
            print(f"shape {incident.key} left out: {error}", file=sys.stderr)
    return cases
