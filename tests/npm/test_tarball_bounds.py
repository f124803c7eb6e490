"""Each bound of mirrorgate's tarball reader against what npm itself does at it and past it:
npm's own node-tar lists each tarball and pacote extracts it, npm's own package.json reader
parses what was extracted (tests/npm/nodetar.js, the copies `npm root -g` holds, the code an
install runs), beside `npm.tarball` and `npm.tarscripts`.

At a bound mirrorgate reads what npm reads; past it, where npm still installs the package,
mirrorgate refuses it with a reason naming the bound (the release signals then refuse the
version as `unreadable-release`, tests/e2e/test_release_unread.py); where npm refuses it too
(node-tar aborts past 1,000 times as many bytes out as in), either way nothing installs.
The bounds of the differential corpus (a pax header over 1 MiB, a path over 1,024 folders)
are tests/npm/test_tarball_differential.py's."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.npm import tarball
from mirrorgate.npm.tarscripts import MAX_MANIFEST_BYTES, scripts_in
from tests.npm.bombs import MIB, entries
from tests.npm.tarshapes import END, HOOK, data_blocks, file, header, pax
from tests.npm.test_tarball_differential import read

POSTINSTALL = "node evil.js"


def _hooked(size: int) -> bytes:
    """A package.json of exactly `size` bytes whose `postinstall` npm runs."""
    head = b'{"name": "x", "version": "1.0.0", "scripts": {"postinstall": "node evil.js"}, ' \
           b'"description": "'
    return head + b"d" * (size - len(head) - 2) + b'"}'


def _nested(depth: int) -> bytes:
    return HOOK[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"


def _package(document: bytes) -> bytes:
    return gzip.compress(file("package/package.json", document) + END, mtime=0)


def _pax_size_unlike_ustar() -> bytes:
    """node-tar takes the pax `size` (the package.json's), a reader of the ustar one (0) reads
    the package.json's bytes as the next header."""
    return gzip.compress(pax([("size", str(len(HOOK)))]) + header("package/package.json", 0)
                         + data_blocks(HOOK) + END, mtime=0)


def _members(count: int) -> bytes:
    """`count` gzip members: empty ones, then the package in the last."""
    return gzip.compress(b"", mtime=0) * (count - 1) + _package(HOOK)


def _keyed(records: int) -> bytes:
    """pax headers of up to 100,000 `path` records each, `records` in all, then a file."""
    record = pax([("path", "a")])[512:].rstrip(b"\0")  # `9 path=a`, the shortest there is
    parts = [file("package/package.json", HOOK)]
    while records > 0:
        taken = min(records, 100_000)
        parts += [file("PaxHeader/x", record * taken, b"x"), file("package/b.js", b"1")]
        records -= taken
    return gzip.compress(b"".join(parts) + END, mtime=0)


def _long_paths(files: int, extra: int = 0) -> bytes:
    """`files` files whose paths inside the package are 2,048 bytes each (`extra` more for the
    last), in folders of 200-character names: 16,384 of them and `package.json` add up to
    32 MiB when the last is 12 bytes shorter."""
    folder = "/".join(f"{index:02d}".ljust(200, "f") for index in range(9))  # 1,808 bytes
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(file("package/package.json", HOOK))]
    for index in range(files):
        name = f"{index:06d}".ljust(2048 - len(folder) - 1 + (extra if index == files - 1
                                                                   else 0), "n")
        parts.append(deflate.compress(pax([("path", f"package/{folder}/{name}")])
                                      + file("package/x", b"")))
    return b"".join([*parts, deflate.compress(END), deflate.flush()])


def _unpacking(total_mib: int, random_per_mib: int) -> bytes:
    """A file of `total_mib` MiB, each MiB `random_per_mib` random bytes and zeros: the
    ratio of bytes out to bytes in is about MiB / `random_per_mib`."""
    noise = random.Random(total_mib)
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(file("package/package.json", HOOK)
                              + header("package/data.bin", total_mib * MIB))]
    zeros = b"\0" * (MIB - random_per_mib)
    for _ in range(total_mib):
        parts.append(deflate.compress(noise.randbytes(random_per_mib) + zeros))
    return b"".join([*parts, deflate.compress(END), deflate.flush()])


@dataclass(frozen=True)
class Case:
    """A tarball at or past a bound: what mirrorgate's reader says of it (None: it reads it
    as npm does; else words of its refusal), and whether npm installs it (None: npm does
    not; else what it writes: `postinstall`, a package.json npm reads the hook from, or
    `parsed`, every entry listed with no warning, the tarball being too large to extract
    in a test)."""

    build: Callable[[], bytes]
    refused: str | None
    npm: str | None
    scripts: bool = False  # read through the install-scripts scan (package.json bounds)


