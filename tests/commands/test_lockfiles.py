"""The lockfile readers against lockfiles the real npm (v1, v2, v3), pnpm 8 (v6) and 10 (v9),
yarn 1, yarn 4 and bun wrote for one tree with a scoped package, two `npm:` aliases, a git and a
file dependency: every registry version found under its real name, the rest skipped with a note,
and a mangled file refused with its line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorgate.commands.lockfiles import LockfileError, read_lockfile
from tests.commands.lockfile_projects import LOCKFILES, REGISTRY_VERSIONS

KINDS = sorted(LOCKFILES)
LOCKED = {(name, version) for name, version in REGISTRY_VERSIONS.items()} | {
    ("@fixture/beta", "2.0.0")}  # beta-old, an alias of @fixture/beta@2.0.0

Copy = Callable[[str], Path]


@pytest.mark.parametrize("kind", KINDS)
def test_every_registry_version_is_read_under_its_real_name(kind: str,
                                                            lockfile_copy: Copy) -> None:
    lockfile = read_lockfile(lockfile_copy(kind))
    assert lockfile.kind == kind
    assert {(e.name, e.version) for e in lockfile.entries} == LOCKED
    # the aliases' installed names are never taken for package names
    assert not {"zed", "beta-old"} & {e.name for e in lockfile.entries}


@pytest.mark.parametrize("kind", KINDS)
def test_git_and_file_dependencies_are_skipped_with_a_note(kind: str,
                                                           lockfile_copy: Copy) -> None:
    skipped = {s.name: s.reason for s in read_lockfile(lockfile_copy(kind)).skipped}
    assert skipped["git-thing"] == "a git repository"
    assert skipped["local-thing"] in ("a local file or folder", "a linked folder")
    # the project itself (yarn berry's root workspace) is no dependency to note
    assert set(skipped) == {"git-thing", "local-thing"}


@pytest.mark.parametrize("kind", KINDS)
def test_each_entry_names_the_line_it_is_written_on(kind: str, lockfile_copy: Copy) -> None:
    path = lockfile_copy(kind)
    lines = path.read_text(encoding="utf-8").splitlines()
    for entry in read_lockfile(path).entries:
        assert entry.lockfile == path
        written = lines[entry.line - 1]
        # the entry's key starts there: its real or installed name is on that line
        assert entry.name in written or (entry.alias or "\0") in written, (entry, written)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "npm-v1"])
def test_the_requested_ranges_are_kept_where_the_lockfile_has_them(kind: str,
                                                                   lockfile_copy: Copy) -> None:
    # npm v1 keeps no ranges for the project's own dependencies, only between packages
    entries = {(e.name, e.version): e for e in read_lockfile(lockfile_copy(kind)).entries}
    assert entries[("alpha", "1.2.0")].ranges == ("^1.0.0",)
    assert entries[("@fixture/beta", "2.1.3")].ranges == ("~2.1.0",)
    assert "^1.0.0" in entries[("zeta", "1.0.1")].ranges  # from the alias npm:zeta@^1.0.0
    # a range that does not cover the version (delta ~0.4.0 vs ^0.4.1) is never attached to it
    assert entries[("@fixture/beta", "2.0.0")].ranges == ("2.0.0",)


def test_npm_v1_keeps_the_ranges_between_packages(lockfile_copy: Copy) -> None:
    entries = {(e.name, e.version): e for e in read_lockfile(lockfile_copy("npm-v1")).entries}
    assert entries[("delta", "0.4.2")].ranges == ("^0.4.1", "~0.4.0")
    assert entries[("zeta", "1.0.1")].alias == "zed"


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "yarn-berry"])
def test_the_integrity_the_client_recorded_is_kept(kind: str, lockfile_copy: Copy) -> None:
    # yarn berry records its own checksum of its own archive, not the registry's integrity
    for entry in read_lockfile(lockfile_copy(kind)).entries:
        assert entry.integrity is not None
        assert entry.integrity.startswith("sha512-")


def _mangle(path: Path, line: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(("kind", "garbage"), [
    ("npm-v3", '    "node_modules/alpha": {{ "version": '),
    ("npm-v1", "    ]"),
    ("pnpm-v9", "  - not: [a mapping"),
    ("yarn-berry", '  version: "1.2.0'),
    ("yarn-classic", '  version "1.2.0'),
    ("bun", '        "zed": "npm:zeta@^1.0.0'),
])
def test_a_malformed_lockfile_is_refused_with_its_line(kind: str, garbage: str,
                                                       lockfile_copy: Copy) -> None:
    path = lockfile_copy(kind)
    _mangle(path, 12, garbage)
    with pytest.raises(LockfileError) as caught:
        read_lockfile(path)
    assert caught.value.path == path
    assert 12 <= caught.value.line <= 14, caught.value
    assert str(caught.value).startswith(f"{path}:{caught.value.line}: ")


def test_an_entry_without_a_version_is_refused_with_its_line(lockfile_copy: Copy) -> None:
    path = lockfile_copy("yarn-classic")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('  version "1.2.0"\n', "", 1), encoding="utf-8")
    with pytest.raises(LockfileError, match=r"yarn.lock:13: entry 'alpha@\^1.0.0' has no version"):
        read_lockfile(path)


def test_a_file_that_is_no_lockfile_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "package.json"
    path.write_text("{}\n", encoding="utf-8")
    with pytest.raises(LockfileError, match="is not a lockfile mirrorgate reads"):
        read_lockfile(path)


def test_an_unknown_lockfile_version_is_refused(lockfile_copy: Copy) -> None:
    path = lockfile_copy("pnpm-v9")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("lockfileVersion: '9.0'", "lockfileVersion: '5.4'"),
                    encoding="utf-8")
    with pytest.raises(LockfileError, match=r"pnpm-lock.yaml:1: has lockfileVersion '5.4'"):
        read_lockfile(path)


def test_yarn_berrys_patched_copy_pins_the_same_npm_version(lockfile_copy: Copy) -> None:
    # yarn 4 locks `resolve` twice: as is, and as `resolve@patch:resolve@npm%3A^1.21.0#...`
    # (its built-in compatibility patch); both are the npm version 1.22.8, read once
    path = lockfile_copy("yarn-berry")
    assert "resolve@patch:resolve@npm%3A" in path.read_text(encoding="utf-8")
    entries = [e for e in read_lockfile(path).entries if e.name == "resolve"]
    assert [(e.version, e.ranges, e.alias) for e in entries] == [("1.22.8", ("^1.21.0",), None)]


def test_bun_lock_is_read_with_its_trailing_commas_and_bun_lockb_is_named(
        lockfile_copy: Copy, tmp_path: Path) -> None:
    # Seen by hand: bun is a supported client, yet `mirrorgate check bun.lock` answered "is not
    # a lockfile mirrorgate reads ... fix or regenerate the lockfile", which no bun user can.
    path = lockfile_copy("bun")
    text = path.read_text(encoding="utf-8")
    assert ",\n  }" in text or ",\n    }" in text  # bun's JSON has trailing commas
    entries = {(e.name, e.version): e for e in read_lockfile(path).entries}
    assert entries[("@fixture/beta", "2.0.0")].alias == "beta-old"
    assert entries[("delta", "0.4.2")].ranges == ("^0.4.1", "~0.4.0")  # between packages
    assert entries[("alpha", "1.2.0")].resolved is not None
    assert entries[("alpha", "1.2.0")].resolved.endswith("/alpha/-/alpha-1.2.0.tgz")
    binary = tmp_path / "bun.lockb"
    binary.write_bytes(b"#!/usr/bin/env bun\nbun-lockfile-format-v0\n\x00\x01")
    with pytest.raises(LockfileError, match="bun install --save-text-lockfile"):
        read_lockfile(binary)
