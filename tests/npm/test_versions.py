"""The two readings of a version: npm's grammar (ranges, equality) and the loose order."""

from __future__ import annotations

import pytest

from mirrorgate.npm.versions import (
    highest,
    is_prerelease,
    newer,
    newest_first,
    same_version,
    unstorable,
)


def test_build_metadata_does_not_make_another_version() -> None:
    assert same_version("1.1.0+shadow", "1.1.0")
    assert same_version("1.1.0", "1.1.0")
    assert not same_version("1.1.0", "1.1.1")
    assert not same_version("not-a-version", "1.1.0")


@pytest.mark.parametrize("version", ["1.0.0+b", "2.0.0-rc.1+build.5", "1.2.3+x.y-z"])
def test_a_version_with_build_metadata_is_one_no_registry_is_sent(version: str) -> None:
    why = unstorable(version)
    assert why is not None
    assert "build metadata" in why


@pytest.mark.parametrize("version", ["1.0.0", "2.0.0-rc.1", "0.0.1-security"])
def test_a_plain_version_can_be_stored(version: str) -> None:
    assert unstorable(version) is None


def test_the_loose_order_reads_what_registries_hold_and_puts_the_unreadable_last() -> None:
    listed = ["1.2.3", "=v1.10.0", "01.2.4", "1.2.3beta", "latest-ish", "2.0.0-rc.1"]
    assert newest_first(listed) == ["2.0.0-rc.1", "=v1.10.0", "01.2.4", "1.2.3", "1.2.3beta",
                                    "latest-ish"]
    assert highest(listed) == "=v1.10.0"  # a stable release beats a prerelease
    assert highest(["2.0.0-rc.1", "2.0.0-rc.2"]) == "2.0.0-rc.2"
    assert is_prerelease("1.2.3beta")
    assert newer("1.10.0", "1.9.0")
    assert not newer("junk", "1.0.0")
