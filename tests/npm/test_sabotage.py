"""What a maintainer's sabotage leaves in the code that runs at load (`npm.js.sabotage`,
`npm.capabilities`): a loop at module scope with no way out (colors 1.4.44-liberty-2), an
entry that loads no code (faker 6.6.6); read from real releases' files
(tests/npm/fixtures/releases), through the relay's reading of the tarball too."""

from __future__ import annotations

import pytest

from mirrorgate.npm.capabilities import LOAD, release_capabilities
from mirrorgate.npm.contents import contents_of
from mirrorgate.npm.js.sabotage import WHOLE_PARSE, is_blank
from mirrorgate.npm.jsuses import CODE_REMOVED, ENDLESS, uses_of
from tests.npm.test_capabilities import real, with_manifest
from tests.servers.packages import build_tarball

LIBERTY = (b"\nconst am = require('./custom/american');\n"
           b"for (let i = 666; i < Infinity; i++) {\n"
           b"  console.log(am('LIBERTY LIBERTY LIBERTY'));\n}\n")
"""What colors 1.4.44-liberty-2 appended to its entry (January 2022)."""


def colors_liberty() -> dict[str, bytes]:
    files = real("colors-1.4.0")
    files["lib/index.js"] += LIBERTY
    files["lib/custom/american.js"] = b"module.exports = function (text) { return text; };\n"
    return files


def endless(code: bytes) -> list[str]:
    return [use.call for use in uses_of(code).found if use.capability == ENDLESS]


# --- the endless loop -----------------------------------------------------------------------


def test_colors_liberty_loop_appended_to_its_entry_never_lets_require_return() -> None:
    read = release_capabilities(colors_liberty())

    [found] = read.where(ENDLESS, LOAD)
    assert (found.file, found.line) == ("lib/index.js", 16)
    assert found.call.startswith("for (let i = 666; i < Infinity; i++)")
    assert ENDLESS not in release_capabilities(real("colors-1.4.0")).at_load


def test_the_relays_reading_of_the_tarball_reads_the_same_loop() -> None:
    files = colors_liberty()

    assert contents_of(build_tarball(files)).capabilities == release_capabilities(files)


@pytest.mark.parametrize("code", [
    b"while (true) { console.log('x'); }\n",
    b"while(1){spin()}\n",
    b"for(;;){}\n",
    b"for (var i = 0; true; i++) { tick(i); }\n",
    b"do { console.log('x'); } while (!0);\n",
    b"if (typeof window === 'undefined') { while (true) { spin(); } }\n",
    # a top-level IIFE's body runs at load: a UMD or esbuild wrapper hides nothing
    b"(function () {\n  'use strict';\n  for (;;) { console.log('x'); }\n})();\n",
    b"!function(){for(;;){x()}}();\n",
    b"(() => { while (true) { x(); } }).call(this);\n",
], ids=["while-true", "while-1", "for-ever", "for-true", "do-while", "in-a-block", "iife",
        "bang-iife", "arrow-call"])
def test_a_loop_with_no_way_out_at_module_scope_is_endless(code: bytes) -> None:
    assert endless(b"'use strict';\nmodule.exports = 1;\n" + code)


@pytest.mark.parametrize("code", [
    b"while (true) { const line = next(); if (!line) break; out(line); }\n",
    b"for (;;) { if (done()) { process.exit(0); } }\n",
    b"while (true) { throw new Error('x'); }\n",
    # a loop in a function runs when called, and a server's loop waits between its turns
    b"function poll() { while (true) { tick(); } }\nmodule.exports = poll;\n",
    b"async function serve() { for (;;) { await handle(); } }\n",
    b"class Pump { run() { while (1) { this.step(); } } }\n",
    # a bundle's IIFE whose loop has a break, and webpack's module function (never read)
    b"(function(){ var i = 0; for(;;){ if (++i > 10) break; } })();\n",
    b"var m = { 1: function(module){ for(;;){ tick(); } } };\n",
    b"for (let i = 0; i < list.length; i++) { use(list[i]); }\n",
    b"const top = -Infinity; if (x === Infinity) {}\n",
    b"// while (true) { spin(); }\nconst s = 'for(;;){}';\n",
], ids=["break", "exit", "throw", "in-a-function", "awaits", "in-a-method", "iife-with-break",
        "webpack-module", "bounded", "infinity-as-a-value", "in-a-comment-or-string"])
