"""The one SRI helper the tests share: `dist.integrity` as npm writes it for some bytes."""

from __future__ import annotations

import base64
import hashlib


def sri(algorithm: str, data: bytes) -> str:
    """`sha512-<base64>` (or any hashlib algorithm) of `data`."""
    digest = hashlib.new(algorithm, data, usedforsecurity=algorithm != "sha1").digest()
    return f"{algorithm}-{base64.b64encode(digest).decode()}"
