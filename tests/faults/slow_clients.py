"""Hostile slow clients on loopback: tarball readers at one byte a second, half-sent heads.

Both kinds run as coroutines on one event loop in a background thread (`SlowLoad.start()`), so
the test thread stays free to run npm and to poll the proxy. Each socket asks the kernel for a
small receive buffer and is read with `sock_recv(sock, 1)` once a second: the client really
reads one byte a second, and the server's buffers fill as they would behind a slow link.
Every client ends when the server closes or resets it (seen as EOF, a reset, or the socket's
TCP state: what a cut leaves in the receive buffer would take hours to read at this pace), or
gives up at `deadline` seconds; nothing loops unbounded. Linux only (`TCP_INFO`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field

__all__ = ["Ending", "SlowLoad"]

TCP_CLOSE = 7
"""Linux's tcp_states.h: a reset connection."""
TCP_CLOSE_WAIT = 8
"""The peer sent FIN: it closed its side."""


def _tcp_state(sock: socket.socket) -> int:
    """`tcpi_state`, the first byte of Linux's `struct tcp_info`."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


@dataclass(frozen=True)
class Ending:
    kind: str
    """`closed` (EOF), `reset`, or `gave_up` (still open at the deadline)."""
    seconds: float
    """From the request (or half-request) being sent to the ending."""
    received: int


@dataclass
class SlowLoad:
    host: str
    port: int
    tarball_path: str
    readers: int
    half_heads: int
    deadline: float = 60.0
    paths: list[str] | None = None
    """Reader i reads paths[i % len(paths)] instead of `tarball_path`: many tarballs."""
    reader_endings: list[Ending] = field(default_factory=list)
    head_endings: list[Ending] = field(default_factory=list)
    receiving: int = 0
    """Readers that have had a first byte and have not ended: each holds a handler of the
    server's (written only on the load's own loop; read from any thread)."""
    _thread: threading.Thread | None = None

    def start(self) -> SlowLoad:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True,
                                        name="slow-clients")
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the slow clients did not finish"

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for index in range(self.readers):
                path = self.paths[index % len(self.paths)] if self.paths else self.tarball_path
                group.create_task(self._one(
                    f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode(),
                    self.reader_endings))
            for _ in range(self.half_heads):
                group.create_task(self._one(
                    f"GET {self.tarball_path} HTTP/1.1\r\nHost: {self.host}\r\n".encode(),
                    self.head_endings))

    async def _one(self, request: bytes, endings: list[Ending]) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        received = 0
        try:
            await loop.sock_connect(sock, (self.host, self.port))
            await loop.sock_sendall(sock, request)
            started = time.monotonic()
            give_up = started + self.deadline
            while time.monotonic() < give_up:
                try:
                    async with asyncio.timeout(give_up - time.monotonic()):
                        byte = await loop.sock_recv(sock, 1)
                except TimeoutError:
                    break
                except ConnectionResetError:
                    endings.append(Ending("reset", time.monotonic() - started, received))
                    return
                if not byte:
                    endings.append(Ending("closed", time.monotonic() - started, received))
                    return
                received += 1
                if received == 1 and endings is self.reader_endings:
                    self.receiving += 1
                # What a cut left in our receive buffer would take hours to read at this
                # pace: the connection's state says sooner whether the server closed it.
                state = _tcp_state(sock)
                if state in (TCP_CLOSE, TCP_CLOSE_WAIT):
                    kind = "reset" if state == TCP_CLOSE else "closed"
                    endings.append(Ending(kind, time.monotonic() - started, received))
                    return
                await asyncio.sleep(1)
            endings.append(Ending("gave_up", time.monotonic() - started, received))
        finally:
            if received and endings is self.reader_endings:
                self.receiving -= 1
            sock.close()
