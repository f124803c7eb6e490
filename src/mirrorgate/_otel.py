"""The OpenTelemetry SDK behind `tracing`: imported only when the OTEL_* variables ask for traces.

Spans are made here and nowhere else, so what reaches a span is decided in one place: fixed
attribute names, string values scrubbed of every registered secret (`logs.scrub`) and bounded,
an error recorded as its type's name, never an exception's text or a header. The provider is this
module's own, not OpenTelemetry's global one: nothing else in the process can add spans to it,
and a test can start and stop one per case.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import structlog
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, format_span_id, format_trace_id
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mirrorgate import __version__
from mirrorgate.logs import scrub
from mirrorgate.tracing import Kind, Span, Value

__all__ = ["OtelTracer", "start"]

log = structlog.get_logger("mirrorgate.tracing")

_KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT,
          "producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}
_PROPAGATOR = TraceContextTextMapPropagator()
VALUE_LIMIT = 512
"""Characters of a string attribute kept: a reason, a path, never a document."""
FLUSH_WITHIN = 5.0
"""Seconds the exit waits for buffered spans to leave; the SDK's own export timeout is longer,
and a collector that is down must not hold a SIGTERM'd process past its drain."""
SDK_LOG_EVERY = 60.0
"""The SDK's own complaints (mostly a collector that refuses or is down) become at most one
`tracing_sdk_warning` line a minute."""


def _value(value: Value) -> str | int | float | bool:
    if isinstance(value, str):
        cleaned: str = scrub(value)
        return cleaned[:VALUE_LIMIT]
    assert value is not None
    return value


class _Span:
    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span.is_recording()

    def set(self, key: str, value: Value) -> None:
        if value is not None and self._span.is_recording():
            self._span.set_attribute(key, _value(value))

    def fail(self, reason: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, str(_value(reason))))

    def rename(self, name: str) -> None:
        self._span.update_name(name)


def _attributes(items: Mapping[str, Value]) -> dict[str, str | int | float | bool]:
    return {key: _value(value) for key, value in items.items() if value is not None}


def _described(span: trace.Span, attributes: Mapping[str, Value]) -> trace.Span:
    # after the sampler's verdict: a span it drops costs no scrubbing (the ratio samplers
    # read no attribute)
    if attributes and span.is_recording():
        span.set_attributes(_attributes(attributes))
    return span


class OtelTracer:
    """`tracing.Tracer` over one SDK `TracerProvider`."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("mirrorgate", __version__)

    @contextmanager
    def _held(self, span: trace.Span, current: bool) -> Iterator[Span]:
        token = context_api.attach(trace.set_span_in_context(span)) if current else None
        try:
            yield _Span(span)
        except Exception as error:
            # the type only: an exception's text may quote what a secret-bearing call returned
            if span.is_recording():
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise
        finally:
            if token is not None:
                context_api.detach(token)
            span.end()

    def span(self, name: str, kind: Kind, attributes: Mapping[str, Value],
             current: bool) -> AbstractContextManager[Span]:
        started = self._tracer.start_span(name, kind=_KINDS[kind])
        return self._held(_described(started, attributes), current)

    def serve(self, name: str, headers: Mapping[str, str],
              attributes: Mapping[str, Value]) -> AbstractContextManager[Span]:
        # most clients send no trace context: skip the propagator's parse for them
        parent = (_PROPAGATOR.extract(carrier=headers) if "traceparent" in headers
                  else context_api.Context())
        started = self._tracer.start_span(name, context=parent, kind=SpanKind.SERVER)
        return self._held(_described(started, attributes), True)

    def consume(self, name: str, parent: str | None,
                attributes: Mapping[str, Value]) -> AbstractContextManager[Span]:
        # an empty context, not the current one: a job without a trace starts its own
        context = (_PROPAGATOR.extract(carrier={"traceparent": parent}) if parent
                   else context_api.Context())
        started = self._tracer.start_span(name, context=context, kind=SpanKind.CONSUMER)
        return self._held(_described(started, attributes), True)

    def annotate(self, attributes: Mapping[str, Value]) -> None:
        current = trace.get_current_span()
        if current.is_recording():
            current.set_attributes(_attributes(attributes))

    def traceparent(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    def log_ids(self, _logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        found = trace.get_current_span().get_span_context()
        if found.is_valid:
            event["trace_id"] = format_trace_id(found.trace_id)
            event["span_id"] = format_span_id(found.span_id)
        return event

    def shutdown(self) -> None:
        # in a thread of its own, bounded: the SDK waits up to its export timeout on a collector
        # that does not answer
        done = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        done.start()
        done.join(FLUSH_WITHIN)
        if done.is_alive():
            log.warning("tracing_flush_overran", within=FLUSH_WITHIN,
                        reason="the trace collector did not take the last spans in time; "
                        "they are lost")


class _SdkLog(logging.Handler):
    """The SDK's logging (`opentelemetry.*`, from its export thread) as structlog lines with a
    stable name, at most one a minute, instead of plain text on stderr."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._last = -SDK_LOG_EVERY
        self._quiet = 0

    def emit(self, record: logging.LogRecord) -> None:
        now = time.monotonic()
        if now - self._last < SDK_LOG_EVERY:
            self._quiet += 1
            return
        self._last, quiet, self._quiet = now, self._quiet, 0
        log.warning("tracing_sdk_warning", detail=str(scrub(record.getMessage()))[:300],
                    suppressed=quiet)


def _bridge_sdk_logs() -> None:
    logger = logging.getLogger("opentelemetry")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    logger.handlers = [_SdkLog()]


def _exporter(kind: str) -> SpanExporter:
    if kind == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression: the OTEL_* variables


def resource(shape: str) -> Resource:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the SDK reads them, `mirrorgate` as
    the service when they name none, and which process this is (`mirrorgate.shape`)."""
    found = Resource.create({"mirrorgate.shape": shape})
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: "mirrorgate"}))
    return found


def start(exporter: str, *, shape: str) -> OtelTracer:
    """The SDK, configured by the OTEL_* variables (sampler, batch sizes, exporter), sending
    batches from its own thread: a span costs the event loop a queue append."""
    _bridge_sdk_logs()
    provider = TracerProvider(resource=resource(shape), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
    return OtelTracer(provider)
