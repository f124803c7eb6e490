"""The hostile tarball shapes of issue 53 at the sizes an attacker sends, each a whole tarball
whose first entry is the package.json given: what the reader must bound (memory, CPU, time
on its lane) and, where it stops, refuse. Shared by the reader's tests, the faults suite,
the e2e tests and bench/tarball_reader.py."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import zstandard

from tests.npm.tarshapes import END, PLAIN, file, header, pax

__all__ = ["BOMBS", "MIB", "deep_package_json", "entries", "gzip_bomb", "gzip_members",
           "lying_size", "million_entries", "pax_mib_records", "pax_paths", "pax_records",
           "zstd_frames", "zstd_rle", "zstd_window"]

MIB = 1024 * 1024


def _deflated(parts: list[bytes]) -> bytes:
    """One gzip member of `parts`, compressed as they come (no whole tar held)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([*(deflate.compress(part) for part in parts), deflate.flush()])


def pax_paths(manifest: bytes = PLAIN, count: int = 3) -> bytes:
    """`count` files whose pax paths are 1,000 folders of 999 characters (6.8 KB gzipped for
    three; the reader once kept each folder of each path as a string: 1.4 GiB)."""
    body = file("package/package.json", manifest)
    for index in range(count):
        folders = "/".join(f"{index}{folder:04d}".ljust(999, "d") for folder in range(1000))
        body += pax([("path", f"package/{folders}/x.js")]) + file("package/x.js", b"1")
    return gzip.compress(body + END, mtime=0)


def _zstd_frame(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def zstd_frames(manifest: bytes = PLAIN, size: int = 6 * MIB) -> bytes:
    """`size` bytes of empty zstd frames (9 bytes each), then the package in one frame: the
    reader once started a decompressor per frame and copied the rest after each (8 s)."""
    empty = _zstd_frame(b"")
    return empty * (size // len(empty)) + _zstd_frame(
        file("package/package.json", manifest) + END)


def gzip_members(manifest: bytes = PLAIN, size: int = 6 * MIB) -> bytes:
    """`size` bytes of empty gzip members (20 bytes each), then the package in one."""
    empty = gzip.compress(b"", mtime=0)
    return empty * (size // len(empty)) + gzip.compress(
        file("package/package.json", manifest) + END, mtime=0)


def pax_records(manifest: bytes = PLAIN, headers: int = 64) -> bytes:
    """`headers` pax headers of 1 MiB, each record the shortest `path` there is (9 bytes):
    a million parses a megabyte (18 s of CPU for 64 once, before the bomb bound)."""
    record = b"9 path=a\n"
    body = file("PaxHeader/x", record * (MIB // len(record)), b"x") + file("package/a.js", b"1")
    return _deflated([file("package/package.json", manifest), *([body] * headers), END])


def _empty_files(count: int) -> Iterator[bytes]:
    """The headers of `count` empty files named `package/<hex>`, 4,096 at a time: one
    header's checksum patched per name, not recomputed (a million take a second)."""
    template = bytearray(header("package/", 0))
    template[148:156] = b" " * 8
    base = sum(template)
    batch = bytearray()
    for index in range(count):
        name = b"%x" % index
        block = template.copy()
        block[8:8 + len(name)] = name
        block[148:156] = b"%06o\0 " % (base + sum(name))
        batch += block
        if len(batch) >= 4096 * 512:
            yield bytes(batch)
            batch = bytearray()
    yield bytes(batch)


def entries(manifest: bytes = PLAIN, count: int = 199_000) -> bytes:
    """`count` empty files (just under the bound on entries): the most CPU a tarball the
    reader reads to its end costs (about 2 s), from 1.3 MB."""
    return _deflated([file("package/package.json", manifest), *_empty_files(count), END])


def million_entries(manifest: bytes = PLAIN) -> bytes:
    return entries(manifest, 1_000_000)


def deep_package_json(manifest: bytes = PLAIN, depth: int = 500_000) -> bytes:
    """A package.json nested 500,000 deep (V8's JSON.parse reads it; Python's stops at
    about a thousand), its `postinstall` beside the nesting."""
    document = manifest[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
    return gzip.compress(file("package/package.json", document) + END, mtime=0)


def gzip_bomb(manifest: bytes = PLAIN, inflated_mib: int = 1000) -> bytes:
    """A file of `inflated_mib` MiB of zeros, 1 MB gzipped (each MiB flushed whole, so its
    1,037 compressed bytes are deflated once and repeated)."""
    zeros = b"\0" * MIB
    head = file("package/package.json", manifest) + header("package/data.bin",
                                                           inflated_mib * MIB)
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    each = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.compress(END) + deflate.flush()
    crc = zlib.crc32(head)
    for _ in range(inflated_mib):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(END, crc)
    size = len(head) + inflated_mib * MIB + len(END)
    return (b"\x1f\x8b\x08\0\0\0\0\0\0\xff" + first + each * inflated_mib + last
            + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little"))


def _zstd_header(window_log: int) -> bytes:
    """A zstd frame header: no content size, no checksum, a window of 2^`window_log` bytes."""
    return b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([(window_log - 10) << 3])


def _zstd_block(kind: int, size: int, payload: bytes, last: bool = False) -> bytes:
    """A block: `kind` 0 raw (`payload` is the bytes), 1 RLE (`payload` is the one byte
    repeated `size` times)."""
    return (size << 3 | kind << 1 | int(last)).to_bytes(3, "little") + payload


def zstd_rle(manifest: bytes = PLAIN, inflated_mib: int = 2048) -> bytes:
    """A file of `inflated_mib` MiB of zeros as RLE blocks (4 bytes each per 128 KiB)."""
    tar = file("package/package.json", manifest) + header("package/data.bin",
                                                          inflated_mib * MIB)
    blocks = [_zstd_block(0, len(tar), tar)]
    blocks += [_zstd_block(1, 128 * 1024, b"\0")] * (inflated_mib * 8)
    blocks.append(_zstd_block(0, len(END), END, last=True))
    return _zstd_header(17) + b"".join(blocks)


def zstd_window(manifest: bytes = PLAIN) -> bytes:
    """The package in a frame that asks for a 2 GiB window (node's and libzstd's default
    limit is 128 MiB: neither decompresses it)."""
    tar = file("package/package.json", manifest) + END
    return _zstd_header(31) + _zstd_block(0, len(tar), tar, last=True)


def lying_size(manifest: bytes = PLAIN) -> bytes:
    """A file whose header says 8 GiB, the stream ending 1 KiB later."""
    return gzip.compress(file("package/package.json", manifest)
                         + header("package/data.bin", 8 * 1024 * MIB) + b"\0" * 1024, mtime=0)


def pax_mib_records(manifest: bytes = PLAIN, count: int = 400) -> bytes:
    """`count` pax headers of one 1 MiB record each (a comment, which sets nothing)."""
    value = b"c" * (MIB - 32)
    body = pax([("comment", value)]) + file("package/a.js", b"1")
    return _deflated([file("package/package.json", manifest), *([body] * count), END])


BOMBS = {"zstd-rle": zstd_rle, "lying-size": lying_size, "zstd-2-gib-window": zstd_window,
         "gzip-bomb": gzip_bomb, "deep-package-json": deep_package_json,
         "million-entries": million_entries, "pax-400-mib": pax_mib_records,
         "zstd-empty-frames": zstd_frames}
"""The eight shapes issue 53 found bounded but served unread under the default, by name."""
