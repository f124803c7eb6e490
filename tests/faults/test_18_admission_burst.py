"""Row 18 of the faults table: a burst beyond the admission bound.

> | 18 | more requests doing upstream work than `MIRRORGATE_MAX_IN_FLIGHT` | past a short wait
> the excess gets 503 with Retry-After and a JSON reason, counted; warm packument hits are
> never shed; npm retries through the 503s and the install completes |

The real `mirrorgate serve` with `MIRRORGATE_MAX_IN_FLIGHT=4`, over the fixture public registry
whose `slow-*` packuments answer only after a delay, so the requests for them hold the bound.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, standard_tree
from tests.servers.processes import MirrorgateProcess, Reply, http_request, wait_for

BOUND = 4
BURST = 12
HOLD = 3.0


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry) -> MirrorgateProcess:
    return guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                             "MIRRORGATE_MAX_IN_FLIGHT": str(BOUND)})


def slow_packages(public: FixtureRegistry, count: int, hold: float) -> list[str]:
    names = [f"slow-{i}" for i in range(count)]
    public.add(*(make_package(name) for name in names))
    for name in names:
        public.fault(f"/{name}", Fault(delay=hold), exact=True)
    return names


def holding(proxy: MirrorgateProcess, names: list[str]) -> list[threading.Thread]:
    """Ask for each slow packument in its own thread: each holds one slot while it waits."""
    threads = [threading.Thread(target=http_request, args=("GET", proxy.registry_url + name),
                                kwargs={"timeout": 30}, daemon=True) for name in names]
    for thread in threads:
        thread.start()
    return threads


def test_a_burst_past_the_bound_is_shed_with_503_and_retry_after_while_warm_hits_answer(
    guarded: GuardedFactory, public_registry: FixtureRegistry, guard: SecretGuard,
) -> None:
    names = slow_packages(public_registry, BURST, HOLD)
    public_registry.add(make_package("warm"))
    proxy = start_proxy(guarded, public_registry)
    assert http_request("GET", proxy.registry_url + "warm").status == 200

    with ThreadPoolExecutor(BURST) as pool:
        burst = [pool.submit(http_request, "GET", proxy.registry_url + name, timeout=30)
                 for name in names]
        wait_for(lambda: proxy.metric("mirrorgate_shed_total") > 0, timeout=10,
                 message="the first request to be shed")
        warm = [http_request("GET", proxy.registry_url + "warm", timeout=5) for _ in range(20)]
        replies: list[Reply] = [future.result() for future in burst]

    assert {reply.status for reply in warm} == {200}
    served = [reply for reply in replies if reply.status == 200]
    shed = [reply for reply in replies if reply.status == 503]
    assert len(served) == BOUND
    assert len(shed) == BURST - BOUND
    for reply in shed:
        guard.seen(reply)
        assert reply.headers["Retry-After"] == "1"
        assert reply.headers["Content-Type"] == "application/json"
        body = reply.json()
        assert body["reason"] == "overloaded"
        assert "MIRRORGATE_MAX_IN_FLIGHT" in body["error"]
    assert proxy.metric("mirrorgate_shed_total", route="packument") == BURST - BOUND
    assert proxy.metric("mirrorgate_requests_total", route="packument",
                        status="503") == BURST - BOUND
    [first] = proxy.events("request_shed")  # the first shed, then every 100th
    assert first["route"] == "packument"
    assert first["limit"] == BOUND


def test_npm_retries_through_the_503s_and_the_install_completes(
    guarded: GuardedFactory, public_registry: FixtureRegistry, npm_client: NpmClient,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    names = slow_packages(public_registry, BOUND, hold=6.0)
    proxy = start_proxy(guarded, public_registry)
    npm_client.write_project(tree.dependencies)

    held = holding(proxy, names)
    wait_for(lambda: sum(1 for seen in public_registry.requests
                         if seen.path.startswith("/slow-")) == BOUND,
             timeout=10, message="the bound to be held")
    done = npm_client.install(registry=proxy.registry_url, fetch_retries=6, timeout=90)
    for thread in held:
        thread.join(30)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == tree.resolved
    assert proxy.metric("mirrorgate_shed_total") >= 1, "npm never met a 503"
    assert "Traceback" not in proxy.stderr()
