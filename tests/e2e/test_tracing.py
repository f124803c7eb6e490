"""One trace from an install to the mirror: the sidecar pod with tracing on, over each queue.

`mirrorgate serve --no-worker` and `mirrorgate worker` (two processes) export to the suite's
OTLP/HTTP receiver (`tests.servers.otlp`, the protobuf decoded with `opentelemetry-proto`); a
real `npm install` goes through the proxy. The tarball request's trace runs through the proxy
(the request, the public download, the enqueue) and, by the `traceparent` the job carries
across SQS (moto) or Pub/Sub (the emulator), through the worker (the job, its re-gate, fetch and
publish): one trace id, two services. A job written by an older proxy, without `traceparent`,
is still mirrored, in a trace of its own. Log lines written inside a span carry its ids, and no
span carries the private registry's token. In one process (`mirrorgate serve`, the memory
queue) the trace crosses to the worker the same way; traces asked for over gRPC are refused
with a reason, and the proxy serves without them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from mirrorgate.mirror import encode_job
from tests.e2e.sidecar import registry_environment
from tests.e2e.test_untrusted_queue import send_raw
from tests.faults.worker_jobs import admitted_job
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.otlp import OtlpReceiver, ReceivedSpan, render
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

PROXY, WORKER = "mirrorgate-proxy", "mirrorgate-worker"


def start_pod(mirrorgate: MirrorgateFactory, env: Mapping[str, str],
              receiver: OtlpReceiver) -> tuple[MirrorgateProcess, MirrorgateProcess]:
    proxy = mirrorgate("serve --no-worker", {**env, **receiver.environment(PROXY)})
    worker = mirrorgate("worker", {**env, **receiver.environment(WORKER)})
    return proxy, worker


def one(spans: list[ReceivedSpan], name: str, service: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name and span.service == service]
    assert len(found) == 1, (name, service, render(spans))
    return found[0]


def published_trace(receiver: OtlpReceiver,
                    request: tuple[str, str] | None = None) -> list[ReceivedSpan]:
    """The trace holding the worker's publish, once its last spans have arrived: the job's,
    and `request` (a span's name and service) when the trace began in another process, which
    exports on its own schedule (the proxy's tarball request may reach the receiver after the
    worker's publish on a loaded machine)."""
    [publish] = wait_for(lambda: receiver.named("mirrorgate.publish"), timeout=20,
                         message="the worker's publish span")

    def complete() -> list[ReceivedSpan]:
        trace = receiver.trace(publish.trace_id)
        names = {(span.name, span.service) for span in trace}
        job = any(name == "mirrorgate.job" for name, _service in names)
        return trace if job and (request is None or request in names) else []

    return wait_for(complete, timeout=10, message="the job's span and the request's")


def test_one_trace_runs_from_an_npm_install_through_the_queue_to_the_workers_publish(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
    otlp_receiver: OtlpReceiver,
) -> None:
    public_registry.add(make_package("traced-pkg", ["1.0.0"]))
    env = {**registry_environment(public_registry, verdaccio), **queue_environment}
    proxy, worker = start_pod(mirrorgate, env, otlp_receiver)
    npm_client.write_project({"traced-pkg": "1.0.0"})

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=30, message="the worker to publish")
    trace = published_trace(otlp_receiver, ("GET tarball", PROXY))
    request = one(trace, "GET tarball", PROXY)
    download = next(span for span in trace if span.service == PROXY and span.name == "GET"
                    and span.parent_span_id == request.span_id)
    enqueue = one(trace, "mirrorgate.enqueue", PROXY)
    job = one(trace, "mirrorgate.job", WORKER)
    steps = {name: one(trace, name, WORKER)
             for name in ("mirrorgate.regate", "mirrorgate.fetch", "mirrorgate.publish")}

    # the chain: request -> enqueue (proxy) -> job (worker, across the queue) -> its steps
    assert request.parent_span_id == ""
    assert request.kind == "server"
    assert enqueue.parent_span_id == request.span_id
    assert enqueue.kind == "producer"
    assert job.parent_span_id == enqueue.span_id
    assert job.kind == "consumer"
    assert all(step.parent_span_id == job.span_id for step in steps.values())
    assert {span.service for span in trace} == {PROXY, WORKER}
    # what each span says
    assert request.attributes["mirrorgate.route"] == "tarball"
    assert request.attributes["mirrorgate.package"] == "traced-pkg"
    assert request.attributes["mirrorgate.version"] == "1.0.0"
    assert request.attributes["mirrorgate.outcome"] == "200"
    assert request.attributes["mirrorgate.cache"] == "hit"  # the packument request filled it
    assert download.kind == "client"
    assert download.attributes["mirrorgate.upstream"] == "public"
    assert enqueue.attributes["messaging.system"] == queue_backend
    assert job.attributes["mirrorgate.outcome"] == "published"
    assert steps["mirrorgate.fetch"].attributes["mirrorgate.algorithm"] == "sha512"
    assert any(span.name == "PUT" and span.parent_span_id == steps["mirrorgate.publish"].span_id
               for span in trace)

    # the packument request is a trace of its own: a miss, filled from both upstreams, gated
    packument = next(span for span in otlp_receiver.named("GET packument")
                     if span.attributes.get("mirrorgate.cache") == "miss")
    fill = one(otlp_receiver.trace(packument.trace_id), "mirrorgate.fill", PROXY)
    below = [span for span in otlp_receiver.trace(packument.trace_id)
             if span.parent_span_id == fill.span_id]
    assert fill.parent_span_id == packument.span_id
    assert sorted(span.name for span in below) == ["GET", "GET", "mirrorgate.gate"]
    assert {span.attributes["mirrorgate.upstream"] for span in below if span.name == "GET"} \
        == {"public", "private"}

    # log lines written inside a span carry its ids, on both sides of the queue
    [enqueued] = proxy.events("job_enqueued")
    [published] = worker.events("mirror_published")
    assert enqueued["trace_id"] == published["trace_id"] == job.trace_id
    assert published["span_id"] == job.span_id  # written once the publish span has ended
    assert "trace_id" not in proxy.events("started")[0]
    # the private registry's token went to Verdaccio, never into a span
    shown = repr(otlp_receiver.spans)
    assert verdaccio.token not in shown
    assert "Authorization" not in shown
    assert {span.resource["mirrorgate.shape"] for span in trace} == {"proxy", "worker"}


async def test_a_job_from_an_older_proxy_without_a_trace_context_is_mirrored_in_its_own_trace(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, mirrorgate: MirrorgateFactory, otlp_receiver: OtlpReceiver,
    request: pytest.FixtureRequest,
) -> None:
    public_registry.add(make_package("older-job", ["1.0.0"]))
    env = {**registry_environment(public_registry, verdaccio), **queue_environment}
    old = admitted_job(public_registry, "older-job", "1.0.0")
    assert b"traceparent" not in encode_job(old)  # byte for byte what v1 always was

    await send_raw(queue_backend, env, request, encode_job(old))
    worker = mirrorgate("worker", {**env, **otlp_receiver.environment(WORKER)})

    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=30, message="the worker to publish the older job")
    assert verdaccio.versions("older-job") == ["1.0.0"]
    trace = published_trace(otlp_receiver)
    job = one(trace, "mirrorgate.job", WORKER)
    assert job.parent_span_id == ""  # a root: nothing to continue from
    assert job.attributes["mirrorgate.package"] == "older-job"


