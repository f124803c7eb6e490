"""The listening socket, with the slow-client bounds aiohttp's server does not have.

aiohttp times out an idle keep-alive connection, but neither a request head that never ends
nor a response blocked on a client that stopped reading: either holds a connection, a handler
and, for a tarball, an upstream connection for as long as the client likes. A client that
reads, but a byte a second, is neither: `SendFloor` is the minimum rate a tarball response
must keep (Apache's `MinRate`, for responses).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import structlog
from aiohttp import web

__all__ = ["ClientBounds", "GuardedSite", "SendFloor", "reset"]

log = structlog.get_logger("mirrorgate.listener")

HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class ClientBounds:
    """The two bounds; aiohttp's own `keepalive_timeout` (given to the `AppRunner`) covers an
    idle connection, and its old `slow_request_timeout` is gone."""

    head_timeout: float
    """A request head must be complete (its blank line seen) within this of the connection
    opening, or of the first byte of a later request, or the client is disconnected."""
    write_stall_timeout: float
    """When the transport pauses writing (the client is not reading), the connection is reset
    unless writing resumes within this. The handler's pending write then fails as a client
    disconnect, so a tarball stream ends and gives its upstream connection back."""
    on_cut: Callable[[str], None]
    """Called with `head_timeout`, `write_stall` or `min_rate` each time a connection is cut."""
    min_rate: int = 0
    """Bytes a second a long response must be taken at, measured over each `RATE_WINDOW`
    after `min_rate_grace` (0: no floor)."""
    min_rate_grace: float = 20.0


RATE_WINDOW = 5.0
"""Seconds over which a response's rate is measured. A window, not the average since the
start: the socket buffers take a few hundred KiB at once, which would pay for hours at a low
average."""


def reset(transport: asyncio.Transport) -> None:
    """Drop the connection with a reset: a closed socket keeps delivering its unsent megabytes
    (the kernel's send buffer) to a client that is not reading, for as long as it likes;
    SO_LINGER 0 makes the close send RST and drop them now."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class SendFloor:
    """The minimum transfer rate of one response, whose chunks go through `write`: once past
    the grace, a window at whose end a write is still waiting on the client, and in which the
    client took fewer than `min_rate * RATE_WINDOW` bytes, resets the connection (the pending
    write then fails as a client disconnect). A response waiting on its upstream instead (no
    write pending) is never cut for it. `stop()` when the response ends."""

    def __init__(self, transport: asyncio.Transport | None, bounds: ClientBounds) -> None:
        self._transport = transport
        self._bounds = bounds
        self._sent = 0
        self._at_window = 0
        self._writing = False
        self._timer: asyncio.TimerHandle | None = None
        self.cut = False
        if transport is not None and bounds.min_rate > 0:
            self._timer = asyncio.get_running_loop().call_later(
                bounds.min_rate_grace, self._window)

    async def write(self, response: web.StreamResponse, chunk: bytes) -> None:
        self._writing = True
        try:
            await response.write(chunk)
        finally:
            self._writing = False
        self._sent += len(chunk)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _window(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        taken, self._at_window = self._sent - self._at_window, self._sent
        if self._writing and taken < self._bounds.min_rate * RATE_WINDOW:
            self.cut = True
            log.info("http_send_too_slow", min_rate=self._bounds.min_rate,
                     window=RATE_WINDOW, taken=taken)
            self._bounds.on_cut("min_rate")
            reset(transport)
            return
        self._timer = asyncio.get_running_loop().call_later(RATE_WINDOW, self._window)


class _Guard(asyncio.Protocol):
    """One connection: aiohttp's protocol inside, the two timers around it; the guard sees the
    bytes and the transport's flow control first."""

    def __init__(self, inner: asyncio.Protocol, bounds: ClientBounds) -> None:
        self._inner = inner
        self._bounds = bounds
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._head_since: float | None = None
        """When the head being read began (loop time); None while none is."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._tail = b""

    # -- the protocol aiohttp sees through ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, whatever the loop: uvloop's is not an asyncio.Transport subclass
        self._transport = cast(asyncio.Transport, transport)
        self._inner.connection_made(transport)
        self._head_begins()

    def data_received(self, data: bytes) -> None:
        # Any byte that arrives while no head is being timed starts one: mirrorgate serves
        # GET and HEAD, which carry no body, so these bytes are the next request's head. A
        # body sent with a refused write method is timed the same way, and may be cut.
        if self._head_since is None:
            self._head_begins()
        window = self._tail + data
        # find, not `in`: bytes' `in` tries its operand as an int first, raising and clearing
        # a TypeError on every request (2k instructions, more than the search)
        if window.find(HEAD_END) >= 0:
            self._head_since = None
            self._tail = b""
        else:
            self._tail = window[-(len(HEAD_END) - 1):]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._cancel_stall()
        self._transport = None
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()
        if self._stall_timer is None:
            loop = asyncio.get_running_loop()
            self._stall_timer = loop.call_later(self._bounds.write_stall_timeout,
                                                self._stalled)

    def resume_writing(self) -> None:
        self._cancel_stall()
        self._inner.resume_writing()

    # -- the timers ------------------------------------------------------------------------

    def _head_begins(self) -> None:
        # One timer per connection, not one per request (arming and cancelling one cost every
        # warm packument hit about 2 us): left running when a head ends; when it fires it
        # cuts a head late by then, or waits for the one being read.
        self._tail = b""
        self._head_since = since = self._loop.time()
        if self._head_timer is None:
            self._head_timer = self._loop.call_at(since + self._bounds.head_timeout,
                                                  self._head_due)

    def _cancel_stall(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _head_due(self) -> None:
        self._head_timer = None
        since = self._head_since
        if since is None or self._transport is None or self._transport.is_closing():
            return  # no head being read: the next one arms the timer again
        due = since + self._bounds.head_timeout
        if self._loop.time() < due:  # a head begun after the one the timer was set for
            self._head_timer = self._loop.call_at(due, self._head_due)
            return
        log.info("http_head_timed_out", timeout=self._bounds.head_timeout)
        self._bounds.on_cut("head_timeout")
        self._transport.close()

    def _stalled(self) -> None:
        self._stall_timer = None
        if self._transport is None:
            return
        log.info("http_write_stalled", timeout=self._bounds.write_stall_timeout)
        self._bounds.on_cut("write_stall")
        reset(self._transport)  # a reset, not a close (`reset`)


class GuardedSite(web.BaseSite):
    """`web.TCPSite` with every connection guarded by `ClientBounds`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, bounds: ClientBounds,
                 backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._owner = runner
        self._listen_backlog = backlog
        self._host = host
        self._port = port
        self._bounds = bounds

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._owner.server
        assert server is not None
        bounds = self._bounds

        def guarded() -> asyncio.Protocol:
            return _Guard(server(), bounds)

        # `_server` is BaseSite's slot for the listening server, which its stop() closes;
        # every aiohttp site sets it this way.
        self._server = await asyncio.get_running_loop().create_server(
            guarded, self._host, self._port, backlog=self._listen_backlog)
