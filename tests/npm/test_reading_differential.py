"""The reading's shortcuts read what the plain computation reads (issue 55's cost, docs/serving.md
"Cost"): each shortcut switched back to its plain form, real releases' tarballs and the
incident payloads read both ways and compared whole; the tar walk fed every way its bytes can
be cut."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from tree_sitter import Tree

from mirrorgate.npm import contents, jsmarks, jsuses, tarball
from mirrorgate.npm.capabilities import INSTALL
from mirrorgate.npm.contents import ContentReading, Contents, contents_of
from mirrorgate.npm.js import calls, windows
from mirrorgate.npm.jsuses import NETWORK, UNREAD
from mirrorgate.rules.capabilities import of_release
from mirrorgate.rules.release import Release
from tests.servers.incidents import axios_shape, chalk_shape, shai_hulud_shape
from tests.servers.packages import build_tarball
from tests.servers.payloads import flatmap_payload, interceptor, stealer, worm_bundle

FIXTURES = Path(__file__).parent / "fixtures"


def _release(folder: Path) -> bytes:
    """A real release's files (tests/npm/fixtures/releases) packed as npm packs them."""
    return build_tarball({str(path.relative_to(folder)): path.read_bytes()
                          for path in sorted(folder.rglob("*")) if path.is_file()})


def _tarballs() -> dict[str, bytes]:
    """Real releases (the capability fixtures and the registry fixtures' real tarballs), the
    incident shapes and their payloads in one package."""
    found = {folder.name: _release(folder)
             for folder in sorted((FIXTURES / "releases").iterdir()) if folder.is_dir()}
    found |= {path.name: path.read_bytes()
              for path in sorted((FIXTURES / "registry").glob("*.tgz"))}
    shapes = [shai_hulud_shape(), chalk_shape(), *axios_shape()]
    found |= {f"{package.name}@{version}": package.version(version).tarball
              for package in shapes for version in package.versions}
    manifest = {"name": "payloads", "version": "1.0.0", "main": "index.js",
                "scripts": {"postinstall": "node install.js"}}
    found["payloads"] = build_tarball({
        "package.json": json.dumps(manifest).encode(),
        "index.js": b"require('./lib/stream');\nrequire('./lib/dynamic');\n"
        + b"".join(f"require('./lib/part{index}');\n".encode() for index in range(3))
        + interceptor("x") + stealer(),
        "install.js": worm_bundle(), "lib/stream.js": flatmap_payload(),
        # a dynamic call with no decoding near it, and one past a decoding 5 KB away
        "lib/dynamic.js": b"function run(code) { return eval(code) }\n" + b"//" * 2_600
        + b"\nconst text = atob(payload);\nnew Function(text)();\n",
        # a compiler's helper in every file: its window parsed once
        **{f"lib/part{index}.js": _HELPER + f"exports.part = {index};\n".encode()
           for index in range(3)}})
    return found


_HELPER = (b'"use strict";\n' + b"// a compiler writes its helpers in each file\n" * 8
           + b'var load = typeof require === "function" ? require : null;\n'
           + b"// the helper goes on past the window around the word found in it\n" * 6)


TARBALLS = _tarballs()


def _plain_line(reading: object, offset: int) -> int:
    data: bytes = reading.data  # type: ignore[attr-defined]
    return data.count(b"\n", 0, offset) + 1


def _read_all(lean: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Contents], int]:
    """Every tarball read, and the windows parsed for it."""
    parses = 0
    parser = windows.thread_parser()

    class Counted:
        def parse(self, code: bytes) -> Tree:
            nonlocal parses
            parses += 1
            return parser.parse(code)

    monkeypatch.setattr(jsuses, "thread_parser", Counted)
    read = {name: contents_of(data, lean=lean) for name, data in TARBALLS.items()}
    return read, parses


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "whole"])
def test_the_readings_shortcuts_read_what_the_plain_computation_reads(
        monkeypatch: pytest.MonkeyPatch, lean: bool) -> None:
    decoding: list[bool] = []
    may_decode = calls.may_decode

    def counted(code: bytes) -> bool:
        decoding.append(may_decode(code))
        return decoding[-1]

    monkeypatch.setattr(calls, "may_decode", counted)
    fast, parsed = _read_all(lean, monkeypatch)
    # both ways of a dynamic call's wide parse were taken: spared, and parsed
    assert True in decoding
    assert False in decoding

    monkeypatch.setattr(windows, "KEPT_WINDOW", -1)  # no tree kept for the same bytes again
    unkept, parsed_unkept = _read_all(lean, monkeypatch)
    assert parsed < parsed_unkept  # the helper's window parsed once
    assert unkept == fast

    monkeypatch.setattr(calls, "may_decode", lambda code: True)  # every wide parse made
    monkeypatch.setattr(windows.Reading, "line", _plain_line)  # lines counted from the start
    monkeypatch.setattr(tarball, "_byte_sum", sum)
    monkeypatch.setattr(jsmarks, "_hex_prefixes",
                        lambda data, least: data.count(b"_0x") >= least)
    plain, _parsed = _read_all(lean, monkeypatch)

    for name, read in fast.items():
        assert read.problem is None, name
        assert read == plain[name], name
    assert any(read.capabilities.found for read in fast.values())


def _fed(data: bytes, cut: Callable[[bytes], list[bytes]], lean: bool) -> Contents:
    reading = ContentReading(lean=lean)
    for piece in cut(data):
        reading.scan.feed(piece)
    reading.scan.settle()
    return reading.contents()


def _cuts(size: int) -> Callable[[bytes], list[bytes]]:
    return lambda data: [data[at:at + size] for at in range(0, len(data), size)]


