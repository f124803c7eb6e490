"""The embedded directory store: written once, atomically, read back as a packument."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.npm.versions import highest
from mirrorgate.upstream.filestore import CHUNK, FileStore, StoreError
from mirrorgate.upstream.registry import StoreRegistry
from tests.test_offload import counted_hand_offs

WIDGET = parse_name("@acme/widget")


def manifest(version: str) -> dict[str, object]:
    return {"name": "@acme/widget", "version": version, "dependencies": {"a": "^1.0.0"},
            "dist": {"integrity": "sha512-AAAA", "tarball": f"widget-{version}.tgz"}}


async def test_a_stored_version_reads_back_as_a_packument_with_latest_and_time(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for version in ("1.0.0", "1.1.0", "2.0.0-rc.1"):
        assert await store.put(WIDGET, version, f"widget-{version}.tgz", manifest(version),
                               f"bytes of {version}".encode())
    packument = await store.packument(WIDGET)
    assert packument is not None
    assert sorted(packument["versions"]) == ["1.0.0", "1.1.0", "2.0.0-rc.1"]
    assert packument["dist-tags"] == {"latest": "1.1.0"}
    assert set(packument["time"]) >= {"created", "modified", "1.0.0"}
    assert packument["versions"]["1.0.0"]["dependencies"] == {"a": "^1.0.0"}


async def test_a_version_is_written_once_and_never_overwritten(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), b"first")
    assert not await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), b"second")
    chunks = [c async for c in store.tarball_chunks(WIDGET, "widget-1.0.0.tgz")]
    assert b"".join(chunks) == b"first"


async def test_nothing_is_left_half_written(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), b"x" * 100_000)
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(".incoming-")]  # noqa: ASYNC240 - a test's own tmp dir
    assert leftovers == []


@pytest.mark.parametrize("version", ["../../etc", "..", "1.0.0/../../x", ".hidden", ""])
async def test_a_version_that_would_walk_out_of_the_store_is_refused(
        tmp_path: Path, version: str) -> None:
    with pytest.raises(StoreError):
        await FileStore(tmp_path).put(WIDGET, version, "widget-1.tgz", manifest("1"), b"x")


async def test_the_store_serves_as_a_private_source(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), b"tarball")
    private = StoreRegistry(store)
    async with private.tarball(WIDGET, "widget-1.0.0.tgz") as body:
        assert body is not None
        assert body.size == 7
        assert b"".join([c async for c in body.chunks]) == b"tarball"
    async with private.tarball(WIDGET, "widget-9.9.9.tgz") as missing:
        assert missing is None
    assert await private.packument(parse_name("unknown")) is None


def test_latest_is_the_highest_stable_version_else_the_highest_prerelease() -> None:
    assert highest(["1.0.0", "1.10.0", "1.9.0", "2.0.0-rc.1"]) == "1.10.0"
    assert highest(["2.0.0-rc.2", "2.0.0-rc.10"]) == "2.0.0-rc.10"
    assert highest(["not-a-version"]) is None


def open_on(path: Path) -> list[str]:
    """This process's descriptors open on `path`."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{entry}") == str(path):
                found.append(entry)
    return found


async def test_a_stored_tarball_up_to_a_chunk_is_served_with_one_thread_hand_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Most tarballs are smaller than a read: opened, sized and read in one hand-off (a stat,
    an open, a read and the empty read at its end cost four, 44 µs of CPU each)."""
    store = FileStore(tmp_path)
    body = os.urandom(CHUNK)
    await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), body)
    handed = counted_hand_offs(monkeypatch)

    async with StoreRegistry(store).tarball(WIDGET, "widget-1.0.0.tgz") as found:
        assert found is not None
        assert found.size == CHUNK
        assert b"".join([chunk async for chunk in found.chunks]) == body

    assert len(handed) == 1


async def test_a_tarball_replaced_while_it_is_read_is_served_whole_as_it_was_opened(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = os.urandom(3 * CHUNK + 5)
    await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"), first)
    path = store.tarball_path(WIDGET, "widget-1.0.0.tgz")

    async with StoreRegistry(store).tarball(WIDGET, "widget-1.0.0.tgz") as found:
        assert found is not None
        replacement = tmp_path / "replacement"
        replacement.write_bytes(b"other")
        os.replace(replacement, path)
        assert found.size == len(first)
        assert b"".join([chunk async for chunk in found.chunks]) == first


async def test_a_stored_tarball_left_unread_closes_its_file(tmp_path: Path) -> None:
    """A client that hangs up before its body is read leaves no descriptor open."""
    store = FileStore(tmp_path)
    await store.put(WIDGET, "1.0.0", "widget-1.0.0.tgz", manifest("1.0.0"),
                    os.urandom(2 * CHUNK))
    path = store.tarball_path(WIDGET, "widget-1.0.0.tgz")

    async with StoreRegistry(store).tarball(WIDGET, "widget-1.0.0.tgz") as found:
        assert found is not None
        assert len(open_on(path)) == 1

    assert open_on(path) == []