CASES: dict[str, Case] = {
    "package-json-of-1-mib": Case(lambda: _package(_hooked(MAX_MANIFEST_BYTES)), None,
                                  "postinstall", scripts=True),
    "package-json-over-1-mib": Case(lambda: _package(_hooked(MAX_MANIFEST_BYTES + 1)),
                                    "larger than 1048576 bytes", "postinstall", scripts=True),
    "package-json-500-deep": Case(lambda: _package(_nested(500)), None, "postinstall",
                                  scripts=True),
    "package-json-500000-deep": Case(lambda: _package(_nested(500_000)), "nests deeper",
                                     "postinstall", scripts=True),
    "pax-size-unlike-ustar": Case(_pax_size_unlike_ustar, "ustar size", "postinstall"),
    "entries-200000": Case(lambda: entries(HOOK, tarball.MAX_ENTRIES - 1), None, "parsed"),
    "entries-200001": Case(lambda: entries(HOOK, tarball.MAX_ENTRIES), "more than 200000 "
                           "entries", "parsed"),
    "gzip-members-4096": Case(lambda: _members(tarball.MAX_FRAMES), None, "postinstall"),
    "gzip-members-4097": Case(lambda: _members(tarball.MAX_FRAMES + 1), "more than 4096 gzip",
                              "postinstall"),
    "pax-records-600000": Case(lambda: _keyed(tarball.MAX_PAX_KEYED), None, "postinstall"),
    "pax-records-600001": Case(lambda: _keyed(tarball.MAX_PAX_KEYED + 1), "pax records",
                               "postinstall"),
    "paths-of-32-mib": Case(lambda: _long_paths(16_384, extra=-12), None, "parsed"),
    "paths-past-32-mib": Case(lambda: _long_paths(16_384, extra=-11), "add up to more than",
                              "parsed"),
    "unpacking-60-mib-at-300x": Case(lambda: _unpacking(60, 2048), None, "postinstall"),
    "unpacking-100-mib-at-300x": Case(lambda: _unpacking(100, 2048), "compression bomb",
                                      "parsed"),
    "unpacking-600-mib-at-50x": Case(lambda: _unpacking(600, 20 * 1024), "unpacks to more "
                                     "than", "parsed"),
    "unpacking-past-1000x": Case(lambda: _unpacking(100, 0), "compression bomb", None),
}


class _Nothing:
    """An entry reader that wants no bytes: the reader's own verdict alone."""

    def entry(self, entry: tarball.Entry) -> int:
        return 0

    def data(self, entry: tarball.Entry, data: bytes) -> None:
        raise AssertionError("no data was asked for")


def _problem(data: bytes) -> str | None:
    reader = tarball.TarballReader(_Nothing())
    view = memoryview(data)
    for start in range(0, len(view), 256 * 1024):
        reader.feed(bytes(view[start:start + 256 * 1024]))
    reader.finish()
    return reader.problem


@pytest.fixture(scope="module")
def npm_read(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each case's tarball (`path`) and what npm's code makes of it, by name (one node
    process for them all)."""
    base = tmp_path_factory.mktemp("bounds")
    arguments = []
    for name, case in CASES.items():
        path = base / f"{name}.tgz"
        path.write_bytes(case.build())
        arguments.append(f"parse:{path}" if case.npm == "parsed" else str(path))
    root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, check=True)
    listed = subprocess.run(["node", "--max-old-space-size=2048",
                             str(Path(__file__).parent / "nodetar.js"), root.stdout.strip(),
                             *arguments], capture_output=True, text=True, check=False,
                            timeout=600)
    assert listed.returncode == 0, listed.stderr[-2000:]
    found = json.loads(listed.stdout)
    return {name: {**found[argument], "path": base / f"{name}.tgz"}
            for name, argument in zip(CASES, arguments, strict=True)}


def _hook_npm_reads(result: dict[str, Any]) -> str | None:
    """The `postinstall` of the package.json pacote wrote, as npm's reader parses it."""
    read_back = result["extracted"]["manifests"].get("package.json", {})
    if "scripts" in read_back:  # too deep for JSON.stringify: its scripts alone
        scripts = json.loads(read_back["scripts"]) or {}
    elif "value" in read_back:
        scripts = json.loads(read_back["value"]).get("scripts") or {}
    else:
        return None
    return scripts.get("postinstall")


@pytest.mark.parametrize("name", list(CASES))
def test_at_a_bound_mirrorgate_reads_as_npm_does_and_past_it_refuses_what_npm_installs(
        npm_read: dict[str, Any], name: str) -> None:
    case = CASES[name]
    result = npm_read[name]
    parsed = result["parsed"]
    # what npm does with it
    if case.npm is None:
        assert parsed["error"] is not None or result["extracted"]["error"] is not None
        assert "max decompression ratio exceeded" in (parsed["error"] or "")
    elif case.npm == "parsed":
        assert parsed["error"] is None
        assert not parsed["warnings"], parsed["warnings"][:3]
    else:
        assert result["extracted"]["error"] is None
        assert _hook_npm_reads(result) == POSTINSTALL
    # what mirrorgate does with it
    data = result["path"].read_bytes()
    if case.scripts:
        found = scripts_in(data) or ""
        assert ("cannot be checked" in found) is (case.refused is not None), found[:200]
        assert (case.refused or "postinstall") in found, found[:200]
        return
    if case.refused is not None:
        problem = _problem(data)
        assert problem is not None
        assert case.refused in problem, problem
        return
    mine = read(data, step=256 * 1024)
    assert mine.problem is None, mine.problem
    count = parsed.get("count", len(parsed["entries"]))
    assert len(mine.entries) == count
    assert mine.entries[:1000] == parsed["entries"][:1000]
    if "extracted" in result:
        assert {path: hashlib.sha256(data).hexdigest() for path, data in mine.files.items()} \
            == result["extracted"]["files"]
