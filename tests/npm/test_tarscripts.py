"""The tarball scan behind the install-scripts rule, stated as the ways a publisher would hide
an install script from it: each tarball here is one a client unpacks into a package whose
`package.json` (or `binding.gyp`) runs code, so the scan must say so."""

from __future__ import annotations

import gzip
import json
import tarfile

import pytest

from mirrorgate.npm import tarscripts
from mirrorgate.npm.tarscripts import ScriptScan, scripts_in
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
    first = tar([entry("package/index.js", b"1")])[:-1024]  # no end-of-archive blocks
    second = tar([entry("package/package.json", HOOK)])
    tarball = gzip.compress(first) + gzip.compress(second)
    assert "postinstall" in (scripts_in(tarball) or "")
    assert "postinstall" in (byte_by_byte(tarball) or "")


def test_a_header_with_a_bad_checksum_hides_nothing_behind_it() -> None:
    # node-tar skips a bad header's 512 bytes only, and reads the next block as a header
    decoy = bytearray(tar([entry("package/README", b"")])[:512])
    decoy[124:136] = b"%011o\0" % 1024  # claims 1 KiB of data: the real entry would be skipped
    tarball = gzip.compress(bytes(decoy) + tar([entry("package/package.json", HOOK)]))
    assert "postinstall" in (scripts_in(tarball) or "")


def test_bundled_dependencies_and_binding_gyp_count() -> None:
    bundled = build_tarball({"package.json": PLAIN,
                             "node_modules/@s/inner/package.json": HOOK})
    gyp = build_tarball({"package.json": PLAIN, "binding.gyp": b"{}"})
    gyp_off = build_tarball({"package.json": json.dumps({"gypfile": False}).encode(),
                             "binding.gyp": b"{}"})
    deep = build_tarball({"package.json": PLAIN, "lib/fixtures/package.json": HOOK})
    assert "node_modules/@s/inner: postinstall" in (scripts_in(bundled) or "")
    assert "binding.gyp" in (scripts_in(gyp) or "")
    assert scripts_in(gyp_off) is None  # gypfile: false, npm runs no node-gyp
    assert scripts_in(deep) is None  # not a package's own file: nothing runs it


def test_what_cannot_be_read_is_refused_rather_than_admitted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    link = gzip.compress(tar([entry("package/package.json", b"", tarfile.SYMTYPE)]))
    truncated = build_tarball({"package.json": HOOK})[:60]
    monkeypatch.setattr(tarscripts, "MAX_UNPACKED_BYTES", 1 << 20)
    bomb = gzip.compress(tar([entry("package/big.bin", bytes(2 << 20))]))
    assert "is a link" in (scripts_in(link) or "")
    assert "cannot be checked" in (scripts_in(truncated) or "")
    assert "unpacks to more than" in (scripts_in(bomb) or "")


def test_a_header_only_a_signed_checksum_accepts_hides_nothing_behind_it() -> None:
    # node-tar sums header bytes unsigned; a decoy valid only under the old signed sum is
    # rejected there (skipped by 512 bytes), so its claimed data must not be skipped here
    decoy = bytearray(tar([entry("package/README", b"")])[:512])
    decoy[20:24] = b"\xff\xff\xff\xff"  # bytes above 127: the two sums differ
    decoy[124:136] = b"%011o\0" % 1024
    decoy[148:156] = b" " * 8
    signed = sum(b - 256 if b > 127 else b for b in decoy)
    decoy[148:156] = b"%06o\0 " % (signed & 0o777777)
    tarball = gzip.compress(bytes(decoy) + tar([entry("package/package.json", HOOK)]))
    assert "postinstall" in (scripts_in(tarball) or "")


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE])
def test_a_pax_size_that_would_shift_the_headers_is_refused(kind: bytes) -> None:
    # node-tar takes the size from a pax record: with size=0 it reads the "data" of the next
    # entry as headers, where this tarball keeps its package.json
    hidden = tar([entry("package/package.json", HOOK)])[:-1024]
    pax = tarfile.TarInfo("pax")
    pax.type = kind
    records = b"9 size=0\n"
    carrier = tar([(pax, records), entry("package/README", hidden)])
    assert "overrides an entry's size" in (scripts_in(gzip.compress(carrier)) or "")
