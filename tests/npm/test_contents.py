"""A release's contents as the release signals read them (`npm.contents`): in the same pass as
the install-scripts scan, bounded, and what the bounds left unread said."""

from __future__ import annotations

import pytest

from mirrorgate.npm import contents, jsmarks
from mirrorgate.npm.contents import contents_of
from tests.servers.incidents import entry_file, obfuscated_blob
from tests.servers.packages import build_tarball


def test_every_javascript_file_is_measured_by_its_path_inside_the_package() -> None:
    read = contents_of(build_tarball({"package.json": b"{}", "index.js": entry_file("x"),
                                      "lib/a.mjs": obfuscated_blob("x"), "README.md": b"#"}))
    assert sorted(read.code) == ["index.js", "lib/a.mjs"]
    assert read.code["index.js"].kinds == frozenset()
    assert {"hex-identifiers", "escapes"} <= read.code["lib/a.mjs"].kinds
    assert read.unread == ()


def test_what_runs_at_install_is_read_from_the_tarballs_own_files() -> None:
    manifest = b'{"scripts": {"postinstall": "node setup.js", "test": "jest"}}'
    read = contents_of(build_tarball({"package.json": manifest, "binding.gyp": b"{}"}))
    assert read.runs == ("postinstall (node setup.js)", "binding.gyp")
    assert read.hooks == frozenset({"postinstall", "binding.gyp"})


def test_a_file_past_the_per_file_bound_is_read_in_part_and_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contents, "READ_PER_FILE", 1000)
    read = contents_of(build_tarball({"package.json": b"{}", "big.js": b"x=1;\n" * 1000}))
    assert not read.code["big.js"].whole
    assert read.unread == ("big.js read to byte 1000 of 5000",)


def test_files_past_the_count_bound_are_not_read_and_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contents, "MAX_CODE_FILES", 2)
    files = {f"f{i}.js": b"x" for i in range(5)}
    read = contents_of(build_tarball({"package.json": b"{}", **files}))
    assert len(read.code) == 2
    assert read.unread == ("3 JavaScript files past the first 2 or past 67108864 bytes",)


def test_an_unchanged_file_takes_its_marks_from_the_other_version_unmeasured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    same, changed = entry_file("same"), entry_file("changed")
    new = contents_of(build_tarball({"package.json": b"{}", "a.js": same, "b.js": changed}))
    measured: list[int] = []
    real = jsmarks.marks_of

    def counting(data: bytes, size: int, digest: bytes | None = None) -> jsmarks.FileMarks:
        measured.append(size)
        return real(data, size, digest)

    monkeypatch.setattr(contents, "marks_of", counting)
    old = contents_of(build_tarball({"package.json": b"{}", "a.js": same, "b.js": b"old"}),
                      new.code)
    assert measured == [3]  # b.js only
    assert old.code["a.js"] is new.code["a.js"]


def test_unreadable_contents_are_a_problem_not_an_empty_release() -> None:
    assert contents_of(b"\x1f\x8b\x08 broken").problem is not None
    assert contents_of(build_tarball({"package.json": b"{}"})[:-40]).problem is not None


def test_kept_readings_hold_the_last_versions_within_their_byte_bound() -> None:
    read = contents_of(build_tarball({"package.json": b"{}", "a.js": b"a", "b.js": b"b"}))
    # each weighs its own objects, 2 paths and 2 files' marks: two fit, not three
    kept = contents.KeptReadings(max_bytes=2 * contents._bytes_of(read))
    assert contents._bytes_of(read) == contents._READING_BYTES + 4 * contents._FILE_BYTES
    for version in ("1.0.0", "1.0.1", "1.0.2"):
        kept.keep(("x", version, "sha512-x"), read)
    assert kept.get(("x", "1.0.0", "sha512-x")) is None  # the oldest went first
    assert kept.get(("x", "1.0.2", "sha512-x")) is read
    kept.keep(("x", "2.0.0", ""), read)  # no digest: no bytes to name
    kept.keep(("x", "2.0.1", "sha512-y"), contents_of(b"\x1f\x8b\x08 broken"))
    assert kept.get(("x", "2.0.0", "")) is None
    assert kept.get(("x", "2.0.1", "sha512-y")) is None


def test_kept_readings_weigh_each_reading_and_the_paths_it_lists() -> None:
    # a burst of distinct small versions: each reading holds its package.json, layout and
    # capabilities whatever its files, so each weighs that much (row 13 of the faults table
    # grew by each first pull's reading for the whole burst)
    small = contents_of(build_tarball({"package.json": b"{}", "index.js": b"a"}))
    kept = contents.KeptReadings(max_bytes=3 * contents._bytes_of(small))
    for patch in range(10):
        kept.keep(("x", f"1.0.{patch}", "sha512-x"), small)
    assert len(kept) == 3
    assert [kept.get(("x", f"1.0.{patch}", "sha512-x")) is small for patch in (6, 7, 8, 9)] \
        == [False, True, True, True]
    # the control: a package of many files and no JavaScript weighs its paths, not one
    images = contents_of(build_tarball({"package.json": b"{}", **{
        f"img/{index}.png": b"\x89PNG" for index in range(50)}}))
    assert images.code == {}
    assert contents._bytes_of(images) == contents._READING_BYTES + 50 * contents._FILE_BYTES
    kept = contents.KeptReadings(max_bytes=2 * contents._bytes_of(images) + 100)
    for patch in range(3):
        kept.keep(("y", f"1.0.{patch}", "sha512-y"), images)
    assert len(kept) == 2  # the third pushes out the first


def test_marks_lent_once_the_baseline_is_chosen_serve_the_files_fed_from_then_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the relay feeds the new version while `gate.verdicts.baseline` chooses what it is compared
    # with: a kept reading is lent partway, and the marks come out as a fresh read's
    same, changed = entry_file("same"), entry_file("changed") + obfuscated_blob("changed")
    files = {"package.json": b"{}", "a.js": changed, "b.js": same}
    old = contents_of(build_tarball({"package.json": b"{}", "a.js": b"old", "b.js": same}))
    fresh = contents_of(build_tarball(files))
    measured: list[int] = []
    real = jsmarks.marks_of

    def counting(data: bytes, size: int, digest: bytes | None = None) -> jsmarks.FileMarks:
        measured.append(size)
        return real(data, size, digest)

    monkeypatch.setattr(contents, "marks_of", counting)
    tarball = build_tarball(files)
    reading = contents.ContentReading()
    reading.scan.feed(tarball[:10])  # the first bytes in before the baseline is known
    reading.lend(old.code)
    reading.scan.feed(tarball[10:])
    read = reading.contents()
    assert read.code == fresh.code
    assert read.code["b.js"] is old.code["b.js"]  # unchanged: lent, not measured
    assert measured == [len(changed)]
