"""What the worker rows of the faults suite share: jobs put on a queue by hand, and what the
worker did with them.

Rows 4, 7, 8, 9, 12 and 14 drive `mirrorgate worker` (and `mirrorgate serve --no-worker`) over
a real queue, moto's SQS server or the Pub/Sub emulator (their variables come from
`sqs_environment` and `pubsub_environment`, beside the servers). Some need a message the proxy
would never enqueue (a tarball URL on an internal address, a body that is not JSON), so the
test writes it beside the worker, as a foreign producer on the same queue would. Decisions:

- A well-formed job is built with mirrorgate's own codec from what the fixture registry serves,
  exactly what the proxy captures at enqueue (every digest of `dist`, the size, the manifest);
  a test changes the one field it is about (`admitted_job(..., tarball_url=...)`).
- A worker that is not given a mirror target publishes into the embedded file store under its
  data directory, so the rows that are not about Verdaccio need no registry to check what was
  published: `stored_version` reads that store.
- A metric can be scraped before the log line written just ahead of it has crossed the pipe
  from the process, so lines are read with `logged`, which waits for them to arrive.
- `Watchers` are fixture registries on other loopback ports (IPv4 and, where the machine has
  it, IPv6) that a hostile `dist.tarball` points at: "never fetched" is checked by their
  request logs staying empty, not inferred from mirrorgate's logs.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from mirrorgate.integrity import digests_from_dist
from mirrorgate.mirror import MirrorArtifact, MirrorJob, encode_job
from tests.e2e.mirroring import store_manifest
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry, SeenRequest
from tests.servers.packages import tarball_filename
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.servers.sqs_server import SqsServer

__all__ = [
    "Watchers",
    "admitted_job",
    "logged",
    "send_to_sqs",
    "stored_tarball",
    "stored_version",
    "watchers",
]


def admitted_job(public: FixtureRegistry, name: str, version: str,
                 **artifact: Any) -> MirrorJob:
    """The job the proxy would enqueue for `name`@`version` as `public` serves it now; keyword
    arguments replace fields of the artifact (`tarball_url`, `size`, `digests`)."""
    manifest: dict[str, Any] = public.packument(name)["versions"][version]
    dist = manifest["dist"]
    captured = MirrorArtifact(dist["tarball"], tarball_filename(name, version),
                              len(public.package(name).versions[version].tarball),
                              digests_from_dist(dist))
    return MirrorJob(name, version, replace(captured, **artifact), manifest)


async def send_to_sqs(server: SqsServer, queue_url: str, *bodies: bytes | MirrorJob) -> None:
    """Put raw bodies (or encoded jobs) on the queue, one message each, in order."""
    async with server.client() as sqs:
        for body in bodies:
            raw = encode_job(body) if isinstance(body, MirrorJob) else body
            await sqs.send_message(QueueUrl=queue_url, MessageBody=raw.decode("utf-8"))


def logged(process: MirrorgateProcess, event: str, count: int = 1,
           timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every `event` line of the process, once at least `count` of them have been read."""

    def enough() -> list[dict[str, Any]]:
        lines = process.events(event)
        return lines if len(lines) >= count else []

    return wait_for(enough, timeout=timeout, message=f"{count} {event} line(s) in the log")


def stored_version(worker: MirrorgateProcess, name: str, version: str) -> dict[str, Any] | None:
    """The manifest the worker published into its embedded file store, or None."""
    return store_manifest(worker.workdir / "data" / "store", name, version)


def stored_tarball(worker: MirrorgateProcess, name: str, version: str) -> bytes | None:
    path = (worker.workdir / "data" / "store" / name / "tarballs"
            / tarball_filename(name, version))
    return path.read_bytes() if path.is_file() else None


@dataclass
class Watchers:
    """Listeners no request may reach: `ipv4` on 127.0.0.1, `ipv6` on [::1] where possible."""

    ipv4: FixtureRegistry
    ipv6: FixtureRegistry | None

    def requests(self) -> list[SeenRequest]:
        seen = list(self.ipv4.requests)
        if self.ipv6 is not None:
            seen.extend(self.ipv6.requests)
        return seen


@contextlib.contextmanager
def watchers() -> Iterator[Watchers]:
    """Started watch listeners, stopped on exit. The IPv4 one must start (a failure under CI,
    a skip elsewhere, like every helper server); the IPv6 one is added where [::1] binds."""
    with contextlib.ExitStack() as stack:
        ipv4 = stack.enter_context(serving(FixtureRegistry(), "a watch listener"))
        ipv6: FixtureRegistry | None = None
        if socket.has_ipv6:
            with contextlib.suppress(OSError):  # no [::1] here: the IPv4 listener is enough
                ipv6 = stack.enter_context(FixtureRegistry(host="::1"))
        yield Watchers(ipv4, ipv6)
