"""A real PostgreSQL for the tests: Debian's `postgresql` (scripts/test installs it), one
server per session on a free loopback port, a fresh database per test.

Decisions:
- `initdb` and `pg_ctl` from /usr/lib/postgresql/<newest>/bin, in a temporary directory. The
  server refuses to run as root (CI runs as root), so there it runs as the `postgres` user
  (`runuser`), owning the directory; as anyone else it runs as that user.
- Password authentication (scram) on 127.0.0.1 only, so the URLs the tests use carry a
  password, as a fleet's do (and check-config must redact it).
- `stop()` and `start()` take the server away and bring it back on the same port and data,
  for the "a store that goes away and comes back" cases.
- Missing or unable to start: `unavailable` (a failure under CI=1, a skip elsewhere).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.servers.availability import unavailable
from tests.servers.ports import free_port

__all__ = ["PASSWORD", "PostgresServer", "find_postgres_bin"]

PASSWORD = "pg-test-9f3a71c2"  # noqa: S105 -- a throwaway server's, on loopback
USER = "mirrorgate"
_SERVER_USER = "postgres"


def find_postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                   key=lambda path: int(path.parent.parent.name)
                   if path.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


class PostgresServer:
    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin = bin_dir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.as_other = os.geteuid() == 0
        self.log = root / "server.log"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if self.as_other:
            command = ["runuser", "-u", _SERVER_USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    def init(self) -> None:
        if self.as_other:
            user = pwd.getpwnam(_SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        password_file = self.root / "password"
        password_file.write_text(PASSWORD + "\n")
        if self.as_other:
            os.chown(password_file, pwd.getpwnam(_SERVER_USER).pw_uid, -1)
        done = self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=scram-sha-256",
                         f"--pwfile={password_file}", "--no-sync", "-E", "UTF8")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-500:]}")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.root} -c max_connections=200")
        done = self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log),
                         "-w", "-t", "30", "start")
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()[-400:]} {log}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def kill(self) -> None:
        """Stop the server the hard way (immediate: no checkpoint), as a crashed host would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    async def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        connection = await asyncpg.connect(self.url())
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()
        return self.url(name)

    def new_database_now(self) -> str:
        """`new_database` outside an event loop (a synchronous test starting processes)."""
        return asyncio.run(self.new_database())


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = find_postgres_bin()
    if bin_dir is None or (shutil.which("runuser") is None and os.geteuid() == 0):
        unavailable("PostgreSQL is not installed (/usr/lib/postgresql/*/bin): install "
                    "Debian's postgresql package (scripts/test does, as root)")
    root = Path(tempfile.mkdtemp(prefix="mirrorgate-pg-"))
    server = PostgresServer(bin_dir, root)
    try:
        server.init()
        server.start()
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as error:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"PostgreSQL did not start: {error}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
