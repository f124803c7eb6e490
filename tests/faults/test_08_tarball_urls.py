"""Row 8 of the faults table: a `dist.tarball` that points anywhere but the public upstream.

> | 8 | `dist.tarball` on another host, on an internal address literal (127.0.0.1, 10.0.0.1,
> 169.254.169.254, [::1], octal/hex spellings), or a non-http scheme | never fetched by serve
> or worker; the version is unavailable; a log line says why |

Watch listeners run on other loopback ports (127.0.0.1 and, where the machine has it, [::1]);
the hostile URLs that could reach a listener point at them (`localhost`, `127.0.0.1`, the
octal, hex and integer spellings of 127.0.0.1, `[::1]`, `ftp://`), so "never fetched" is their
empty request log. The others (10.0.0.1, 169.254.169.254, example.com, `file://`) would hang
or fail if followed; their log lines show they were refused before any connection.

- Serve: the real `mirrorgate serve` gates a packument listing one good version and one
  version per hostile URL. The hostile ones leave `versions` for `policyRestrictions`,
  `latest` is repointed to the good one, each tarball and version document answers 403 with
  the reason, npm refuses to install one, and each refusal is logged with its kind.
- Worker: jobs carrying those URLs are put on SQS directly (the proxy would never enqueue
  them); a real `mirrorgate worker` retires each as `off-origin` with the kind in its log
  line, and the well-formed job after them is published.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorgate.mirror import encode_job
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.faults.worker_jobs import (
    Watchers,
    admitted_job,
    logged,
    send_to_sqs,
    stored_tarball,
    stored_version,
    watchers,
)
from tests.servers.fixture_registry import ABBREVIATED, FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, make_package, make_version, tarball_path
from tests.servers.processes import MirrorgateProcess, Reply, http_request, wait_for
from tests.servers.sqs_server import SqsServer, sqs_environment

NAME = "detour"


@dataclass(frozen=True)
class Hostile:
    """A version whose `dist.tarball` is `url`, and the kind of refusal it must earn."""

    version: str
    url: str
    kind: str
    watched: bool


def hostile_urls(watch: Watchers) -> list[Hostile]:
    port = watch.ipv4.port
    port6 = watch.ipv6.port if watch.ipv6 is not None else port
    path = "/detour/-/detour-1.0.0.tgz"
    return [
        Hostile("1.0.1", f"http://localhost:{port}{path}", "off-origin", True),
        Hostile("1.0.2", f"https://example.com{path}", "off-origin", False),
        Hostile("1.0.3", f"http://127.0.0.1:{port}{path}", "internal-address", True),
        Hostile("1.0.4", f"http://10.0.0.1{path}", "internal-address", False),
        Hostile("1.0.5", "http://169.254.169.254/latest/meta-data/", "internal-address", False),
        Hostile("1.0.6", f"http://[::1]:{port6}{path}", "internal-address",
                watch.ipv6 is not None),
        Hostile("1.0.7", f"http://0177.0.0.1:{port}{path}", "internal-address", True),
        Hostile("1.0.8", f"http://0x7f.0.0.1:{port}{path}", "internal-address", True),
        Hostile("1.0.9", f"http://2130706433:{port}{path}", "internal-address", True),
        Hostile("1.0.10", f"ftp://127.0.0.1:{port}{path}", "scheme", True),
        Hostile("1.0.11", "file:///etc/passwd", "scheme", False),
    ]


def detour_package(hostile: list[Hostile]) -> FixturePackage:
    """1.0.0 on the public origin, then one version per hostile URL (the highest is one of
    them, so `latest` has to be repointed)."""
    return make_package(NAME, [make_version(NAME, "1.0.0"), *(
        make_version(NAME, h.version).with_dist(tarball=h.url) for h in hostile)])


def get(proxy: MirrorgateProcess, guard: SecretGuard, path: str,
        headers: dict[str, str] | None = None) -> Reply:
    reply = http_request("GET", proxy.registry_url + path.lstrip("/"), headers=headers)
    guard.seen(reply, f"GET {path}")
    return reply


def assert_refused_with_the_reason(reply: Reply, hostile: Hostile) -> None:
    assert reply.status == 403, (hostile, reply.body[:300])
    assert reply.headers["Content-Type"] == "application/json"
    body = reply.json()
    assert body["rule"] == "tarball-origin"
    assert body["version"] == hostile.version
    assert "tarball URL is not followed" in body["reason"]


def test_a_version_whose_tarball_leaves_the_public_origin_is_unavailable_and_never_fetched(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    npm_client: NpmClient,
) -> None:
    with watchers() as watch:
        hostile = hostile_urls(watch)
        package = detour_package(hostile)
        public_registry.add(package)
        proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})

        full = get(proxy, guard, NAME)
        abbreviated = get(proxy, guard, NAME, {"Accept": ABBREVIATED})
        tarballs = {h.version: get(proxy, guard, tarball_path(NAME, h.version)) for h in hostile}
        documents = {h.version: get(proxy, guard, f"{NAME}/{h.version}") for h in hostile}
        npm_client.write_project({})
        refused = npm_client.install(f"{NAME}@1.0.3", registry=proxy.registry_url)
        guard.seen(refused.stdout + refused.stderr, "npm's output")
        good = get(proxy, guard, tarball_path(NAME, "1.0.0"))
        wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
                 timeout=15, message="the good version to be mirrored")

        assert watch.requests() == []

    assert full.status == 200
    document = full.json()
    assert list(document["versions"]) == ["1.0.0"]
    assert document["dist-tags"]["latest"] == "1.0.0"
    restrictions = document["policyRestrictions"]
    assert sorted(restrictions["versions"]) == sorted(h.version for h in hostile)
    assert "tarball-origin" in restrictions["message"]
    assert abbreviated.status == 200
    assert list(abbreviated.json()["versions"]) == ["1.0.0"]
    for item in hostile:
        assert_refused_with_the_reason(tarballs[item.version], item)
        assert_refused_with_the_reason(documents[item.version], item)
    assert refused.returncode != 0
    assert "E403" in refused.stderr
    assert good.status == 200
    assert good.body == package.versions["1.0.0"].tarball

    wanted = {h.version: h.kind for h in hostile}
    kinds = {line["version"]: line["kind"] for line in logged(proxy, "tarball_url_refused")}
    assert all(wanted[version] == kind for version, kind in kinds.items())
    if len(kinds) < len(hostile):  # past the first few, one line counts the rest
        [summary] = logged(proxy, "tarball_urls_refused")
        assert summary["count"] == len(hostile)
    denied = {line["version"]: line
              for line in logged(proxy, "tarball_denied", len(hostile))}
    assert sorted(denied) == sorted(wanted)
    assert all(line["rule"] == "tarball-origin" for line in denied.values())
    assert proxy.metric("mirrorgate_refusals_total", reason="tarball_url") == len(hostile)
    # the client's GET alone: the worker beside the proxy mirrors the bytes it verified
    good_path = tarball_path(NAME, "1.0.0")
    assert [seen.path for seen in public_registry.requests if "/-/" in seen.path] \
        == [good_path]


async def test_a_job_carrying_such_a_url_is_retired_by_the_worker_without_a_connection(
    guarded: GuardedFactory, public_registry: FixtureRegistry, sqs_server: SqsServer,
) -> None:
    package = make_package(NAME, ["1.0.0"])
    public_registry.add(package)
    queue = await sqs_server.create_queue(visibility=10)
    worker = guarded("worker", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                **sqs_environment(sqs_server, queue.url)})
    with watchers() as watch:
        hostile = hostile_urls(watch)
        await send_to_sqs(sqs_server, queue.url, *(
            encode_job(admitted_job(public_registry, NAME, "1.0.0", tarball_url=h.url))
            for h in hostile))
        await send_to_sqs(sqs_server, queue.url, admitted_job(public_registry, NAME, "1.0.0"))

        wait_for(lambda: worker.metric("mirrorgate_jobs_retired_total", reason="off-origin")
                 == len(hostile), timeout=20, message="every hostile job to be retired")
        wait_for(lambda: worker.metric("mirrorgate_jobs_total", outcome="published") == 1,
                 timeout=20, message="the well-formed job to be published")
        assert watch.requests() == []

    retired = logged(worker, "mirror_retired", len(hostile))
    assert len(retired) == len(hostile)
    assert sorted(line["kind"] for line in retired) == sorted(h.kind for h in hostile)
    assert all(line["reason"] == "off-origin" for line in retired)
    # the good job's one packument and one tarball: the default's capability signals judge
    # its release on the re-gate's gating and the bytes the worker verified, no fetch of theirs
    assert [seen.path for seen in public_registry.requests] == [f"/{NAME}",
                                                                tarball_path(NAME, "1.0.0")]
    assert stored_tarball(worker, NAME, "1.0.0") == package.versions["1.0.0"].tarball
    assert stored_version(worker, NAME, "1.0.0") is not None
    assert worker.returncode is None
    assert worker.get("livez").status == 200
