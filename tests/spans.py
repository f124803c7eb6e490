"""Spans captured in memory: tracing on for one test, through the SDK mirrorgate runs.

`captured_spans` installs an `_otel.OtelTracer` over a provider of its own with a synchronous
in-memory exporter, so a finished span is readable at once, and turns tracing off again at
teardown; what is under test is mirrorgate's own span code, the SDK as shipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mirrorgate import _otel, tracing

__all__ = ["Captured", "captured_spans"]


class Captured:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        [found] = self.named(name)
        return found


@pytest.fixture
def captured_spans() -> Iterator[Captured]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=_otel.resource("test"), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(_otel.OtelTracer(provider))
    try:
        yield Captured(exporter)
    finally:
        tracing.install(None)
        provider.shutdown()