def test_a_loop_with_a_way_out_or_not_at_module_scope_is_not_endless(code: bytes) -> None:
    assert endless(code) == []


def test_a_bundle_past_the_whole_parse_is_read_for_loops_at_depth_zero() -> None:
    # a 600 KB bundle: its minified `for(;;)` inside functions are not read, one appended at
    # the end at module scope is
    body = b"function f(a){var b=[" + b"1," * 100 + b"];for(;;){if(a(b))return 1}}\n"
    bundle = body * (WHOLE_PARSE // len(body) + 1000)

    assert endless(bundle) == []
    assert endless(bundle + b"while (true) { console.log('LIBERTY'); }\n")
    assert endless(bundle + b"do { x(); } while (true);\n") == []  # read from its `while`


# --- the code removed -----------------------------------------------------------------------


def test_faker_6_6_6_ships_no_file_its_main_names() -> None:
    # faker 6.6.6 (January 2022): package.json still says `"main": "index.js"`, and the
    # tarball holds a README, lint and CI configs, no JavaScript at all
    read = release_capabilities(real("faker-6.6.6"))

    [found] = read.where(CODE_REMOVED, LOAD)
    assert found.file == "index.js"
    assert read.entries == ()
    before = release_capabilities(real("faker-5.5.3"))
    assert CODE_REMOVED not in before.at_load
    assert before.entries == (("index.js", 196),)


def test_an_entry_holding_only_comments_loads_no_code() -> None:
    # the incident shape: faker 5.5.3's files gone but an `index.js` of `// endgame`
    files = {"package.json": real("faker-5.5.3")["package.json"], "index.js": b"// endgame\n"}

    read = release_capabilities(files)

    assert [item.file for item in read.where(CODE_REMOVED, LOAD)] == ["index.js"]
    assert read.entries == (("index.js", 0),)
    assert contents_of(build_tarball(files)).capabilities == read


@pytest.mark.parametrize(("data", "blank"), [
    (b"", True), (b"// endgame\n", True), (b"#!/usr/bin/env node\n/* x */\n'use strict';\n", True),
    (b"/* a licence */\nmodule.exports = 1;\n", False), (b"'use strict'; x();", False),
    (b"/* never closed", False),
])
def test_a_file_is_blank_only_with_comments_and_whitespace(data: bytes, blank: bool) -> None:
    assert is_blank(data) is blank


def test_a_release_moving_its_entry_to_a_file_it_ships_keeps_its_code() -> None:
    files = real("faker-5.5.3")
    files["main.js"] = files.pop("index.js")

    read = release_capabilities(with_manifest(files, main="main.js"))

    assert CODE_REMOVED not in read.at_load
    assert read.entries == (("main.js", 196),)


def test_a_types_only_package_never_had_code_at_load_nor_a_cli_whose_bin_still_runs() -> None:
    types = {"package.json": b'{"name": "@types/x", "version": "1.0.0", "main": ""}',
             "index.d.ts": b"export declare const x: number;\n"}
    cli = {"package.json": b'{"name": "x-cli", "version": "1.0.0", "bin": {"x": "cli.js"}}',
           "cli.js": b"#!/usr/bin/env node\nconsole.log(process.argv);\n"}
    library_turned_cli = with_manifest(cli, main="index.js")  # the library's main dropped

    for files in (types, cli, library_turned_cli):
        assert CODE_REMOVED not in release_capabilities(files).at_load, files


def test_a_cli_whose_bin_was_emptied_too_has_no_code_at_load() -> None:
    files = {"package.json": b'{"name": "x", "version": "2.0.0", "main": "index.js", '
                             b'"bin": {"x": "cli.js"}}',
             "cli.js": b"#!/usr/bin/env node\n// gone\n"}

    assert CODE_REMOVED in release_capabilities(files).at_load


def test_a_cli_of_bin_alone_whose_bin_is_gone_has_no_code_at_load() -> None:
    gone = {"package.json": b'{"name": "x-cli", "version": "2.0.0", "bin": {"x": "cli.js"}}',
            "README.md": b"# gone\n"}

    [found] = release_capabilities(gone).where(CODE_REMOVED, LOAD)
    assert found.file == "package.json"
