"""The tarball scan behind the install-scripts rule, stated as the ways a publisher would hide
an install script from it: each tarball here is one a client unpacks into a package whose
`package.json` (or `binding.gyp`) runs code, so the scan must say so."""

from __future__ import annotations

import gzip
import json
import tarfile

import pytest
import zstandard

from mirrorgate.npm import tarball
from mirrorgate.npm.tarscripts import ScriptScan, scripts_in
from tests.npm.tarshapes import END, file, pax
from tests.servers.packages import build_tarball, entry, tar

HOOK = json.dumps({"name": "x", "version": "1.0.0",
                   "scripts": {"postinstall": "node evil.js"}}).encode()
PLAIN = json.dumps({"name": "x", "version": "1.0.0", "scripts": {"test": "node t.js"}}).encode()


def byte_by_byte(tarball: bytes) -> str | None:
    scan = ScriptScan()
    for index in range(len(tarball)):
        scan.feed(tarball[index:index + 1])
    return scan.finish()


def test_a_plain_package_runs_nothing_however_its_bytes_arrive() -> None:
    tarball = build_tarball({"package.json": PLAIN, "index.js": b"1" * 5000})
    assert scripts_in(tarball) is None
    assert byte_by_byte(tarball) is None


@pytest.mark.parametrize("path", [
    "package/package.json", "whatever/package.json", "/package.json", "package//package.json",
    "./package/package.json", "package/PACKAGE.JSON",
])
def test_a_root_package_json_is_found_under_every_spelling_of_its_path(path: str) -> None:
    tarball = gzip.compress(tar([entry("package/package.json", PLAIN), entry(path, HOOK)]))
    assert "postinstall" in (scripts_in(tarball) or "")


def test_a_long_path_in_a_pax_header_or_a_gnu_long_name_is_followed() -> None:
    long_dir = "package/" + "d" * 120 + "/../"  # forces the long-name records
    info, data = entry("package/package.json", HOOK)
    info.pax_headers = {"path": "package/package.json", "comment": long_dir}
    pax = tar([entry("package/index.js", b"1"), (info, data)], tarfile.PAX_FORMAT)
    gnu = tar([entry("z/" + "y" * 150, b""), entry("package/package.json", HOOK)],
              tarfile.GNU_FORMAT)
    assert "postinstall" in (scripts_in(gzip.compress(pax)) or "")
    assert "postinstall" in (scripts_in(gnu) or "")  # plain tar, no gzip: npm takes it too


def test_a_second_gzip_member_cannot_hide_the_package_json() -> None:
    first = file("package/index.js", b"1")  # no end-of-archive blocks
    second = tar([entry("package/package.json", HOOK)])
    tarball = gzip.compress(first) + gzip.compress(second)
    assert "postinstall" in (scripts_in(tarball) or "")
    assert "postinstall" in (byte_by_byte(tarball) or "")


def test_a_header_with_a_bad_checksum_is_refused_rather_than_skipped() -> None:
    # node-tar skips a bad header's 512 bytes only and reads the next block as a header;
    # tar-stream (yarn 1) stops: a decoy claiming 1 KiB of data would hide what follows
    decoy = bytearray(tar([entry("package/README", b"")])[:512])
    decoy[124:136] = b"%011o\0" % 1024
    tarball = gzip.compress(bytes(decoy) + tar([entry("package/package.json", HOOK)]))
    assert "checksum is wrong" in (scripts_in(tarball) or "")


def test_bundled_dependencies_and_binding_gyp_count() -> None:
    bundled = build_tarball({"package.json": PLAIN,
                             "node_modules/@s/inner/package.json": HOOK})
    gyp = build_tarball({"package.json": PLAIN, "binding.gyp": b"{}"})
    gyp_off = build_tarball({"package.json": json.dumps({"gypfile": False}).encode(),
                             "binding.gyp": b"{}"})
    bundled_gyp_off = build_tarball({
        "package.json": PLAIN, "node_modules/inner/binding.gyp": b"{}",
        "node_modules/inner/package.json": json.dumps({"gypfile": False}).encode()})
    deep = build_tarball({"package.json": PLAIN, "lib/fixtures/package.json": HOOK})
    assert "node_modules/@s/inner: postinstall" in (scripts_in(bundled) or "")
    assert "binding.gyp" in (scripts_in(gyp) or "")
    # npm decides a root binding.gyp from the registry's manifest (whose abbreviated form
    # has no gypfile) and yarn 1 ignores gypfile: the tarball's `false` hides nothing
    assert "binding.gyp (node-gyp rebuild)" in (scripts_in(gyp_off) or "")
    # a bundled dependency's own package.json is the one npm reads for it
    assert scripts_in(bundled_gyp_off) is None
    assert scripts_in(deep) is None  # not a package's own file: nothing runs it