def test_in_one_process_the_memory_queue_carries_the_trace_to_the_worker_too(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
    otlp_receiver: OtlpReceiver,
) -> None:
    public_registry.add(make_package("single-traced", ["1.0.0"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 **otlp_receiver.environment("mirrorgate")})

    reply = http_request("GET", proxy.registry_url.rstrip("/")
                         + tarball_path("single-traced", "1.0.0"))

    assert reply.status == 200
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=20, message="the in-process worker to publish")
    trace = published_trace(otlp_receiver)
    request = one(trace, "GET tarball", "mirrorgate")
    enqueue = one(trace, "mirrorgate.enqueue", "mirrorgate")
    job = one(trace, "mirrorgate.job", "mirrorgate")
    assert (request.parent_span_id, enqueue.parent_span_id, job.parent_span_id) == (
        "", request.span_id, enqueue.span_id)
    assert enqueue.attributes["messaging.system"] == "memory"
    assert request.resource["mirrorgate.shape"] == "single"


def test_traces_asked_for_over_grpc_are_refused_with_a_reason_and_serving_goes_on(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
    otlp_receiver: OtlpReceiver,
) -> None:
    public_registry.add(make_package("untraced", ["1.0.0"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 **otlp_receiver.environment(),
                                 "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})

    assert proxy.get("npm/untraced").status == 200
    [line] = proxy.events("tracing_unavailable")
    assert "not gRPC" in line["reason"]
    assert proxy.events("started")[0]["tracing"] is False
    assert otlp_receiver.requests == 0
