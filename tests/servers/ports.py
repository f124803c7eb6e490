"""Free loopback ports for the servers the tests start.

A port is picked by binding 127.0.0.1:0, reading the number the kernel chose and closing the
socket; the server then binds that number itself. Servers are started with the port already
chosen (rather than on port 0) so a test knows every URL before anything starts, and a server
can be stopped and started again on the same port (an upstream going down and coming back).
The window between closing and binding is a race in principle; on a test machine it is not
one in practice, and a server that loses it fails to start with a clear error. An IPv6 host
(`::1`) is probed over IPv6; where the machine has none, that raises `OSError`.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
