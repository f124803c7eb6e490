"""Sabotage judged (`rules.capabilities`): a release whose code that runs at load is gone
(faker 6.6.6) or never returns (colors 1.4.44-liberty-2) against the release before it, held
on the defaults as a capability gained; a first release with such a loop held alone; the
same rules' way through. On real releases' files (tests/npm/fixtures/releases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mirrorgate.npm.capabilities import release_capabilities
from mirrorgate.npm.contents import contents_of
from mirrorgate.rules import parse_rules
from mirrorgate.rules.capabilities import can_gain, check_alone, check_gained, verdict
from mirrorgate.rules.release import Fired, Release, judge
from mirrorgate.rules.releasetable import NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY
from tests.npm.test_capabilities import real, with_manifest
from tests.npm.test_sabotage import LIBERTY, colors_liberty
from tests.servers.packages import build_tarball

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def release(version: str, files: dict[str, bytes]) -> Release:
    return Release(version, contents_of(build_tarball(files)))


def test_faker_6_6_6_is_held_its_entry_gone_with_5_5_3s_entry_beside_it() -> None:
    fired = check_gained(release("6.6.6", real("faker-6.6.6")),
                         release("5.5.3", real("faker-5.5.3")))

    assert fired is not None
    assert fired.signal == NEW_CAPABILITY
    assert "load-time code gains code-removed" in fired.evidence
    assert "index.js `named by main, exports or bin, not shipped`" in fired.evidence
    assert "the release before loaded index.js (196 bytes of code)" in fired.evidence


def test_the_rebuilt_faker_shape_an_index_js_of_comments_is_held() -> None:
    files = {"package.json": real("faker-5.5.3")["package.json"], "index.js": b"// endgame\n"}

    found = verdict(release_capabilities(files), release_capabilities(real("faker-5.5.3")))

    assert [item.split(":")[0] for item in found] == [
        "load-time code gains code-removed (its code that runs at load is gone (the entry is "
        "missing or empty))"]
    assert "index.js `comments only, no code`" in found[0]


def test_code_removed_is_read_for_even_where_nothing_else_could_be_gained() -> None:
    # the gate reads the release before only when the new one could have gained something
    assert can_gain(release_capabilities(real("faker-6.6.6")))
    assert not can_gain(release_capabilities(real("faker-5.5.3")))


def test_colors_liberty_loop_is_held_against_1_4_0() -> None:
    fired = check_gained(release("1.4.1", colors_liberty()),
                         release("1.4.0", real("colors-1.4.0")))

    assert fired is not None
    assert fired.signal == NEW_CAPABILITY
    assert ("load-time code gains endless-loop (never finishes loading (a loop at module scope "
            "with no way out)): lib/index.js:16 `for (let i = 666; i < Infinity; i++)"
            ) in fired.evidence
    assert "(1.4.0 could use at install: nothing; at load: nothing)" in fired.evidence


@pytest.mark.parametrize(("name", "files"), [
    # a clean successor beside each: the release moving its entry to a file it ships
    ("moved-entry", lambda: with_manifest(
        {**{k: v for k, v in real("faker-5.5.3").items() if k != "index.js"},
         "main.js": real("faker-5.5.3")["index.js"]}, main="main.js")),
    # a bounded loop appended to colors' entry, and one whose `while (true)` has its break
    ("bounded-loop", lambda: {**real("colors-1.4.0"), "lib/index.js": real("colors-1.4.0")[
        "lib/index.js"] + b"\nfor (let i = 0; i < 3; i++) { console.log(i); }\n"}),
    ("loop-with-break", lambda: {**real("colors-1.4.0"), "lib/index.js": real("colors-1.4.0")[
        "lib/index.js"] + b"\nwhile (true) { if (colors.ready()) break; }\n"}),
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_clean_successor_passes(name: str, files: object) -> None:
    assert callable(files)
    before = "faker-5.5.3" if name == "moved-entry" else "colors-1.4.0"

    assert verdict(release_capabilities(files()), release_capabilities(real(before))) == []


def test_a_types_only_package_without_code_before_or_after_passes() -> None:
    types = {"package.json": b'{"name": "@types/x", "version": "1.0.1", "main": "index.js"}',
             "index.d.ts": b"export declare const x: number;\n"}
    read = release_capabilities(types)

    assert verdict(read, read) == []  # no code at load before either: nothing was taken


def test_a_cli_whose_bin_is_emptied_is_held_with_the_bin_it_ran_before() -> None:
    before = {"package.json": b'{"name": "x-cli", "version": "1.0.0", "bin": {"x": "cli.js"}}',
              "cli.js": b"#!/usr/bin/env node\nconsole.log(process.argv.slice(2));\n"}
    after = {**before, "cli.js": b"#!/usr/bin/env node\n// endgame\n"}

    [found] = verdict(release_capabilities(after), release_capabilities(before))

    assert "cli.js `comments only, no code`" in found
    assert found.endswith("the release before loaded cli.js (56 bytes of code)")


def test_a_first_release_whose_main_never_returns_is_held_alone() -> None:
    files = {"package.json": b'{"name": "liberty", "version": "1.0.0", "main": "index.js"}',
             "index.js": b"module.exports = function () {};\n" + LIBERTY}

    fired = check_alone(release("1.0.0", files), "1.0.0 is the package's first release")

    assert fired is not None
    assert fired.signal == YOUNG_PACKAGE_CAPABILITY
    assert "load-time code can use endless-loop" in fired.evidence


def test_a_first_release_with_no_code_at_load_passes_alone() -> None:
    # nothing was taken from anyone: a placeholder, a name reserved
    assert check_alone(release("6.6.6", real("faker-6.6.6")), "a first release") is None


def code_removed_fired() -> Fired:
    fired = check_gained(release("6.6.6", real("faker-6.6.6")),
                         release("5.5.3", real("faker-5.5.3")))
    assert fired is not None
    return fired


def test_by_default_a_sabotage_release_is_quarantined_a_week_after_publication() -> None:
    judged = judge(parse_rules("", "r.toml"), "faker", "6.6.6", NOW, [code_removed_fired()], NOW,
                   "5.5.3")

    assert (judged.rule, judged.until) == (NEW_CAPABILITY, NOW + timedelta(days=7))


@pytest.mark.parametrize("rules", [
    '[release]\nmode = "report"\n',
    '[release]\nallow = ["faker@6.6.6"]\n',
    '[release]\nnew_capability = "off"\n',
], ids=["report-mode", "allow", "off"])
def test_report_mode_an_allow_entry_or_off_let_a_sabotage_release_through(rules: str) -> None:
    judged = judge(parse_rules(rules, "r.toml"), "faker", "6.6.6", NOW, [code_removed_fired()],
                   NOW, "5.5.3")

    assert not judged.denied
