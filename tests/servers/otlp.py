"""An OTLP/HTTP trace receiver on 127.0.0.1: what a collector is to mirrorgate's exporter.

`POST /v1/traces` takes an `ExportTraceServiceRequest` in protobuf (gzip'd or not), as the
OpenTelemetry exporter sends it, decodes it with `opentelemetry-proto` and keeps every span as
a `ReceivedSpan` (ids in hex, attributes as plain values, the resource's service name), so a
test reads one trace across processes. A `ThreadedApp`, so it keeps answering while the test
blocks; point a process at it with `environment()`.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.servers.availability import serving
from tests.servers.threaded import ThreadedApp

__all__ = ["OtlpReceiver", "ReceivedSpan", "otlp_receiver", "render"]

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
         5: "consumer"}
STATUSES = {0: "unset", 1: "ok", 2: "error"}


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    status: str = "unset"
    status_message: str = ""


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which is None:
        return None
    return getattr(value, which)


class OtlpReceiver(ThreadedApp):
    """Every span received so far (`spans`); `requests` counts the exports."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(self._build, host=host, name="otlp-receiver")
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        self.content_types: list[str] = []

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def environment(self, service: str | None = None) -> dict[str, str]:
        """The variables that send a process's traces here, exported at once (no batching
        delay), every trace sampled."""
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url.rstrip("/"),
               "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_TRACES_SAMPLER": "always_on"}
        if service is not None:
            env["OTEL_SERVICE_NAME"] = service
        return env

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.trace_id == trace_id]

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name == name]

    def _build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        received: list[ReceivedSpan] = []
        for resource_spans in export.resource_spans:
            resource = {item.key: _value(item.value)
                        for item in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)), service=service,
                        attributes={item.key: _value(item.value) for item in span.attributes},
                        resource=resource, status=STATUSES.get(span.status.code, "?"),
                        status_message=span.status.message))
        with self._lock:
            self._spans.extend(received)
            self.requests += 1
            self.content_types.append(request.headers.get("Content-Type", ""))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")


def render(spans: list[ReceivedSpan], shown: tuple[str, ...] = (
        "mirrorgate.route", "mirrorgate.package", "mirrorgate.version", "mirrorgate.cache",
        "mirrorgate.outcome", "mirrorgate.upstream", "http.response.status_code",
        "messaging.system", "mirrorgate.result")) -> str:
    """The spans as indented trees, one line each (service, kind, name, a few attributes):
    for a failing assertion, and for the trace shown in docs/operations.md."""
    ids = {span.span_id for span in spans}
    children: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else ""
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            details = " ".join(f"{key}={span.attributes[key]}" for key in shown
                               if key in span.attributes)
            lines.append(f"{'  ' * depth}{span.name} [{span.service}, {span.kind}"
                         f"{', ' + span.status if span.status == 'error' else ''}] {details}"
                         .rstrip())
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A started receiver, stopped at teardown."""
    with serving(OtlpReceiver(), "the OTLP receiver") as receiver:
        yield receiver
