"""The files of a package that run (`npm.entrypoints`), and the release signals' reading of
them whole (`npm.contents`): where a payload hides from a reader of `.js` heads."""

from __future__ import annotations

import json

import pytest

from mirrorgate.npm import contents, entrypoints
from mirrorgate.npm.contents import contents_of
from mirrorgate.npm.entrypoints import entry_points, requires_of, run_files
from mirrorgate.npm.jsmarks import EVAL_DECODED, UNMEASURED, marks_of
from mirrorgate.rules.release import Release, check_obfuscation
from tests.servers.incidents import entry_file, obfuscated_blob
from tests.servers.packages import build_tarball

FILES = {"index.js": 1, "lib/start": 1, "lib/index.js": 1, "bin/cli": 1, "esm/a.mjs": 1,
         "esm/b.mjs": 1, "setup.js": 1, "data/x.dat": 1, "README.md": 1}


def test_main_resolves_as_node_resolves_it_extensionless_a_folder_or_index_js() -> None:
    assert entry_points({"main": "lib/start"}, FILES) == [("lib/start", "main")]
    assert entry_points({"main": "./lib"}, FILES) == [("lib/index.js", "main")]
    assert entry_points({}, FILES) == [("index.js", "main")]


def test_a_main_naming_no_file_falls_back_to_index_js_as_node_does() -> None:
    # peacenotwar 9.1.6 named a `node-ipc.cjs` it did not ship: node ran its `index.js`
    assert entry_points({"main": "node-ipc.cjs"}, FILES) == [("index.js", "main")]
    assert entry_points({"main": "node-ipc.cjs"}, {"lib/index.js": 1}) == []


def test_bin_exports_and_the_files_install_scripts_name_are_entry_points() -> None:
    found = entry_points({"main": "index.js", "bin": {"cli": "./bin/cli"},
                          "exports": {".": {"import": "./esm/a.mjs", "require": "./index.js"},
                                      "./*": "./esm/*.mjs"},
                          "scripts": {"postinstall": "node ./setup.js && echo done",
                                      "test": "node data/x.dat"}}, FILES)
    assert set(found) == {("index.js", "main"), ("bin/cli", "bin"), ("esm/a.mjs", "exports"),
                          ("index.js", "exports"), ("esm/b.mjs", "exports"),
                          ("setup.js", "postinstall")}  # `test` is not run at install


def test_what_a_file_requires_or_imports_by_a_relative_path_runs_too_any_extension() -> None:
    code = (b"const a = require('./data/x.dat');\nimport b from \"../esm/a.mjs\";\n"
            b"const c = await import('./lib');\nrequire('fs'); require(name);\n")
    assert set(requires_of(code)) == {"./data/x.dat", "./lib", "../esm/a.mjs"}
    found, overrun = run_files({}, FILES, {"index.js": ("./data/x.dat", "./lib", "../outside.js")})
    assert overrun is None
    assert found == {"index.js": "main", "data/x.dat": "required by index.js",
                     "lib/index.js": "required by index.js"}


def test_a_file_that_runs_is_measured_whole_past_the_per_file_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contents, "READ_PER_FILE", 1000)
    tail = entry_file("x") + obfuscated_blob("x")  # past the first 1000 bytes
    manifest = json.dumps({"main": "lib/start"}).encode()
    read = contents_of(build_tarball({"package.json": manifest, "lib/start": tail,
                                      "other.js": tail}))
    assert read.code["lib/start"].whole
    assert "hex-identifiers" in read.code["lib/start"].kinds
    assert not read.code["other.js"].whole  # not run: its head, as before
    assert read.unread == (f"other.js read to byte 1000 of {len(tail)}",)


def test_a_file_that_runs_past_the_bound_is_refused_even_where_the_previous_was_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contents, "READ_RUN_FILE", 5000)
    big = entry_file("x") * 3
    old = contents_of(build_tarball({"package.json": b"{}", "index.js": big}))
    new = contents_of(build_tarball({"package.json": b"{}", "index.js": big + b"\n"}))
    assert new.code["index.js"].kinds == frozenset({UNMEASURED})
    fired = check_obfuscation(Release("1.0.1", new), Release("1.0.0", old))
    assert fired is not None
    assert fired.details[0].startswith("index.js: code that runs, not measured (main: ")


@pytest.mark.parametrize("call", [b"(0,eval)(atob(", b"(0, eval)(Buffer.from(",
                                  b"window['eval'](atob(", b"eval?.(unescape("])
def test_an_indirect_eval_over_a_decoding_call_is_eval_decoded(call: bytes) -> None:
    assert EVAL_DECODED in marks_of(b"x = 1;\n" + call + b"p))", 100).kinds


def test_an_eval_of_a_plain_value_is_not() -> None:
    assert marks_of(b"(0, eval)(code); evaluate(atob(x));", 100).kinds == frozenset()


def test_a_walk_past_its_bound_refuses_rather_than_passing_what_it_did_not_follow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entrypoints, "_EDGES", 2)
    files = {"index.js": b"require('./a'); require('./b'); require('./c');\n",
             "a.js": b"1", "b.js": b"2", "c.js": b"3"}
    read = contents_of(build_tarball({"package.json": b"{}", **files}))
    assert read.code["package.json"].marks[0].text() == (
        "code that runs, not measured (the files that run were not all followed: past 2 "
        "requires followed)")
