"""Row 4 of the faults table: the private upstream (Verdaccio, also the mirror target) is down.

> | 4 | private upstream down | public fallback keeps serving; the worker retries the job later
> and it is published once the private upstream is back |

Verdaccio is stopped after mirrorgate starts (its port then refuses connections) and started
again on the same port with the same storage, so its user and token still hold. Meanwhile npm
installs through the proxy from the public upstream, and the worker's job fails against the
target: released at once the first time, then held back for the visibility window
(`MIRROR_VISIBILITY_SECONDS=10`, the shortest allowed), by which time Verdaccio is back and the
version is published, once, on the third delivery.

Two shapes: the sidecar over SQS (moto), where the queue redelivers, and `mirrorgate serve` on
the memory queue, which never redelivers: there the worker holds the failed job itself and
tries again on the same schedule (the serve path enqueues a version at most once per
five-minute window, so waiting for the next pull would leave it unmirrored that long).
"""

from __future__ import annotations

import os
import time
from typing import Any

from tests.e2e.sidecar import start_sidecar
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.faults.worker_jobs import logged
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, make_package, tarball_filename, tarball_path
from tests.servers.processes import (
    CapturedProcess,
    MirrorgateProcess,
    Reply,
    ServerUnavailableError,
    http_request,
    wait_for,
)
from tests.servers.sqs_server import SqsServer, sqs_environment
from tests.servers.verdaccio import Verdaccio

VISIBILITY = 10


def restart(verdaccio: Verdaccio, timeout: float = 20.0) -> None:
    """Start a stopped Verdaccio again on its port, config and storage (its user and the JWT
    secret behind `verdaccio.token` live in that storage, so the token still holds)."""
    assert verdaccio.process is None, "Verdaccio is still running"
    env = {key: value for key, value in os.environ.items()
           if not key.lower().startswith(("npm_config_", "http_proxy", "https_proxy"))}
    verdaccio.process = CapturedProcess(
        [str(verdaccio.binary), "--config", str(verdaccio.config_path),
         "--listen", f"127.0.0.1:{verdaccio.port}"], env=env, cwd=verdaccio.workdir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_request("GET", verdaccio.url + "-/ping", timeout=1).status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise ServerUnavailableError(f"Verdaccio did not come back within {timeout:g}s:\n"
                                 f"{verdaccio.process.output()}")


def registry_env(public: FixtureRegistry, verdaccio: Verdaccio) -> dict[str, str]:
    return {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
            "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
            "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
            "MIRROR_VISIBILITY_SECONDS": str(VISIBILITY)}


def get(proxy: MirrorgateProcess, guard: SecretGuard, path: str) -> Reply:
    reply = http_request("GET", proxy.registry_url + path.lstrip("/"))
    guard.seen(reply, f"GET {path}")
    return reply


def assert_public_fallback_serves(proxy: MirrorgateProcess, guard: SecretGuard,
                                  package: FixturePackage, npm_client: NpmClient) -> None:
    """The packument and the tarball come from public while the private upstream is down,
    and a real npm install through the proxy succeeds."""
    packument = get(proxy, guard, package.name)
    assert packument.status == 200, packument.body[:300]
    assert sorted(packument.json()["versions"]) == package.sorted_versions()
    npm_client.write_project({package.name: "^1.0.0"})
    done = npm_client.install(registry=proxy.registry_url)
    guard.seen(done.stdout + done.stderr, "npm's output")
    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {package.name: "1.1.0"}
    tarball = get(proxy, guard, tarball_path(package.name, "1.1.0"))
    assert tarball.status == 200
    assert tarball.body == package.versions["1.1.0"].tarball
    private_failures = [line for line in proxy.events("upstream_failed")
                        if line.get("upstream") == "private"]
    assert private_failures, "the proxy never noticed the private upstream was down"
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="private",
                        reason="unreachable") >= 1


def retries(worker: MirrorgateProcess, name: str) -> list[dict[str, Any]]:
    return [line for line in worker.events("mirror_retry") if line.get("package") == name]


def wait_for_two_failed_deliveries(worker: MirrorgateProcess, name: str) -> None:
    """The first delivery fails and is released at once; the second fails and is held back
    for the visibility window: the private upstream may now come back."""
    wait_for(lambda: len(retries(worker, name)) == 2, timeout=20,
             message="two deliveries to fail against the stopped private upstream")
    assert [line["deliveries"] for line in retries(worker, name)] == [1, 2]
    assert {line["reason"] for line in retries(worker, name)} == {"target-failed"}


def assert_published_once_on_the_third_delivery(worker: MirrorgateProcess,
                                                verdaccio: Verdaccio,
                                                package: FixturePackage) -> None:
    wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=VISIBILITY + 20, message="the job to be published once Verdaccio is back")
    [published] = logged(worker, "mirror_published")
    assert published["package"] == package.name
    assert published["deliveries"] == 3
    assert worker.metric("mirrorgate_jobs_total", outcome="retried") == 2
    assert worker.metric("mirrorgate_jobs_total", outcome="retired") == 0
    assert verdaccio.versions(package.name) == ["1.1.0"]
    stored = verdaccio.tarball(package.name, tarball_filename(package.name, "1.1.0"))
    assert stored == package.versions["1.1.0"].tarball


async def test_the_sqs_worker_retries_while_the_private_upstream_is_down_and_publishes_after(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, sqs_server: SqsServer, npm_client: NpmClient,
) -> None:
    package = make_package("fallback", ["1.0.0", "1.1.0"])
    public_registry.add(package)
    queue = await sqs_server.create_queue(visibility=VISIBILITY)
    pod = start_sidecar(guarded, {**registry_env(public_registry, verdaccio),
                                  **sqs_environment(sqs_server, queue.url)})
    verdaccio.stop()

    assert_public_fallback_serves(pod.proxy, guard, package, npm_client)
    wait_for_two_failed_deliveries(pod.worker, "fallback")
    restart(verdaccio)

    assert_published_once_on_the_third_delivery(pod.worker, verdaccio, package)
    assert pod.proxy.metric("mirrorgate_jobs_enqueued_total") == 1
    assert pod.worker.returncode is None
    assert pod.proxy.returncode is None


def test_the_in_process_worker_on_the_memory_queue_holds_the_job_and_publishes_it_after(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient,
) -> None:
    package = make_package("fallback", ["1.0.0", "1.1.0"])
    public_registry.add(package)
    proxy = guarded("serve", registry_env(public_registry, verdaccio))
    verdaccio.stop()

    assert_public_fallback_serves(proxy, guard, package, npm_client)
    wait_for_two_failed_deliveries(proxy, "fallback")
    held = [line for line in logged(proxy, "mirror_retry_held", 2)
            if line["package"] == "fallback"]
    assert [line["delay"] for line in held] == [0, VISIBILITY]
    restart(verdaccio)

    assert_published_once_on_the_third_delivery(proxy, verdaccio, package)
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1
    public_registry.clear_requests()
    again = get(proxy, guard, tarball_path("fallback", "1.1.0"))
    assert again.status == 200
    assert again.body == package.versions["1.1.0"].tarball
    # the next pull is a private hit (the packument is revalidated first: the gate decides)
    assert [seen.path for seen in public_registry.requests if "/-/" in seen.path] == []
    assert proxy.returncode is None
