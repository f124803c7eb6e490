"""Traces across the queue: the one door to OpenTelemetry, shut unless the OTEL_* variables open it.

A trace follows one install from the client's request through the gate, the enqueue, the queue
and the worker's publish, in whatever tracing backend an organisation runs. Tracing is an
optional extra (`pip install 'mirrorgate[otel]'`) configured only by the SDK's own variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`...). With them unset,
or the extra missing, every function here is a no-op and no OpenTelemetry module is imported:
the warm path calls none of them anyway (the request span is a middleware installed only when
tracing is on), and the slow paths pay a function call. The SDK itself lives in `_otel`,
which the composition root imports only when `plan` says traces are asked for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from mirrorgate.logs import loggable_url

__all__ = [
    "Attributes",
    "Kind",
    "Plan",
    "Span",
    "Tracer",
    "annotate",
    "consume",
    "enabled",
    "install",
    "log_processors",
    "plan",
    "serve",
    "span",
    "stop",
    "traceparent",
]

Kind = Literal["internal", "server", "client", "producer", "consumer"]
Value = str | int | float | bool | None


class Span(Protocol):
    """What the code holding a span may do with it: never more than attributes and a verdict.
    `recording` is false for a span the sampler dropped (and when tracing is off): work done
    only to describe the span can be skipped."""

    @property
    def recording(self) -> bool: ...

    def set(self, key: str, value: Value) -> None: ...

    def fail(self, reason: str) -> None:
        """Mark the span as an error; `reason` is a short label, never a secret."""

    def rename(self, name: str) -> None: ...


class Tracer(Protocol):
    """The SDK's side of this module (`_otel.OtelTracer`; tests install one over an in-memory
    exporter)."""

    def span(self, name: str, kind: Kind, attributes: Mapping[str, Value],
             current: bool) -> AbstractContextManager[Span]: ...

    def serve(self, name: str, headers: Mapping[str, str],
              attributes: Mapping[str, Value]) -> AbstractContextManager[Span]: ...

    def consume(self, name: str, parent: str | None,
                attributes: Mapping[str, Value]) -> AbstractContextManager[Span]: ...

    def annotate(self, attributes: Mapping[str, Value]) -> None: ...

    def traceparent(self) -> str | None: ...

    def log_ids(self, logger: Any, name: str,
                event: dict[str, Any]) -> dict[str, Any]: ...

    def shutdown(self) -> None: ...


class _NoSpan:
    __slots__ = ()

    @property
    def recording(self) -> bool:
        return False

    def set(self, key: str, value: Value) -> None:
        return None

    def fail(self, reason: str) -> None:
        return None

    def rename(self, name: str) -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


_OFF = _NoSpan()
"""The span, and the context manager yielding it, when tracing is off: one shared object."""
_active: Tracer | None = None


def enabled() -> bool:
    return _active is not None


Attributes = Mapping[str, Value]
_NONE: Attributes = {}


def span(name: str, attributes: Attributes = _NONE, *, kind: Kind = "internal",
         current: bool = True) -> AbstractContextManager[Span]:
    """A child of the current span for the `with` block. `current=False` for a span that
    others must not nest under (an upstream stream the caller reads while doing other work)."""
    tracer = _active
    if tracer is None:
        return _OFF
    return tracer.span(name, kind, attributes, current)


def serve(name: str, headers: Mapping[str, str],
          attributes: Attributes = _NONE) -> AbstractContextManager[Span]:
    """A server span for one client request, joining the client's own trace when its
    `traceparent` header carries one."""
    tracer = _active
    if tracer is None:
        return _OFF
    return tracer.serve(name, headers, attributes)


def consume(name: str, parent: str | None,
            attributes: Attributes = _NONE) -> AbstractContextManager[Span]:
    """A consumer span for one mirror job: a child of the enqueue that wrote `parent` (the
    job's `traceparent`), or the root of a new trace when the job carries none."""
    tracer = _active
    if tracer is None:
        return _OFF
    return tracer.consume(name, parent, attributes)


def annotate(attributes: Attributes) -> None:
    """Set attributes on the current span, if there is one."""
    tracer = _active
    if tracer is not None:
        tracer.annotate(attributes)


def traceparent() -> str | None:
    """The current span's W3C trace context, for a job to carry; None when tracing is off."""
    tracer = _active
    return tracer.traceparent() if tracer is not None else None


def log_processors() -> tuple[Any, ...]:
    """structlog processors that put `trace_id` and `span_id` on a line written inside a span
    (none when tracing is off)."""
    tracer = _active
    return (tracer.log_ids,) if tracer is not None else ()


def install(tracer: Tracer | None) -> None:
    """Make `tracer` the one in force (None: off): the composition root installs the SDK's
    (`_otel.start`), tests one over an in-memory exporter."""
    global _active
    _active = tracer


# --- what the environment asks for ----------------------------------------------------------

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
HEADERS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
EXPORTERS = ("otlp", "console")
DEFAULT_ENDPOINT = "http://localhost:4318"
"""The SDK's own default, when OTEL_TRACES_EXPORTER=otlp names no endpoint."""


@dataclass(frozen=True)
class Plan:
    """What the OTEL_* variables ask for, read without importing the SDK (check-config shows
    it). `on` is false when nothing asks for traces; `problem` says why traces that were asked
    for cannot be sent (the extra is missing, a protocol the extra does not speak)."""

    on: bool
    exporter: str | None = None
    endpoint: str | None = None
    service_name: str | None = None
    sampler: str | None = None
    header_names: tuple[str, ...] = ()
    problem: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Header values (API keys a vendor's collector wants): for the log scrubber, never shown."""

    def summary(self) -> dict[str, Any]:
        """For check-config: the exporter's values with header values left out."""
        if not self.on and self.problem is None:
            return {"on": False}
        return {"on": self.on, "exporter": self.exporter, "endpoint": self.endpoint,
                "service_name": self.service_name, "sampler": self.sampler,
                "headers": list(self.header_names), "problem": self.problem}


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _headers(text: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names: list[str] = []
    values: list[str] = []
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            names.append(key.strip())
            values.append(value.strip())
    return tuple(names), tuple(v for v in values if v)


def _installed() -> bool:
    from importlib.util import find_spec

    try:
        return (find_spec("opentelemetry.sdk") is not None
                and find_spec("opentelemetry.exporter.otlp.proto.http") is not None)
    except (ImportError, ValueError):
        return False


def plan(environ: Mapping[str, str] | None = None) -> Plan:
    """Whether the environment asks for traces, and where they go.

    On when OTEL_TRACES_EXPORTER names `otlp` or `console`, or an OTLP endpoint is set (with
    OTEL_TRACES_EXPORTER unset); off when neither, when OTEL_TRACES_EXPORTER is `none`, or
    OTEL_SDK_DISABLED is `true`. Only OTLP over HTTP with protobuf is spoken (the extra
    ships that exporter): `grpc` is a problem, reported and left off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Plan(False)
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = _first(env, ENDPOINTS)
    if exporter in ("", "none") and (exporter == "none" or endpoint is None):
        return Plan(False)
    exporter = exporter or "otlp"
    names, values = _headers(_first(env, HEADERS))
    shown = loggable_url(endpoint or DEFAULT_ENDPOINT) if exporter == "otlp" else None
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip() or "parentbased_always_on"
    argument = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    found = Plan(True, exporter, shown, env.get("OTEL_SERVICE_NAME", "").strip() or None,
                 f"{sampler} {argument}".strip(), names, secrets=values)
    problem = None
    if "," in exporter or exporter not in EXPORTERS:
        problem = (f"OTEL_TRACES_EXPORTER={exporter}: mirrorgate exports traces with otlp "
                   "(OTLP over HTTP) or console; set OTEL_TRACES_EXPORTER=otlp")
    elif exporter == "otlp" and (_first(env, PROTOCOLS) or "http/protobuf") != "http/protobuf":
        problem = (f"OTEL_EXPORTER_OTLP_PROTOCOL={_first(env, PROTOCOLS)}: mirrorgate speaks "
                   "OTLP over HTTP with protobuf (http/protobuf, on port 4318), not gRPC or "
                   "http/json; point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP "
                   "receiver")
    elif not _installed():
        problem = ("the OTEL_* variables ask for traces but OpenTelemetry is not installed: "
                   "install mirrorgate with its otel extra (pip install 'mirrorgate[otel]')")
    if problem is not None:
        return Plan(False, found.exporter, found.endpoint, found.service_name, found.sampler,
                    names, problem, values)
    return found


def stop() -> None:
    """Flush what is buffered (bounded by the SDK's own timeouts) and turn tracing off."""
    tracer = _active
    install(None)
    if tracer is not None:
        tracer.shutdown()

