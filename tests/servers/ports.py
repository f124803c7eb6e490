"""Free loopback ports for the servers the tests start.

A port is picked by binding 127.0.0.1:0, reading the number the kernel chose and closing the
socket; the server then binds that number itself. Servers are started with the port already
chosen (rather than on port 0) so a test knows every URL before anything starts, and a server
can be stopped and started again on the same port (an upstream going down and coming back).
The window between closing and binding is a race in principle; on a test machine it is not
one in practice, and a server that loses it fails to start with a clear error. An IPv6 host
(`::1`) is probed over IPv6; where the machine has none, that raises `OSError`.

`DarkPort` is the other kind: a port that takes no connection, as a registry behind a firewall
that drops packets looks from the proxy.
"""

from __future__ import annotations

import socket
from types import TracebackType

__all__ = ["DarkPort", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class DarkPort:
    """A loopback port that takes no connection: its listener's one-place queue is held full by
    a connection of its own, so the kernel drops every other SYN and each connect waits out
    its timeout. `close()` (or leaving the `with`) frees the port for a server to bind."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port: int = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._held = socket.create_connection(("127.0.0.1", self.port))

    def close(self) -> None:
        self._held.close()
        self.listener.close()

    def __enter__(self) -> DarkPort:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
