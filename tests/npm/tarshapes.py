"""Tarballs built block by block, for the shapes no packer writes: pax records of any kind,
sizes in base-256, a checksum that fails, an entry past the end-of-archive blocks. Each
function returns the raw tar bytes; the caller compresses (or not)."""

from __future__ import annotations

import json
from collections.abc import Sequence

__all__ = ["END", "HOOK", "PLAIN", "data_blocks", "file", "header", "manifest", "pax"]

END = b"\0" * 1024
PLAIN = json.dumps({"name": "x", "version": "1.0.0", "scripts": {"test": "node t.js"}}).encode()
HOOK = json.dumps({"name": "x", "version": "1.0.0",
                   "scripts": {"postinstall": "node evil.js"}}).encode()


def manifest(**fields: object) -> bytes:
    return json.dumps({"name": "x", "version": "1.0.0", **fields}).encode()


def header(name: str | bytes, size: int, flag: bytes = b"0", *, linkname: str = "",
           prefix: str = "", size_field: bytes | None = None, mode: bytes = b"0000644\0",
           checksum_delta: int = 0) -> bytes:
    """A ustar header block: `size_field` replaces the octal size (base-256 and the like)."""
    block = bytearray(512)
    raw = name.encode() if isinstance(name, str) else name
    block[0:len(raw[:100])] = raw[:100]
    block[100:108] = mode
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"%011o\0" % 499162500
    block[156:157] = flag
    block[157:157 + len(linkname.encode())] = linkname.encode()
    block[257:265] = b"ustar\x0000"
    block[345:345 + len(prefix.encode())] = prefix.encode()
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % (sum(block) + checksum_delta)
    return bytes(block)


def data_blocks(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def file(name: str | bytes, data: bytes, flag: bytes = b"0", *, linkname: str = "",
         prefix: str = "") -> bytes:
    return header(name, len(data), flag, linkname=linkname, prefix=prefix) + data_blocks(data)


def pax(records: Sequence[tuple[str, str | bytes]], flag: bytes = b"x",
        name: str = "PaxHeader/x") -> bytes:
    """A pax header entry of `records`, each with its correct length prefix."""
    body = b""
    for key, value in records:
        raw = value.encode() if isinstance(value, str) else value
        field = b" " + key.encode() + b"=" + raw + b"\n"
        length = len(field) + 1
        while len(str(length)) + len(field) != length:
            length += 1
        body += str(length).encode() + field
    return file(name, body, flag)
