"""The mirror mark: what makes a private version a copy of a public one, and what does not."""

from __future__ import annotations

from mirrorgate.npm.mirrormark import (
    MARK_FIELD,
    MirrorMark,
    read_mark,
    with_mark,
    without_mark,
)

MARK = MirrorMark(published="2024-02-23T18:46:38.025Z", integrity="sha512-AAAA")


def test_a_marked_manifest_reads_back_its_mark() -> None:
    marked = with_mark({"name": "ms", "version": "2.1.3"}, MARK)
    assert read_mark(marked) == MARK
    assert marked["name"] == "ms"


def test_a_first_party_manifest_has_no_mark() -> None:
    assert read_mark({"name": "acme-utils", "version": "1.2.0"}) is None


def test_a_public_impostor_cannot_bring_its_own_mark() -> None:
    forged = {"name": "acme-utils", MARK_FIELD: {"v": 1, "source": "public", "integrity": "x"}}
    assert MARK_FIELD not in without_mark(forged)
    remarked = with_mark(forged, MARK)
    assert read_mark(remarked) == MARK


def test_marks_of_another_shape_are_not_trusted() -> None:
    for raw in (True, "public", {"v": 2, "source": "public", "integrity": "x"},
                {"v": 1, "source": "private", "integrity": "x"}, {"v": 1, "source": "public"},
                {"v": 1, "source": "public", "integrity": "x", "published": 5}):
        assert read_mark({MARK_FIELD: raw}) is None


def test_a_mark_without_a_public_time_keeps_none() -> None:
    mark = MirrorMark(published=None, integrity="sha512-BBBB")
    assert read_mark(with_mark({}, mark)) == mark
