"""The incident shapes the side-by-side bench rebuilds: each successor differs from its
predecessor exactly as its shape says (the hooks and dependencies set in both package.json
and the registry manifest, the files added, the entry file appended to, nothing else), the
change is visible to mirrorgate's own reading of the tarball, and every stand-in payload
reaches only loopback."""

from __future__ import annotations

import json
import re

import pytest
from bench.corpus import pack
from bench.incident_shapes import INCIDENTS, Incident, Shape, entry_of, successor

from mirrorgate.npm.contents import contents_of

ALL = [*INCIDENTS, *(other for incident in INCIDENTS for other in incident.also)]
_URL = re.compile(rb"""https?://([^/:'"\s]+)""")


def _predecessor(name: str, version: str) -> tuple[dict[str, bytes], dict[str, object]]:
    """A small real-looking package: its package.json, an entry file, a helper, a README;
    one script that npm does not run at install."""
    manifest: dict[str, object] = {"name": name, "version": version, "main": "index.js",
                                   "scripts": {"test": "node test.js"},
                                   "dependencies": {"ms": "^2.1.3"}}
    index = "\n".join(f"exports.helper{i} = (v) => String(v).trim() + {i};"
                      for i in range(40)).encode() + b"\n"
    files = {"package.json": json.dumps(manifest, indent=2).encode(), "index.js": index,
             "lib/util.js": b"module.exports = (a, b) => a + b;\n",
             "README.md": f"# {name}\n\nA utility.\n".encode()}
    return files, manifest


@pytest.mark.parametrize("incident", ALL, ids=[incident.key for incident in ALL])
def test_the_successor_differs_from_its_predecessor_exactly_as_the_shape_says(
        incident: Incident) -> None:
    shape = incident.shape
    files, manifest = _predecessor(incident.package, incident.base)

    new, registry = successor(shape, files, manifest, incident.after, incident.name)
    inside = json.loads(new["package.json"])

    kept = set() if shape.emptied else set(files)
    assert set(new) == kept | set(shape.added) | {"package.json"}
    entry = entry_of(manifest, files)
    touched = {"package.json"} | set(shape.added)
    if shape.appended is not None or shape.required is not None:
        touched.add(entry)
        assert files[entry] in new[entry]  # the entry keeps its code, the payload beside it
        assert len(new[entry]) > len(files[entry])
    for path in kept - touched:
        assert new[path] == files[path], path
    for document in (inside, registry):
        assert document["version"] == incident.after
        assert document["name"] == incident.served_name
        assert document["scripts"] == {"test": "node test.js", **shape.scripts}
        assert document["dependencies"] == {"ms": "^2.1.3", **shape.dependencies}


@pytest.mark.parametrize("incident", ALL, ids=[incident.key for incident in ALL])
def test_mirrorgate_reads_the_hooks_the_shape_adds_from_the_packed_tarball(
        incident: Incident) -> None:
    files, manifest = _predecessor(incident.package, incident.base)
    new, _registry = successor(incident.shape, files, manifest, incident.after, incident.name)

    read = contents_of(pack(new))

    assert read.problem is None
    assert read.hooks == frozenset(incident.shape.scripts)
    for hook, command in incident.shape.scripts.items():
        assert read.scripts[hook] == command
        named = [path for path in incident.shape.added if path in command]
        assert named, f"{hook} runs a file the shape adds: {command}"


@pytest.mark.parametrize("incident", ALL, ids=[incident.key for incident in ALL])
def test_every_stand_in_payload_reaches_only_loopback(incident: Incident) -> None:
    shape = incident.shape
    written = [make() for make in shape.added.values()]
    if shape.appended is not None:
        written.append(shape.appended())
    hosts = {host for body in written for host in _URL.findall(body)}
    assert hosts <= {b"127.0.0.1"}, hosts


def test_each_shape_the_issue_names_is_rebuilt_once() -> None:
    keys = [incident.key for incident in INCIDENTS]
    assert len(set(keys)) == len(keys)
    assert {"event-stream", "ua-parser-js", "coa", "rc", "node-ipc", "colors", "faker",
            "chalk", "debug", "shai-hulud-1", "shai-hulud-2", "nx", "eslint-config-prettier",
            "rspack", "solana-web3", "axios", "bitwarden-cli", "sap-cap", "tanstack",
            "sleeper", "main-payload-young", "main-payload-established"} == set(keys)
    assert all(incident.sources for incident in ALL)
    assert [i.key for i in INCIDENTS if i.provenance] == ["tanstack"]


@pytest.mark.parametrize(("manifest", "files", "entry"), [
    ({"main": "lib/index"}, ["lib/index.js", "index.js"], "lib/index.js"),
    ({"main": "./dist/"}, ["dist/index.js"], "dist/index.js"),
    ({"exports": {".": {"types": "./x.d.ts", "require": "./cjs/a.cjs",
                        "import": "./esm/a.js"}}}, ["cjs/a.cjs", "esm/a.js"], "cjs/a.cjs"),
    ({"exports": "./source/index.js", "type": "module"}, ["source/index.js"],
     "source/index.js"),
    ({}, ["index.js"], "index.js"),
])
def test_the_entry_file_is_found_as_node_resolves_main_and_exports(
        manifest: dict[str, object], files: list[str], entry: str) -> None:
    assert entry_of(manifest, dict.fromkeys(files, b"")) == entry


def test_a_file_the_entry_now_loads_is_imported_in_an_es_module_and_required_elsewhere() -> None:
    shape = Shape(required="dao/x.js", added={"dao/x.js": lambda: b"export {};\n"})
    esm = {"package.json": b"{}", "index.js": b"export const a = 1;\n"}

    module, _ = successor(shape, esm, {"type": "module", "main": "index.js"}, "1.0.1")
    common, _ = successor(shape, esm, {"main": "index.js"}, "1.0.1")

    assert module["index.js"].startswith(b"import './dao/x.js';\n")
    assert common["index.js"].startswith(b"require('./dao/x.js');\n")


def test_a_shape_that_adds_files_needs_no_entry_file() -> None:
    # @bitwarden/cli has a `bin` and no `main`: the preinstall loader is added beside it
    shape = Shape(scripts={"preinstall": "node bw_setup.js"},
                  added={"bw_setup.js": lambda: b"require('child_process');\n"})
    files = {"package.json": b'{"name": "@bitwarden/cli", "bin": {"bw": "build/bw.js"}}',
             "build/bw.js": b"#!/usr/bin/env node\n"}

    new, manifest = successor(shape, files, {"bin": {"bw": "build/bw.js"}}, "2026.4.0")

    assert set(new) == {"package.json", "build/bw.js", "bw_setup.js"}
    assert manifest["scripts"] == {"preinstall": "node bw_setup.js"}
