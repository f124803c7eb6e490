"""One HTTP GET read the way a careful client reads it: did the whole body arrive?

`urllib` and most clients raise on a body cut short, losing what did arrive and how long it
took; the faults suite needs both, to tell "a failed transfer" from "a 200 with short bytes"
and from "a hang". `fetch` sends the path as given and reports the status, the promised
Content-Length, the bytes received, whether the body ended early, and the seconds taken.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Transfer", "fetch"]


@dataclass(frozen=True)
class Transfer:
    status: int
    promised: int | None
    received: bytes
    cut_short: bool
    seconds: float


def fetch(url: str, timeout: float = 20.0) -> Transfer:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    started = time.monotonic()
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        length = response.getheader("Content-Length")
        try:
            body, short = response.read(), False
        except http.client.IncompleteRead as error:
            body, short = error.partial, True
        return Transfer(response.status, int(length) if length else None, body, short,
                        time.monotonic() - started)
    finally:
        connection.close()
