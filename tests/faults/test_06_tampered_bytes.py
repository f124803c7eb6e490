"""Row 6 of the faults table: tarball bytes that are not the ones the version was admitted with.

> | 6 | tarball bytes differ from the admitted digest | nothing published; security log line
> with both digests; tamper counter incremented |

The real `mirrorgate serve` runs with its in-process worker and Verdaccio as the private
upstream and mirror target. The public fixture registry tampers with the tarball:

- for everyone: the proxy hashes the bytes as it relays them and cuts the connection before the
  last chunk (issue 14), so the npm client fails and no job is enqueued;
- only for the worker (the client's GET passes untouched, the fetch after it is tampered): the
  client never notices, and the worker alone stands between those bytes and the private
  registry, with the same length (a digest mismatch) or another length (a size mismatch, whose
  line also carries both digests: the worker hashes what it was sent, without keeping it).
  Beside the proxy the worker takes the bytes the relay verified (`handoff`) and downloads
  nothing, so these run with the handoff off, the worker downloading as a sidecar does (the
  handed-over bytes' own tampering is tests/worker/test_handoff.py's).

Verdaccio does not check `dist.integrity` against what it stores, so "nothing published" is
read from its storage, not inferred from an answer.
"""

from __future__ import annotations

from typing import Any

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.faults.worker_jobs import logged
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, tarball_filename, tarball_path
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio
from tests.sri import sri

PASS_ONCE = Fault(times=1)
"""A fault that changes nothing, once: laid over a tampering fault (the newest matching fault
wins), it lets the next request through untouched and then leaves the tampering in place."""


def flipped(data: bytes) -> bytes:
    """The same bytes with one of them changed: same length, another digest."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry, verdaccio: Verdaccio,
                **extra: str) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                             "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token, **extra})


WORKER_DOWNLOADS = {"MIRRORGATE_HANDOFF_MAX_BYTES": "0"}
"""The worker downloads what it mirrors, as a sidecar does: the tampering reaches it."""


def assert_nothing_published(verdaccio: Verdaccio, name: str) -> None:
    assert verdaccio.versions(name) == []
    assert verdaccio.tarball(name, tarball_filename(name, "1.0.0")) is None


def assert_counted_as_tampered(proxy: MirrorgateProcess) -> None:
    # the tamper counter moves before the job's outcome is counted: wait for the outcome
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="tampered") >= 1, timeout=30,
             message="the worker to count the tampered tarball")
    assert proxy.metric("mirrorgate_tampered_total") == 1
    assert proxy.metric("mirrorgate_jobs_total", outcome="tampered") == 1
    assert proxy.metric("mirrorgate_jobs_total", outcome="published") == 0


def security_line(proxy: MirrorgateProcess, event: str) -> dict[str, Any]:
    [line] = logged(proxy, event)
    assert line["security"] is True
    assert line["level"] == "critical"
    return line


def test_bytes_tampered_for_everyone_fail_the_npm_client_and_are_never_published(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient,
) -> None:
    package = make_package("tampered", ["1.0.0"])
    public_registry.add(package)
    admitted = package.versions["1.0.0"]
    evil = b"not the admitted bytes"
    public_registry.fault(tarball_path("tampered", "1.0.0"), Fault(body=evil))
    proxy = start_proxy(guarded, public_registry, verdaccio)
    npm_client.write_project({"tampered": "1.0.0"})

    done = npm_client.install(registry=proxy.registry_url)
    guard.seen(done.stdout + done.stderr, "npm's output")

    # caught on the serve path (issue 14): the transfer is cut before its last bytes, npm sees
    # a broken connection, and no job is enqueued for the worker to refuse
    assert done.returncode != 0
    assert "ECONNRESET" in done.stderr or "EINTEGRITY" in done.stderr
    assert "tampered" not in npm_client.installed()
    wait_for(lambda: proxy.metric("mirrorgate_tampered_total") >= 1, timeout=30,
             message="the proxy to count the tampered tarball")
    lines = logged(proxy, "tarball_digest_mismatch")
    assert proxy.metric("mirrorgate_tampered_total") == len(lines)
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    assert proxy.metric("mirrorgate_jobs_total", outcome="published") == 0
    assert_nothing_published(verdaccio, "tampered")
    line = lines[0]  # one per attempt npm makes
    assert line["security"] is True
    assert line["level"] == "critical"
    assert line["expected"] == admitted.integrity
    assert line["actual"] == sri("sha512", evil)
    assert line["package"] == "tampered"
    assert line["version"] == "1.0.0"


def test_bytes_tampered_only_for_the_worker_are_never_published_though_the_client_saw_none(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = make_package("swapped", ["1.0.0"])
    public_registry.add(package)
    admitted = package.versions["1.0.0"]
    evil = flipped(admitted.tarball)
    path = tarball_path("swapped", "1.0.0")
    public_registry.fault(path, Fault(body=evil))
    public_registry.fault(path, PASS_ONCE)
    proxy = start_proxy(guarded, public_registry, verdaccio, **WORKER_DOWNLOADS)

    served = http_request("GET", proxy.registry_url.rstrip("/") + path)

    assert served.status == 200
    assert served.body == admitted.tarball
    assert_counted_as_tampered(proxy)
    assert [seen.path for seen in public_registry.requests if seen.path == path] == [path, path]
    assert_nothing_published(verdaccio, "swapped")
    line = security_line(proxy, "mirror_digest_mismatch")
    assert line["expected"] == admitted.integrity
    assert line["actual"] == sri("sha512", evil)
    assert line["algorithm"] == "sha512"
    assert line["url"] == public_registry.tarball_url("swapped", "1.0.0")


def test_a_substitute_of_another_length_is_never_published_and_logged_with_both_digests(
    guarded: GuardedFactory, public_registry: FixtureRegistry, verdaccio: Verdaccio,
) -> None:
    package = make_package("resized", ["1.0.0"])
    public_registry.add(package)
    admitted = package.versions["1.0.0"]
    evil = admitted.tarball + b"\0" * 4096  # what a bigger substitute looks like
    path = tarball_path("resized", "1.0.0")
    public_registry.fault(path, Fault(body=evil))
    public_registry.fault(path, PASS_ONCE)
    proxy = start_proxy(guarded, public_registry, verdaccio, **WORKER_DOWNLOADS)

    served = http_request("GET", proxy.registry_url.rstrip("/") + path)

    assert served.status == 200
    assert served.body == admitted.tarball
    assert_counted_as_tampered(proxy)
    assert_nothing_published(verdaccio, "resized")
    line = security_line(proxy, "mirror_size_mismatch")
    assert line["expected"] == admitted.integrity
    assert line["actual"] == sri("sha512", evil)
    assert line["expected_size"] == len(admitted.tarball)
    assert line["actual_size"] == len(evil)
