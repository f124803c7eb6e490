"""Row 2 of the faults table: the public upstream answers 500, 429, or hangs past the timeout.

> | 2 | public upstream answers 500 / 429 / hangs past the timeout | 502 / 503 with Retry-After /
> 504, each with a reason; a cached packument still served while within its TTL |

The real `mirrorgate serve` over the fixture public registry, which injects each fault on a
packument or on a tarball. The hang is a delay far longer than `MIRRORGATE_UPSTREAM_TIMEOUT`
(shortened to half a second), so the 504 comes from mirrorgate's own bound, not the fixture.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, tarball_path
from tests.servers.processes import MirrorgateProcess, Reply, http_request

UPSTREAM_TIMEOUT = 0.5
HANG = 30.0


@dataclass(frozen=True)
class Case:
    fault: Fault
    status: int
    kind: str
    reason: str
    retry_after: str | None = None


CASES = {
    "500": Case(Fault(status=500), 502, "status", "the public upstream answered 500"),
    "429": Case(Fault(status=429, headers={"Retry-After": "12"}), 503, "status",
                "the public upstream asked to retry later (429)", retry_after="12"),
    "hang": Case(Fault(delay=HANG), 504, "timeout",
                 "the public upstream did not answer in time"),
}


def get(proxy: MirrorgateProcess, path: str) -> Reply:
    return http_request("GET", proxy.registry_url + path.lstrip("/"), timeout=HANG)


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_UPSTREAM_TIMEOUT": str(UPSTREAM_TIMEOUT)})


def assert_answered_as(reply: Reply, case: Case, guard: SecretGuard, package: str) -> None:
    guard.seen(reply)
    assert reply.status == case.status, reply.body[:300]
    assert reply.headers["Content-Type"] == "application/json"
    body = reply.json()
    assert body["reason"] == case.reason
    assert (body["upstream"], body["kind"]) == ("public", case.kind)
    assert f"public upstream failed for {package}" in body["error"]
    assert reply.headers.get("Retry-After") == case.retry_after


@pytest.mark.parametrize("name", list(CASES))
def test_a_failing_packument_answers_the_mapped_status_with_a_reason(
    name: str, guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    case = CASES[name]
    public_registry.add(make_package("failing", ["1.0.0"]), make_package("healthy", ["1.0.0"]))
    public_registry.fault("/failing", case.fault, exact=True)
    proxy = start_proxy(guarded, public_registry)

    started = time.monotonic()
    for path in ("failing", "failing/1.0.0", tarball_path("failing", "1.0.0")):
        assert_answered_as(get(proxy, path), case, guard, "failing")
    took = time.monotonic() - started

    assert took < 3 * UPSTREAM_TIMEOUT + 3, f"three answers took {took:.1f} s"
    assert get(proxy, "healthy").status == 200
    assert proxy.returncode is None
    assert proxy.metric("mirrorgate_requests_total", route="packument",
                        status=str(case.status)) == 1
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason=case.kind) >= 3


@pytest.mark.parametrize("name", list(CASES))
def test_a_failing_tarball_answers_the_mapped_status_with_a_reason(
    name: str, guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    case = CASES[name]
    package = make_package("flaky", ["1.0.0", "1.1.0"])
    public_registry.add(package)
    public_registry.fault(tarball_path("flaky", "1.0.0"), case.fault, exact=True)
    proxy = start_proxy(guarded, public_registry)

    assert_answered_as(get(proxy, tarball_path("flaky", "1.0.0")), case, guard, "flaky")
    other = get(proxy, tarball_path("flaky", "1.1.0"))

    assert other.status == 200
    assert other.body == package.versions["1.1.0"].tarball
    assert proxy.metric("mirrorgate_requests_total", route="tarball",
                        status=str(case.status)) == 1
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1  # only the tarball served


@pytest.mark.parametrize("name", list(CASES))
def test_a_cached_packument_is_still_served_within_its_ttl_while_the_upstream_fails(
    name: str, guarded: GuardedFactory, public_registry: FixtureRegistry,
) -> None:
    package = make_package("cached", ["1.0.0"])
    public_registry.add(package)
    proxy = start_proxy(guarded, public_registry)
    first = get(proxy, "cached")
    assert first.status == 200

    public_registry.fault("/cached", CASES[name].fault, exact=True)
    public_registry.clear_requests()
    started = time.monotonic()
    again = get(proxy, "cached")
    version = get(proxy, "cached/1.0.0")
    tarball = get(proxy, tarball_path("cached", "1.0.0"))
    took = time.monotonic() - started

    assert again.status == 200
    assert again.body == first.body
    assert version.status == 200
    assert tarball.status == 200
    assert tarball.body == package.versions["1.0.0"].tarball
    assert took < 2 * UPSTREAM_TIMEOUT + 2
    # the in-process worker re-gates the job it was given against public itself (its own
    # pool, named in the User-Agent); the serve path asked for the tarball alone
    served = [seen.path for seen in public_registry.requests
              if seen.headers.get("User-Agent") != "mirrorgate (worker)"]
    assert served == [tarball_path("cached", "1.0.0")], (
        "the packument was asked for again within its TTL")
