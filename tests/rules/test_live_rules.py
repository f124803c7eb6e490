"""Rules reloaded from a file that was emptied or cut short: the last good rules stay in force.

A truncating save caught midway, `> rules.toml`, a ConfigMap key renamed: each leaves a file
that is valid TOML (or no file) and would load as the defaults, the deny list, `[release]` and
`[install_scripts]` gone until the next good write. `rules.live` keeps the rules in force.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mirrorgate.rules import LiveRules
from mirrorgate.rules.policy import DEFAULT_RULES

# the shape of a real rules file: a comment heading, then the tables
REAL = """\
# mirrorgate admission rules, owned by the platform team (see the runbook)

[age]
minimum = "3d"

[deny]
packages = ["event-stream@3.3.6", "ua-parser-js@0.7.29", "coa@2.0.3"]

[install_scripts]
block = true
allow = ["esbuild", "@swc/core"]

[release]
quarantine = "2d"
"""


def _live(tmp_path: Path, text: str = REAL) -> tuple[LiveRules, Path]:
    path = tmp_path / "rules.toml"
    path.write_text(text, encoding="utf-8")
    failures: list[None] = []
    rules = LiveRules.load(path, on_reload_failed=lambda: failures.append(None))
    return rules, path


def _kept(rules: LiveRules, deny: int = 3) -> None:
    assert rules.current.block_install_scripts
    assert rules.current.release.on
    assert len(rules.current.deny.patterns) == deny
    assert rules.generation == 0


@pytest.mark.parametrize("emptied", ["", "\n", "   \n\n", "# mirrorgate admission rules\n"],
                         ids=["truncated to nothing", "a blank line", "whitespace",
                              "comments only"])
def test_an_emptied_rules_file_does_not_drop_the_deny_list_and_the_scripts_block(
        tmp_path: Path, emptied: str) -> None:
    rules, path = _live(tmp_path)
    path.write_text(emptied, encoding="utf-8")  # `> rules.toml`, or the heading alone

    assert not rules.reload()

    _kept(rules)
    assert rules.problem is not None
    assert "sets nothing" in rules.problem


def test_a_save_that_stopped_at_a_line_end_does_not_drop_the_tables_after_it(
        tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    cut = REAL[:REAL.index("[install_scripts]")]  # parses: [age] and [deny], nothing after
    path.write_text(cut, encoding="utf-8")

    assert not rules.reload()

    _kept(rules)
    assert rules.problem is not None
    assert "cut short" in rules.problem


def test_an_editor_that_drops_the_final_newline_changes_nothing_and_raises_no_alarm(
        tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    path.write_text(REAL.rstrip("\n"), encoding="utf-8")

    assert rules.reload()  # the same rules, taken: not a cut

    assert rules.problem is None
    assert len(rules.current.deny.patterns) == 3


def test_a_rewrite_that_loses_every_table_does_not_load_as_the_defaults(
        tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    path.write_text('# mirrorgate admission rules\nmode = "report"\n', encoding="utf-8")

    assert not rules.reload()

    _kept(rules)
    assert rules.problem is not None
    assert "lost every table" in rules.problem
    assert "deny" in rules.problem


def test_a_rules_file_that_disappeared_keeps_the_last_good_rules(tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    path.unlink()

    assert not rules.reload()

    _kept(rules)
    assert rules.problem is not None
    assert "cannot read the rules file" in rules.problem


def test_a_configmap_key_renamed_keeps_the_last_good_rules(tmp_path: Path) -> None:
    # Kubernetes mounts `rules.toml -> ..data/rules.toml`; a new ConfigMap without that key
    # swaps `..data` to a folder that lacks it
    for version, key in ((1, "rules.toml"), (2, "policy.toml")):
        folder = tmp_path / f"..v{version}"
        folder.mkdir()
        (folder / key).write_text(REAL, encoding="utf-8")
    (tmp_path / "..data").symlink_to("..v1")
    (tmp_path / "rules.toml").symlink_to("..data/rules.toml")
    rules = LiveRules.load(tmp_path / "rules.toml")
    staged = tmp_path / "..data_tmp"
    staged.symlink_to("..v2")
    os.replace(staged, tmp_path / "..data")

    assert not rules.reload()

    _kept(rules)
    assert rules.problem is not None


def test_the_status_is_cleared_and_the_new_rules_taken_once_a_good_file_is_back(
        tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    path.write_text("", encoding="utf-8")
    assert not rules.reload()
    shorter = REAL.replace('"coa@2.0.3"', '"coa@2.0.4"').replace(
        '\n[release]\nquarantine = "2d"\n', "")  # a table dropped, another entry changed

    path.write_text(shorter, encoding="utf-8")

    assert rules.reload()
    assert rules.problem is None
    assert rules.current.release == DEFAULT_RULES.release  # the default again
    assert rules.current.block_install_scripts


def test_the_defaults_on_purpose_are_one_key_away(tmp_path: Path) -> None:
    rules, path = _live(tmp_path, "# no rules yet\n")  # at start-up, as before
    assert rules.current == DEFAULT_RULES
    path.write_text('mode = "enforce"\n', encoding="utf-8")
    assert rules.reload()  # no table in force, none lost

    (tmp_path / "full").mkdir()
    everything, path = _live(tmp_path / "full")
    path.write_text("[deny]\n", encoding="utf-8")  # every table dropped, one left empty
    assert everything.reload()
    assert everything.current.deny.patterns == ()
    assert not everything.current.block_install_scripts


def test_a_file_still_being_written_is_not_read_until_it_holds_still(tmp_path: Path) -> None:
    rules, path = _live(tmp_path)
    with path.open("w", encoding="utf-8") as writing:  # a truncating save, caught midway
        writing.write(REAL.replace("event-stream", "left-pad")[:60])
        writing.flush()
        assert not rules.due()  # changed since the last read, but not yet seen still
        writing.write(REAL.replace("event-stream", "left-pad")[60:])
    assert not rules.due()  # it moved again since the previous poll

    assert rules.due()  # held still for one poll: read now, whole
    assert rules.reload()
    assert next(pattern.name for pattern in rules.current.deny.patterns) == "left-pad"
    assert not rules.due()  # read: nothing to do until it changes again
