"""The corpus's cases: their kinds, the history served with them, the rounds that keep two cases
of one package name apart, and tarballs read and packed as npm reads and packs them."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bench.corpus import (
    KINDS,
    PUBLISHED_AGO,
    SHAPE,
    UPDATE,
    Case,
    Dependency,
    Published,
    files_of,
    in_order,
    pack,
    stored,
)
from bench.gate_verdicts import package_of, rounds
from bench.real_updates import wanted

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _case(tmp_path: Path, name: str, kind: str = UPDATE, *, adds: str = "") -> Case:
    versions = []
    for index, version in enumerate(("1.0.0", "1.0.1")):
        manifest = {"name": name, "version": version, "main": "index.js"}
        tarball = pack({"package.json": json.dumps(manifest).encode(),
                        "index.js": f"module.exports = {index};\n".encode()})
        versions.append(Published(version, manifest, stored(tmp_path, tarball),
                                  NOW - timedelta(days=10 - 8 * index)))
    dependencies = (Dependency(adds, ({"name": adds, "version": "1.0.0"},),
                               {"1.0.0": NOW, "created": NOW}),) if adds else ()
    return Case(kind, f"{name}@1.0.1", name, tuple(versions), ("1.0.1",),
                NOW - timedelta(days=900), kind != UPDATE, dependencies=dependencies)


def test_a_case_judges_only_versions_it_serves_and_only_known_kinds(tmp_path: Path) -> None:
    good = _case(tmp_path, "left-pad")
    with pytest.raises(ValueError, match="judged"):
        Case(UPDATE, "x", "left-pad", good.versions, ("2.0.0",), NOW, False)
    with pytest.raises(ValueError, match="unknown kind"):
        Case("benign", "x", "left-pad", good.versions, ("1.0.1",), NOW, False)
    assert good.kind in KINDS


def test_a_release_is_served_two_days_old_and_its_predecessor_always_before_it() -> None:
    # yorkie on the registry here: 2.0.0 dated 2024-11-22, 1.0.3 (copied later) 2024-12-02;
    # served so, the gate would find no release before 2.0.0 and compare nothing
    copied_later = datetime(2024, 12, 2, tzinfo=UTC)

    new, old = in_order(copied_later, NOW)

    assert new == NOW - PUBLISHED_AGO  # past the cooldown, a quarantine still in force
    assert old == copied_later
    assert in_order(NOW, NOW) == (NOW - PUBLISHED_AGO,
                                  NOW - PUBLISHED_AGO - timedelta(minutes=1))


def test_the_predecessor_stands_for_the_package_first_publish_when_that_is_earlier() -> None:
    # only two versions are served: a gate that dates a package by its listed versions finds
    # it as old as its registry says, not as old as its last release
    last_week, first = NOW - timedelta(days=7), datetime(2015, 3, 1, tzinfo=UTC)

    assert in_order(last_week, NOW, first)[1] == first
    assert in_order(last_week, NOW, None)[1] == last_week


def test_the_package_served_carries_its_first_publish_and_real_bytes(tmp_path: Path) -> None:
    case = _case(tmp_path, "left-pad")

    package = package_of(case)
    document = package.packument("http://127.0.0.1:9/")

    assert document["time"]["created"].startswith("2024-06-18")  # 900 days before, not 1.0.0's
    assert package.versions["1.0.1"].tarball == case.published("1.0.1").tarball.read_bytes()
    assert document["dist-tags"]["latest"] == "1.0.1"


def test_rounds_never_serve_one_package_name_twice(tmp_path: Path) -> None:
    first = _case(tmp_path, "debug")
    second = _case(tmp_path, "debug", adds="ms")  # another pin of debug
    third = _case(tmp_path, "chalk", SHAPE, adds="ms")  # adds what the second adds
    fourth = _case(tmp_path, "ansi-styles")

    found = rounds([first, second, third, fourth])

    assert [[case.name for case in members] for members in found] == [
        ["debug", "chalk", "ansi-styles"], ["debug"]]


def test_files_are_read_past_any_top_folder_and_packed_under_package(tmp_path: Path) -> None:
    # an old packer's folder name (`node-uuid/`), a directory entry, a symlink: npm strips the
    # first component and writes regular files only
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data in (("node-uuid/package.json", b"{}"), ("node-uuid/lib/uuid.js", b"x")):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("node-uuid/lib")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        link = tarfile.TarInfo("node-uuid/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)

    files = files_of(buffer.getvalue())
    with tarfile.open(fileobj=io.BytesIO(pack(files)), mode="r:gz") as repacked:
        names = repacked.getnames()

    assert files == {"package.json": b"{}", "lib/uuid.js": b"x"}
    assert names == ["package/lib/uuid.js", "package/package.json"]


def test_a_round_holds_at_most_its_size(tmp_path: Path) -> None:
    cases = [_case(tmp_path, f"p{i}") for i in range(5)]

    assert [len(members) for members in rounds(cases, size=2)] == [2, 2, 1]


def test_updates_are_the_top_names_then_each_lockfiles_pins_in_turn_without_repeats() -> None:
    pins = [[("a", "1.0.0"), ("b", "2.0.0"), ("c", "3.0.0")],
            [("a", "1.0.0"), ("d", "4.0.0")],
            [("e", "5.0.0")], [], []]

    found = wanted(6, ["react", "lodash"], pins)

    assert found == [("react", None, "top-dependents"), ("lodash", None, "top-dependents"),
                     ("a", "1.0.0", "axios"), ("e", "5.0.0", "hono"),
                     ("b", "2.0.0", "axios"), ("d", "4.0.0", "chartjs")]
    assert len(wanted(2, ["react", "lodash", "chalk"], pins)) == 2
