"""The faults suite's one fixture, mirrorgate with a private token set, watched for leaks.

> | 16 | tokens: a private token set, every log line, error body and metric of the runs above
> captured | the token never appears in any of them |

Row 16 of the faults table is not one test but a property of every other row: each process the
suite starts through `guarded` carries a private token (the real Verdaccio token when a test
passes one, a recognisable fake otherwise), and at teardown every stderr line, a final /metrics
scrape, and every reply body a test handed to `guard.seen(...)` are searched for it. A leak
fails the test that caused it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from tests.servers.fixtures import MirrorgateFactory
from tests.servers.processes import MirrorgateProcess, Reply

FAKE_TOKEN = "mg-test-token-7c1e0d9a4b2f"  # noqa: S105 - a fake, watched for in every output


@dataclass
class SecretGuard:
    """Collects what the runs exposed; `leaks()` lists where a token turned up."""

    processes: list[tuple[MirrorgateProcess, str]] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    metrics: dict[int, str] = field(default_factory=dict)

    def seen(self, reply: Reply | bytes | str, where: str = "a reply body") -> None:
        if isinstance(reply, Reply):
            body = reply.body.decode("utf-8", "replace")
            headers = "\n".join(f"{k}: {v}" for k, v in reply.headers.items())
            self.texts.append((where, body + "\n" + headers))
        else:
            text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply
            self.texts.append((where, text))

    def watch(self, process: MirrorgateProcess, secret: str) -> None:
        """Search `process`'s stderr and /metrics for `secret` too (a client token)."""
        self.processes.append((process, secret))

    def scrape(self, process: MirrorgateProcess) -> None:
        """Keep the process's /metrics text now (call it before stopping a process)."""
        if process.process is not None and process.returncode is None:
            reply = process.get("metrics")
            self.metrics[id(process)] = reply.body.decode("utf-8", "replace")

    def leaks(self) -> list[str]:
        found: list[str] = []
        tokens = {token for _, token in self.processes}
        for process, token in self.processes:
            if token in process.stderr():
                found.append(f"the stderr of mirrorgate {process.command}")
            if token in self.metrics.get(id(process), ""):
                found.append(f"the /metrics of mirrorgate {process.command}")
        for where, text in self.texts:
            if any(token in text for token in tokens):
                found.append(where)
        return found


class GuardedFactory:
    def __init__(self, start: MirrorgateFactory, guard: SecretGuard) -> None:
        self._start = start
        self.guard = guard

    def __call__(self, command: str = "serve", env: Mapping[str, str] | None = None, *,
                 ready: bool = True, timeout: float = 15.0) -> MirrorgateProcess:
        merged = {"MIRRORGATE_PRIVATE_TOKEN": FAKE_TOKEN, **(env or {})}
        process = self._start(command, merged, ready=ready, timeout=timeout)
        self.guard.processes.append((process, merged["MIRRORGATE_PRIVATE_TOKEN"]))
        return process


@pytest.fixture
def guard() -> SecretGuard:
    return SecretGuard()


@pytest.fixture
def guarded(mirrorgate: MirrorgateFactory, guard: SecretGuard) -> Iterator[GuardedFactory]:
    """Like `mirrorgate`, but every process carries a private token that must never leak."""
    factory = GuardedFactory(mirrorgate, guard)
    yield factory
    for process, _token in guard.processes:
        with contextlib.suppress(OSError):  # a process already gone has no /metrics to read
            guard.scrape(process)
    leaks = guard.leaks()
    assert not leaks, f"the private token leaked into: {', '.join(leaks)}"
