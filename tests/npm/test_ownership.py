"""Ownership: which private versions count as mirrored, and the remembered first-party names.

The attacks: a first-party build passed off as "mirrored" (so the name would open to public
versions) by copying a mirrored manifest's mark onto other bytes; and a restart or a lost
file making a first-party name look public while the private side is down.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mirrorgate.gate.kept.firstparty import FirstPartyNames
from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.ownership import first_party_versions, mirrored_mark
from tests.store.kept import kept_on

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


async def test_first_party_names_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "data" / "state.sqlite3"
    facts = await kept_on(path)
    names = FirstPartyNames(facts)
    names.remember("acme-utils")
    names.remember("@acme/tools")
    names.remember("gone")
    names.forget("gone")
    stop = asyncio.Event()
    stop.set()
    await facts.run(stop)  # the last write on the way out, as at a SIGTERM
    await facts.close()

    again = FirstPartyNames(await kept_on(path))

    assert "acme-utils" in again
    assert "@acme/tools" in again
    assert "gone" not in again
    await again.facts.close()


def test_names_held_in_memory_only_are_not_persistent() -> None:
    names = FirstPartyNames()
    names.remember("acme-utils")
    assert "acme-utils" in names
    assert (names.persistent, names.known) == (False, True)