def _refilled(data: bytes) -> Contents:
    """`data` fed through one bytearray refilled for every piece, as a reader of a socket may
    hand its buffer over: what was fed before must not change with it."""
    reading = ContentReading(lean=True)
    buffer = bytearray(4096)
    for at in range(0, len(data), len(buffer)):
        piece = data[at:at + len(buffer)]
        buffer[:len(piece)] = piece
        reading.scan.feed(buffer if len(piece) == len(buffer)  # type: ignore[arg-type]
                          else piece)
    reading.scan.settle()
    return reading.contents()


@pytest.mark.parametrize("name", ["axios-1.7.9", "esbuild-0.24.0", "payloads",
                                  "coffee-script-1.0.0.tgz"])
def test_the_tar_walk_reads_the_same_whatever_the_cuts_of_its_bytes(name: str) -> None:
    compressed = TARBALLS[name]
    whole = contents_of(compressed, lean=True)
    assert whole.problem is None
    assert whole.code
    for cut in (_cuts(7), _cuts(511), _cuts(513), _cuts(65_537)):
        assert _fed(compressed, cut, lean=True) == whole
    # a plain tar hands its pieces to the walk as they come: cut across headers and files,
    # and fed through one buffer refilled each time
    plain = gzip.decompress(compressed)
    for cut in (_cuts(1_000), _cuts(512), _cuts(len(plain))):
        assert _fed(plain, cut, lean=True) == whole
    assert _refilled(plain) == whole


def test_a_headers_checksum_sums_its_bytes_as_the_plain_sum_does() -> None:
    rng = random.Random(55)
    blocks = [bytes(512), b"\xff" * 512, *(rng.randbytes(512) for _ in range(200))]
    for block in blocks:
        assert tarball._byte_sum(block[:148]) + tarball._byte_sum(block[156:412]) + \
            tarball._byte_sum(block[412:]) == sum(block[:148]) + sum(block[156:])


@pytest.mark.parametrize("size", [10, 65_536 - 1, 65_536 + 1, 3 * 65_536 + 5])
def test_obfuscator_names_are_counted_as_bytes_count_counts_them(size: int) -> None:
    rng = random.Random(size)
    for wanted in (0, 39, 40, 41, 500):
        data = bytearray(b"x" * size)
        # the names anywhere, across the chunks' edges too
        for at in rng.sample(range(max(1, size - 3)), min(wanted, max(1, size - 3) // 4)):
            data[at:at + 3] = b"_0x"
        for edge in range(65_536 - 2, size - 3, 65_536):
            data[edge:edge + 3] = b"_0x"
        text = bytes(data)
        for least in (1, 40, 41):
            assert jsmarks._hex_prefixes(text, least) == (text.count(b"_0x") >= least)


def test_the_trees_kept_for_the_same_bytes_go_once_the_reading_settles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contents, "DEFERRED_BYTES", 0)  # each file read as it comes
    reading = ContentReading(lean=True)
    reading.scan.feed(TARBALLS["payloads"])
    reading.scan.finish()
    kept = reading._budget.trees
    assert kept  # the helper's window, among others
    reading.scan.settle()
    assert not kept
    assert reading.contents().capabilities.found


def _held_or_read(lean_read: Contents, every: Contents) -> int:
    """How many of `lean_read`'s files were held and never read, each checked to stand as
    code not read whole (never as clean code); every other file's marks as `every` read them."""
    held = 0
    assert lean_read.code.keys() == every.code.keys()
    for path, marks in lean_read.code.items():
        if marks != every.code[path]:
            assert marks.uses is None, path
            assert every.code[path].uses is not None, path
            held += 1
    return held


def test_a_lean_reading_reads_of_the_files_it_holds_those_that_run_and_finds_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = {name: contents_of(data, lean=True) for name, data in TARBALLS.items()}
    monkeypatch.setattr(contents, "DEFERRED_BYTES", 0)  # every file read as it comes
    every = {name: contents_of(data, lean=True) for name, data in TARBALLS.items()}
    unread = 0
    for name, read in held.items():
        assert read.capabilities == every[name].capabilities, name
        assert (read.runs, read.unread, read.scripts, read.layout) == (
            every[name].runs, every[name].unread, every[name].scripts, every[name].layout), name
        unread += _held_or_read(read, every[name])
    assert unread > 20  # 33 of their files run neither at install nor at load: never read
    assert any(read.capabilities.found for read in held.values())


def test_a_file_only_the_registry_manifests_hook_runs_is_read_with_those_its_package_json_runs(
        ) -> None:
    # the attack: the registry manifest's postinstall (which npm runs, while the tarball's
    # package.json declares none) runs a file nothing in the package.json names; held and
    # never asked for, it would be code not read
    files = {"package.json": json.dumps({"name": "x", "version": "1.0.1",
                                         "main": "index.js"}).encode(),
             "index.js": b"module.exports = 1;\n", "lib/steal.js": stealer("install")}
    extra = {"postinstall": "node lib/steal.js"}
    data = build_tarball(files)
    read = contents_of(data, lean=True, commands=extra)
    found = of_release(Release("1.0.1", read, commands=extra)).where(NETWORK, INSTALL)
    assert [item.file for item in found] == ["lib/steal.js"]
    assert found[0].line > 0
    # control: read without the registry's hooks, the file held is never read, and the same
    # walk finds it unread (held by `new-capability` as a gain), never clean
    blind = of_release(Release("1.0.1", contents_of(data, lean=True), commands=extra))
    assert not blind.where(NETWORK, INSTALL)
    assert [item.file for item in blind.where(UNREAD, INSTALL)] == ["lib/steal.js"]