def test_what_cannot_be_read_is_refused_rather_than_admitted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    link = gzip.compress(file("package/package.json", b"", b"2", linkname="../../x") + END)
    truncated = build_tarball({"package.json": HOOK})[:60]
    monkeypatch.setattr(tarball, "MAX_UNPACKED_BYTES", 1 << 20)
    bomb = gzip.compress(tar([entry("package/big.bin", bytes(2 << 20))]))
    assert "is a link" in (scripts_in(link) or "")
    assert "cannot be checked" in (scripts_in(truncated) or "")
    assert "unpacks to more than" in (scripts_in(bomb) or "")


def test_old_npm_pax_headers_on_every_entry_are_read() -> None:
    # node-tar 2 (old npm) wrote a pax header before every entry, its size equal to the
    # ustar size and NODETAR.* keys beside: statuses@1.5.0, tmp@0.0.33 and thousands more
    records = [("path", "package/package.json"), ("NODETAR.depth", "1"),
               ("NODETAR.type", "File"), ("size", str(len(HOOK)))]
    tarball = gzip.compress(pax(records) + file("package/package.json", HOOK) + END)
    assert "postinstall" in (scripts_in(tarball) or "")


@pytest.mark.parametrize(("kind", "reason"), [
    (tarfile.XHDTYPE, "pax header's size is not the entry's ustar size"),
    (tarfile.XGLTYPE, "global pax header sets"),
])
def test_a_pax_size_that_would_shift_the_headers_is_refused(kind: bytes, reason: str) -> None:
    # node-tar takes the size from a pax record: with size=0 it reads the "data" of the next
    # entry as headers, where this tarball keeps its package.json; others use the ustar size
    hidden = tar([entry("package/package.json", HOOK)])[:-1024]
    carrier = pax([("size", "0")], kind) + file("package/README", hidden.rstrip(b"\0"))
    assert reason in (scripts_in(gzip.compress(carrier + END)) or "")


@pytest.mark.parametrize("document", [
    b"\xef\xbb\xbf" + HOOK,  # a byte-order mark before the {
    HOOK.replace(b'"x"', b'"x\xff"'),  # an invalid UTF-8 byte in a string
    HOOK.replace(b'"x"', b'"\\ud800"'),  # a lone surrogate escape
])
def test_a_package_json_npm_reads_and_orjson_refuses_is_read(document: bytes) -> None:
    bundled = build_tarball({"package.json": PLAIN, "node_modules/inner/package.json": document})
    assert "node_modules/inner: postinstall" in (scripts_in(bundled) or "")
    assert "postinstall" in (scripts_in(build_tarball({"package.json": document})) or "")


def test_a_zstd_tarball_is_read_as_node_tar_reads_it() -> None:
    inner = tar([entry("package/package.json", PLAIN),
                 entry("package/node_modules/inner/package.json", HOOK)])
    tarball = zstandard.ZstdCompressor().compress(inner)
    assert "node_modules/inner: postinstall" in (scripts_in(tarball) or "")
    assert "node_modules/inner: postinstall" in (byte_by_byte(tarball) or "")


def test_a_package_json_nested_past_what_python_follows_is_refused_not_taken_as_empty() -> None:
    # V8 parses far deeper than Python's json; what cannot be followed here is not "no scripts"
    nested = b'{"name": "x", "scripts": {"postinstall": "x"}, "a": ' + b"[" * 100_000 \
        + b"]" * 100_000 + b"}"
    assert "nests deeper" in (scripts_in(build_tarball({"package.json": nested})) or "")
