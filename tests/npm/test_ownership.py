"""Ownership: which private versions count as mirrored, and the remembered first-party names.

The attacks: a first-party build passed off as "mirrored" (so the name would open to public
versions) by copying a mirrored manifest's mark onto other bytes; and a restart or a lost
file making a first-party name look public while the private side is down.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.gate.firstparty import FILENAME, FirstPartyNames
from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.ownership import first_party_versions, mirrored_mark

OURS = "sha512-" + "A" * 86 + "=="
OTHER = "sha512-" + "B" * 86 + "=="


def manifest(integrity: str, mark: str | None) -> dict[str, object]:
    document: dict[str, object] = {"name": "acme-utils", "version": "1.0.0",
                                   "dist": {"integrity": integrity}}
    return with_mark(document, MirrorMark("2020-01-01T00:00:00Z", mark)) if mark else document


def test_a_mark_naming_the_versions_own_integrity_makes_it_mirrored() -> None:
    assert mirrored_mark(manifest(OURS, OURS)) is not None


def test_a_mark_copied_onto_other_bytes_leaves_the_version_first_party() -> None:
    assert mirrored_mark(manifest(OURS, OTHER)) is None
    assert first_party_versions({"versions": {"1.0.0": manifest(OURS, OTHER)}}) == ["1.0.0"]


def test_a_name_with_only_mirrored_versions_has_no_first_party_version() -> None:
    document = {"versions": {"1.0.0": manifest(OURS, OURS), "1.1.0": manifest(OTHER, OTHER)}}
    assert first_party_versions(document) == []
    assert first_party_versions(None) == []


def test_a_version_that_is_not_a_manifest_counts_as_first_party() -> None:
    assert first_party_versions({"versions": {"1.0.0": "junk"}}) == ["1.0.0"]


def test_first_party_names_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "data" / FILENAME
    names = FirstPartyNames(path)
    names.remember("acme-utils")
    names.remember("@acme/tools")
    names.remember("gone")
    names.forget("gone")

    again = FirstPartyNames(path)

    assert "acme-utils" in again
    assert "@acme/tools" in again
    assert "gone" not in again


def test_the_memory_is_bounded_forgetting_the_least_recently_filled_first(
        tmp_path: Path) -> None:
    names = FirstPartyNames(tmp_path / FILENAME, limit=2)
    names.remember("a")
    names.remember("b")
    names.remember("a")
    names.remember("c")

    assert ("a" in names, "b" in names, "c" in names) == (True, False, True)
    assert len(FirstPartyNames(tmp_path / FILENAME, limit=2)) == 2


def test_the_file_is_compacted_when_it_grows(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    names = FirstPartyNames(path)
    for _ in range(700):
        names.remember("flip")
        names.forget("flip")
    names.remember("kept")

    assert len(path.read_text().splitlines()) < 1000
    reloaded = FirstPartyNames(path)
    assert ("kept" in reloaded, "flip" in reloaded, len(reloaded)) == (True, False, 1)


def test_an_unwritable_data_directory_keeps_the_memory_in_process(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data directory should be")
    names = FirstPartyNames(tmp_path / "data" / FILENAME)
    names.remember("acme-utils")
    names.remember("@acme/tools")
    assert "acme-utils" in names
    assert "@acme/tools" in names


def test_an_unusable_file_is_ignored_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    path.write_text("+ok\n?junk\n+\n" + "+" + "x" * 400 + "\n", encoding="utf-8")
    reloaded = FirstPartyNames(path)
    assert ("ok" in reloaded, len(reloaded)) == (True, 1)
