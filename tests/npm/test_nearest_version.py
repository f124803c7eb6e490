"""What to use instead of a denied version: the nearest admitted one, by npm's ordering."""

from __future__ import annotations

from mirrorgate.npm.versions import nearest


def test_the_nearest_admitted_version_is_the_newest_older_one_else_the_oldest_newer() -> None:
    assert nearest("2.0.0", ["1.0.0", "1.9.9", "2.1.0", "10.0.0"]) == "1.9.9"
    assert nearest("1.0.0", ["2.1.0", "1.5.0", "junk"]) == "1.5.0"


def test_nothing_comparable_gives_no_suggestion() -> None:
    assert nearest("1.0.0", []) is None
    assert nearest("junk", ["1.0.0"]) is None
