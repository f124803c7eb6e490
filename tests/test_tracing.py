"""Tracing: off unless the OTEL_* variables ask (and then no OpenTelemetry module is loaded),
spans that nest and cross the queue by their W3C trace context, log lines that carry the ids,
and nothing secret in an attribute."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from mirrorgate import tracing
from mirrorgate.config import unknown_variables
from mirrorgate.logs import register_secret
from mirrorgate.mirror import traceparent_text
from tests.spans import Captured, captured_spans

__all__ = ["captured_spans"]

ENDPOINT = "http://127.0.0.1:4318"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


# --- what the environment asks for ---------------------------------------------------------

@pytest.mark.parametrize("environ", [
    {},
    {"OTEL_SERVICE_NAME": "mirrorgate"},  # a name alone exports nothing
    {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"},
])
def test_tracing_is_off_unless_the_otel_variables_ask_for_traces(
    environ: dict[str, str],
) -> None:
    found = tracing.plan(environ)
    assert not found.on
    assert found.problem is None
    assert found.summary() == {"on": False}


def test_an_otlp_endpoint_turns_tracing_on_with_the_sdk_defaults() -> None:
    found = tracing.plan({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT + "/",
                          "OTEL_SERVICE_NAME": "gate-eu"})
    assert found.on
    assert (found.exporter, found.endpoint, found.service_name, found.sampler) == (
        "otlp", ENDPOINT + "/", "gate-eu", "parentbased_always_on")


def test_the_exporter_alone_sends_to_the_sdks_default_endpoint() -> None:
    found = tracing.plan({"OTEL_TRACES_EXPORTER": "otlp",
                          "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                          "OTEL_TRACES_SAMPLER_ARG": "0.1"})
    assert found.on
    assert found.endpoint == "http://localhost:4318"
    assert found.sampler == "parentbased_traceidratio 0.1"


def test_a_collectors_api_key_is_never_shown_only_the_header_names() -> None:
    found = tracing.plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:pw@otlp.example.com/x?k=v",
                          "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=hunter2-key,x-team=ops"})
    shown = str(found.summary()) + repr(found)
    assert found.summary()["headers"] == ["x-api-key", "x-team"]
    assert found.secrets == ("hunter2-key", "ops")
    assert "hunter2-key" not in shown
    assert "pw" not in found.summary()["endpoint"]
    assert "k=v" not in shown


@pytest.mark.parametrize(("environ", "problem"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     "not gRPC"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp (OTLP over HTTP) or console"),
])
def test_what_mirrorgate_cannot_send_is_a_problem_and_leaves_tracing_off(
    environ: dict[str, str], problem: str,
) -> None:
    found = tracing.plan(environ)
    assert not found.on
    assert found.problem is not None
    assert problem in found.problem
    assert found.summary()["problem"] == found.problem


def test_the_otel_variables_are_the_sdks_and_never_warned_about_as_unknown() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SERVICE_NAME": "x",
               "OTEL_TRACES_SAMPLER": "always_on", "MIRRORGATE_NOTIFY_URLL": "x"}
    assert [unknown.name for unknown in unknown_variables(environ)] == ["MIRRORGATE_NOTIFY_URLL"]


def test_with_tracing_off_no_opentelemetry_module_is_ever_imported() -> None:
    # a fresh interpreter: the whole command, the proxy application and a job's codec
    code = (
        "import sys\n"
        "import mirrorgate.__main__, mirrorgate.process, mirrorgate.serve.app\n"
        "import mirrorgate.worker.loop\n"
        "from mirrorgate import tracing\n"
        "assert not tracing.plan({}).on and not tracing.enabled()\n"
        "with tracing.span('x') as s:\n"
        "    s.set('k', 'v')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_off_every_call_is_the_same_shared_no_op() -> None:
    assert not tracing.enabled()
    first = tracing.span("a", {"k": "v"})
    assert first is tracing.span("b") is tracing.consume("c", TRACEPARENT)
    assert tracing.traceparent() is None
    assert tracing.log_processors() == ()
    with first as span:
        span.set("k", "v")
        span.fail("no")


# --- spans -----------------------------------------------------------------------------------

def test_spans_nest_and_the_trace_context_names_the_innermost(
    captured_spans: Captured,
) -> None:
    with tracing.span("outer"), tracing.span("inner", {"mirrorgate.package": "left-pad"}):
        written = tracing.traceparent()
    outer, inner = captured_spans.one("outer"), captured_spans.one("inner")

    assert inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id
    assert written is not None
    assert written.startswith(f"00-{format_trace_id(inner.context.trace_id)}-"
                              f"{format_span_id(inner.context.span_id)}-")
    assert traceparent_text(written) == written  # what the job codec keeps
    assert dict(inner.attributes or {}) == {"mirrorgate.package": "left-pad"}


def test_a_job_span_continues_the_trace_its_enqueue_wrote(captured_spans: Captured) -> None:
    with tracing.span("enqueue", kind="producer"):
        parent = tracing.traceparent()
    with tracing.span("unrelated"), tracing.consume("job", parent, {"k": 1}):
        pass
    enqueue, job = captured_spans.one("enqueue"), captured_spans.one("job")

    assert job.kind is SpanKind.CONSUMER
    assert job.context.trace_id == enqueue.context.trace_id
    assert job.parent is not None
    assert job.parent.span_id == enqueue.context.span_id


def test_a_job_without_a_trace_context_starts_a_trace_of_its_own(
    captured_spans: Captured,
) -> None:
    with tracing.span("unrelated"), tracing.consume("job", None):
        pass
    assert captured_spans.one("job").parent is None
    assert (captured_spans.one("job").context.trace_id
            != captured_spans.one("unrelated").context.trace_id)


def test_a_server_span_joins_the_trace_a_client_sends(captured_spans: Captured) -> None:
    with tracing.serve("GET packument", {"traceparent": TRACEPARENT}):
        pass
    served = captured_spans.one("GET packument")
    assert served.kind is SpanKind.SERVER
    assert format_trace_id(served.context.trace_id) == TRACEPARENT.split("-")[1]


def test_a_span_that_is_not_current_has_no_children(captured_spans: Captured) -> None:
    with (tracing.span("request"), tracing.span("GET", kind="client", current=False),
          tracing.span("enqueue")):
        pass
    parent = captured_spans.one("enqueue").parent
    assert parent is not None
    assert parent.span_id == captured_spans.one("request").context.span_id


def test_annotations_land_on_the_current_span(captured_spans: Captured) -> None:
    with tracing.span("request"):
        tracing.annotate({"mirrorgate.cache": "hit", "ignored": None})
    assert dict(captured_spans.one("request").attributes or {}) == {"mirrorgate.cache": "hit"}


def test_a_failure_is_recorded_by_its_type_never_its_text(captured_spans: Captured) -> None:
    register_secret("tok-0123456789-secret")
    with pytest.raises(RuntimeError), tracing.span("call"):
        raise RuntimeError("the upstream said Bearer tok-0123456789-secret")
    call = captured_spans.one("call")
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "RuntimeError"
    assert not call.events  # no exception event, whose message would carry the text


def test_a_secret_never_reaches_an_attribute(captured_spans: Captured) -> None:
    register_secret("s3cr3t-token-value-77")
    with tracing.span("call", {"url.full": "https://r.example/?t=s3cr3t-token-value-77"}) as span:
        span.set("detail", "a long text " * 100 + "s3cr3t-token-value-77")
    attributes = dict(captured_spans.one("call").attributes or {})
    assert "s3cr3t-token-value-77" not in str(attributes)
    assert all(len(str(value)) <= 512 for value in attributes.values())


def test_a_line_logged_inside_a_span_carries_its_trace_and_span_ids(
    captured_spans: Captured,
) -> None:
    [add_ids] = tracing.log_processors()
    with tracing.span("job"):
        inside = add_ids(None, "info", {"event": "mirror_published"})
    outside = add_ids(None, "info", {"event": "started"})
    job = captured_spans.one("job")

    assert inside["trace_id"] == format_trace_id(job.context.trace_id)
    assert inside["span_id"] == format_span_id(job.context.span_id)
    assert "trace_id" not in outside


def test_the_service_is_mirrorgate_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mirrorgate import _otel

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert _otel.resource("worker").attributes["service.name"] == "mirrorgate"
    assert _otel.resource("worker").attributes["mirrorgate.shape"] == "worker"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gate-eu")
    assert _otel.resource("worker").attributes["service.name"] == "gate-eu"


def test_traces_asked_for_without_the_otel_extra_are_a_problem_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_installed", lambda: False)
    found = tracing.plan({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})
    assert not found.on
    assert found.problem is not None
    assert "pip install 'mirrorgate[otel]'" in found.problem
