"""A loopback TCP relay a test can cut and restore: a queue endpoint going away and coming back.

mirrorgate is pointed at the relay instead of the server (moto's SQS endpoint, the Pub/Sub
emulator), so the server keeps its state (queues, topics) while mirrorgate loses it. Unlike
the relay in the queue suite, this one runs on plain threads, not on the test's event loop: the
faults suite drives mirrorgate with blocking calls, during which an event loop would stall.

- `cut()` closes the listening socket (new connections are refused, as by a dead endpoint) and
  aborts every relayed connection (calls in flight fail, as when a network path drops).
- `restore()` listens again on the same port.
- Each relayed connection is two pump threads copying bytes until either side closes.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.servers.ports import free_port

__all__ = ["TcpRelay"]


class TcpRelay:
    def __init__(self, target: str, host: str = "127.0.0.1") -> None:
        target_host, target_port = target.rsplit(":", 1)
        self.target = (target_host, int(target_port))
        self.host = host
        self.port = free_port(host)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    @property
    def address(self) -> str:
        """`host:port`, as PUBSUB_EMULATOR_HOST wants it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def restore(self) -> TcpRelay:
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        listener.settimeout(0.1)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True,
                                          name=f"relay-{self.port}")
        self._acceptor.start()
        return self

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
            self._acceptor = None
        with self._lock:
            sockets = list(self._open)
            self._open.clear()
        for conn in sockets:
            _abort(conn)

    def __enter__(self) -> TcpRelay:
        return self.restore()

    def __exit__(self, *_exc: object) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _address = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _abort(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with self._lock:
                    self._open.discard(conn)
                _abort(conn)


def _abort(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()
