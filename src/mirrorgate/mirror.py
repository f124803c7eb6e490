"""The mirror job and the queue that carries it: the domain the serve path and the worker share.

The serve path captures what it admitted as a `MirrorJob` and hands it to a `MirrorQueue`; the
worker receives it and verifies the bytes against the digest captured at that moment (never a
re-fetched one) before it publishes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.integrity import Digest, parse_integrity
from mirrorgate.moments import time_text

__all__ = [
    "JobDecodeError",
    "MirrorArtifact",
    "MirrorJob",
    "MirrorQueue",
    "QueueMessage",
    "QueueStats",
    "QueueTraits",
    "ReceiptHandle",
    "Seconds",
    "decode_job",
    "encode_job",
    "traceparent_text",
]

@dataclass(frozen=True, slots=True)
class MirrorArtifact:
    """What the worker needs to fetch, verify and name one tarball, captured at admission.

    It cannot be built without a digest: the serve path admits only versions that carry one,
    so a job the worker cannot verify is unrepresentable, not merely unlikely."""

    tarball_url: str
    filename: str
    size: int | None
    digests: tuple[Digest, ...]

    def __post_init__(self) -> None:
        if not self.digests:
            raise ValueError(
                f"a MirrorArtifact needs at least one digest ({self.filename}): "
                "a version without integrity is never admitted, so it is never mirrored"
            )
        if self.size is not None and self.size < 0:
            raise ValueError(f"a declared size cannot be negative, got {self.size}")


@dataclass(frozen=True, slots=True)
class MirrorJob:
    """One admitted version to copy into the mirror target."""

    name: str
    version: str
    artifact: MirrorArtifact
    manifest: Mapping[str, Any] = field(hash=False)
    published: str | None = None
    """The public `time[version]` the version was admitted with (ISO 8601), or None when the
    public packument gave none: the mirror keeps it, so a copy is not mistaken for a new
    release by an age gate (npm --before, yarn's npmMinimalAgeGate, the minimum-age rule)."""
    traceparent: str | None = field(default=None, compare=False)
    """The W3C trace context of the enqueue (`tracing`), so the worker's span joins the
    request's trace; None when tracing is off or the job came from an older proxy. Not part of
    what the job is: two jobs for the same bytes are equal whatever trace they came from."""

    def __post_init__(self) -> None:
        if "readme" in self.manifest:
            trimmed = {k: v for k, v in self.manifest.items() if k != "readme"}
            object.__setattr__(self, "manifest", trimmed)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


# Distinct types, so a delivery token or a duration is never passed where some other string or
# integer was meant.
ReceiptHandle = NewType("ReceiptHandle", str)
"""A backend's delivery token (an SQS receipt handle, a Pub/Sub ackId). Built only by backends."""

Seconds = NewType("Seconds", int)
"""A whole number of seconds, for visibility windows."""


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """A delivery: the decoded job (or why it could not be decoded), its receipt, its count.

    `job` is None exactly when `problem` says why the body was refused (`refusal` is the
    label); the worker retires such a message. `deliveries` is what the backend reports, 1 on
    first delivery, or None where the backend cannot tell (Pub/Sub without a dead-letter
    policy).
    """

    job: MirrorJob | None
    receipt: ReceiptHandle
    deliveries: int | None
    problem: str | None = None
    message_id: str = ""
    refusal: str = "undecodable"
    """Why `job` is None, as a metric label: `undecodable`, or the signature's verdict
    (`unsigned`, `bad-signature`, see `jobsign`)."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What a backend knows about itself, read by /metrics at scrape time.

    `depth` is the jobs held locally (the memory queue, or a network backend's send buffer),
    None where unknown. The counters only grow; `ack_failures` counts acks and visibility
    changes the backend could not deliver (each means a redelivery the worker absorbs).
    """

    depth: int | None = None
    dropped: int = 0
    sent: int = 0
    send_failures: int = 0
    ack_failures: int = 0


@dataclass(frozen=True, slots=True)
class QueueTraits:
    """What a backend is, as the record says it: its name (`MIRROR_QUEUE_PROVIDER`, a metric
    label), whether a worker in another process can receive what its enqueue takes, and
    whether a delivery that is not acked comes back (false only for the bounded memory
    queue, for which the worker keeps retries of its own)."""

    provider: str
    crosses_processes: bool
    redelivers: bool


@dataclass(frozen=True, slots=True)
class MirrorQueue:
    """The seam between the serve path and the worker: four async functions and their frame,
    declared here and nowhere else. A backend is a small class whose bound methods fill it
    (`MirrorQueue(traits, backend.enqueue, ...)`), so its state stays out of the worker's reach.

    - `enqueue(job) -> bool`: whether the backend took the job (False: it was full, or the job
      cannot be sent, already counted and logged). Never raises, never waits on the network.
      Mirroring is an optimisation; the response never depends on it.
    - `receive()`: a bounded long-poll; `[]` is a healthy idle.
    - `ack(receipt)`: done. Not acking is how a job is retried (the backend redelivers after
      its visibility window); there is no nack.
    - `extend_visibility(receipt, seconds)`: hold a delivery longer; `Seconds(0)` releases it.

    Around them: `close()` flushes what the backend buffers and releases its resources;
    `stats()` reports depth and counters; `traits` say what kind of queue it is.
    """

    traits: QueueTraits
    enqueue: Callable[[MirrorJob], Coroutine[Any, Any, bool]]
    receive: Callable[[], Coroutine[Any, Any, list[QueueMessage]]]
    ack: Callable[[ReceiptHandle], Coroutine[Any, Any, None]]
    extend_visibility: Callable[[ReceiptHandle, Seconds], Coroutine[Any, Any, None]]
    close: Callable[[], Coroutine[Any, Any, None]]
    stats: Callable[[], QueueStats]

    @property
    def provider(self) -> str:
        return self.traits.provider

    @property
    def crosses_processes(self) -> bool:
        return self.traits.crosses_processes

    @property
    def redelivers(self) -> bool:
        return self.traits.redelivers


# --- the codec ----------------------------------------------------------------------------

CODEC_VERSION = 1


class JobDecodeError(MirrorgateError, ValueError):
    """A message body that is not a version-1 mirrorgate job; the text names the problem."""


def encode_job(job: MirrorJob) -> bytes:
    """The job as version-1 JSON, in a right-sized buffer (queues hold thousands of these).

    orjson hands back its output in a buffer sized for a larger document (about 4 KiB for a
    400-byte job); the copy through a memoryview keeps only the bytes themselves.
    """
    artifact = job.artifact
    encoded = orjson.dumps(
        {
            "v": CODEC_VERSION,
            "name": job.name,
            "version": job.version,
            "artifact": {
                "tarball": artifact.tarball_url,
                "filename": artifact.filename,
                "size": artifact.size,
                "digests": [digest.sri() for digest in artifact.digests],
            },
            "manifest": job.manifest,
            "published": job.published,
            # only when set: a job enqueued without tracing is byte for byte what it was
            **({"traceparent": job.traceparent} if job.traceparent is not None else {}),
        }
    )
    return bytes(memoryview(encoded))


def _field(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in obj:
        raise JobDecodeError(f"missing field {where}{key}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise JobDecodeError(
            f"field {where}{key} should be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def decode_job(body: bytes | str) -> MirrorJob:
    """The job a message body carries; raises JobDecodeError naming what is wrong. Strict: a
    foreign message is retired, never guessed at."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise JobDecodeError(f"body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise JobDecodeError(f"body should be a JSON object, got {type(data).__name__}")
    if "v" not in data:
        raise JobDecodeError("missing field v (the codec version); not a mirrorgate job")
    if data["v"] != CODEC_VERSION or isinstance(data["v"], bool):
        raise JobDecodeError(f"unknown codec version v={data['v']!r}; this worker reads v=1")
    name = _field(data, "name", str, "")
    version = _field(data, "version", str, "")
    artifact = _field(data, "artifact", dict, "")
    manifest = _field(data, "manifest", dict, "")
    tarball = _field(artifact, "tarball", str, "artifact.")
    filename = _field(artifact, "filename", str, "artifact.")
    if "size" not in artifact:
        raise JobDecodeError("missing field artifact.size (null when unknown)")
    size = artifact["size"]
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise JobDecodeError(f"field artifact.size should be a non-negative int or null: {size!r}")
    entries = _field(artifact, "digests", list, "artifact.")
    digests: list[Digest] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise JobDecodeError(f"artifact.digests holds a {type(entry).__name__}, not a string")
        parsed = parse_integrity(entry)
        if len(parsed) != 1:
            raise JobDecodeError(f"artifact.digests holds {entry!r}, not one SRI digest")
        digests.append(parsed[0])
    if not digests:
        raise JobDecodeError("artifact.digests is empty; a job without a digest cannot be verified")
    return MirrorJob(
        name=name,
        version=version,
        artifact=MirrorArtifact(tarball, filename, size, tuple(digests)),
        manifest=manifest,
        published=_published(data),
        traceparent=traceparent_text(data.get("traceparent")),
    )


def _published(data: Mapping[str, Any]) -> str | None:
    """`published`, added to v1 later: absent (a job from an older proxy) or null is None."""
    value = data.get("published")
    if value is None:
        return None
    if time_text(value) is None:
        raise JobDecodeError(f"field published should be an ISO 8601 time, or null: "
                             f"{value!r}"[:200])
    return str(value)


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")
_TRACEPARENT_MAX = 256


def traceparent_text(value: object) -> str | None:
    """`traceparent`, added to v1 later: the value when it is a W3C trace context header
    (`00-<trace id>-<span id>-<flags>`), else None.

    Lenient where the rest of the codec is strict, as the W3C spec asks of a receiver: a trace
    context that cannot be read starts a new trace, it never retires a job whose every other
    field is good. A future version's longer form is read by its first four fields."""
    if not isinstance(value, str) or len(value) > _TRACEPARENT_MAX:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return value
