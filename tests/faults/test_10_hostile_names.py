"""Row 10 of the faults table: hostile names in the URL.

> | 10 | hostile names in the URL: `..`, `%2e%2e`, `%2f` in an unscoped name, backslashes,
> control characters, 215+ characters, uppercase, a scope without a name | a 400 or 404 with a
> JSON reason; nothing outside the npm routes is reachable; no upstream URL is built from an
> unvalidated name |

The real `mirrorgate serve` runs with both upstreams played by fixture registries, so every
request mirrorgate sends upstream is recorded: a refused name must cost none. Requests are
written byte for byte with `http.client` (no client-side normalisation of `..` or escapes);
raw control characters, which no HTTP client sends, go over a bare socket. Upper case is not
hostile in itself (legacy packages such as `JSONStream` have capitals): such a name is looked
up as written and answers 404 when no upstream knows it.
"""

from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass
from pathlib import Path

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version
from tests.servers.processes import MirrorgateProcess, Reply, wait_for


@dataclass(frozen=True)
class Hostile:
    path: str
    reason: str
    """A fragment of the JSON `reason` the refusal must carry."""


NAME_215 = "a" * 215
HOSTILE = (
    Hostile("/npm/..", "may not start with a dot"),
    Hostile("/npm/../metrics", "may not start with a dot"),
    Hostile("/npm/%2e%2e", "may not start with a dot"),
    Hostile("/npm/%2E%2E/-/x.tgz", "may not start with a dot"),
    Hostile("/npm/%2e%2e/metrics", "may not start with a dot"),
    Hostile("/npm/@scope/..", "may not start with a dot"),
    Hostile("/npm/@..%2fgood", "may not start with a dot"),
    Hostile("/npm/%252e%252e", "percent-encoded twice"),
    Hostile("/npm/good%2fevil", "cannot hold a slash"),
    Hostile("/npm/good%2Fevil", "cannot hold a slash"),
    Hostile("/npm/..%2f..%2fetc%2fpasswd", "cannot hold a slash"),
    Hostile("/npm/good%5cevil", "backslash"),
    Hostile("/npm/good\\evil", "backslash"),
    Hostile("/npm/..\\..\\etc\\passwd", "backslash"),
    Hostile("/npm/good%00", "control character"),
    Hostile("/npm/good%0aevil", "control character"),
    Hostile("/npm/good%0d%0aSet-Cookie:%20x=1", "control character"),
    Hostile("/npm/good%7f", "control character"),
    Hostile("/npm/good%20evil", "control character"),
    Hostile(f"/npm/{NAME_215}", "215 characters"),
    Hostile(f"/npm/@scope/{'a' * 208}", "215 characters"),
    Hostile(f"/npm/{NAME_215}/-/{NAME_215}-1.0.0.tgz", "215 characters"),
    Hostile("/npm/@scope", "needs a package after the scope"),
    Hostile("/npm/@scope/", "package name is empty"),
    Hostile("/npm/@scope%2f", "package name is empty"),
    Hostile("/npm/@scope%2F/-/x-1.0.0.tgz", "package name is empty"),
    Hostile("/npm/@/good", "scope is empty"),
    Hostile("/npm/%C3%A9vil", "characters npm does not allow"),
    Hostile("/npm/%ff", "not valid UTF-8"),
    Hostile("/npm//good", "package name is empty"),
    Hostile("/npm/good/-/..%2f..%2fsecret.tgz", "slash, a backslash"),
    Hostile("/npm/good/-/good-1.0.0.tgz%00", "control character"),
    Hostile("/npm/good/-/%2e%2e%5csecret.tgz", "slash, a backslash"),
    Hostile("/npm/good/-/evil-1.0.0.tgz", "is not a tarball of good"),
)


def request(proxy: MirrorgateProcess, path: str, method: str = "GET") -> Reply:
    """Send `path` exactly as written (no normalisation, no re-encoding)."""
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def raw_request_line(proxy: MirrorgateProcess, target: bytes) -> bytes:
    host, port = proxy.env["MIRRORGATE_LISTEN"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def start_proxy(guarded: GuardedFactory, public: FixtureRegistry,
                private: FixtureRegistry | None = None) -> MirrorgateProcess:
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public.url}
    if private is not None:
        env["MIRRORGATE_PRIVATE_UPSTREAM"] = private.url
    return guarded("serve", env)


def refusal_problem(case: Hostile, reply: Reply) -> str | None:
    """Why `reply` is not a JSON 400 carrying the case's reason (None when it is)."""
    if reply.status != 400 or reply.headers.get("Content-Type") != "application/json":
        return f"{case.path!r}: {reply.status} {reply.body[:200]!r}"
    body = reply.json()
    if case.reason not in body.get("reason", ""):
        return f"{case.path!r}: reason {body.get('reason')!r} lacks {case.reason!r}"
    return None


def test_hostile_names_are_refused_with_400_and_a_json_reason_before_any_upstream_is_asked(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    public_registry.add(make_package("good", ["1.0.0"]))
    with serving(FixtureRegistry(make_package("good", ["1.0.0"])),
                 "the private fixture registry") as private:
        proxy = start_proxy(guarded, public_registry, private)

        problems = []
        for case in HOSTILE:
            for method in ("GET", "HEAD"):
                reply = request(proxy, case.path, method)
                guard.seen(reply, f"the answer to {method} {case.path[:60]}")
                if method == "HEAD":
                    if reply.status != 400:
                        problems.append(f"HEAD {case.path!r}: {reply.status}")
                elif (problem := refusal_problem(case, reply)) is not None:
                    problems.append(problem)

        assert problems == []
        assert public_registry.requests == []
        assert private.requests == []
    assert proxy.metric("mirrorgate_refusals_total", reason="bad_name") >= len(HOSTILE)
    assert proxy.returncode is None
    assert request(proxy, "/npm/good").status == 200


def test_valid_but_unknown_names_answer_404_with_a_json_reason_asked_upstream_canonically(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    proxy = start_proxy(guarded, public_registry)

    upper = request(proxy, "/npm/NoSuchThing")
    scoped = request(proxy, "/npm/@Scope%2FName")
    version = request(proxy, "/npm/NoSuchThing/1.0.0")
    tarball = request(proxy, "/npm/NoSuchThing/-/NoSuchThing-1.0.0.tgz")

    for reply in (upper, scoped, version, tarball):
        guard.seen(reply)
        assert reply.status == 404, reply.body[:200]
        assert reply.json()["reason"] == "not found"
    assert {seen.path for seen in public_registry.requests} == {"/NoSuchThing",
                                                                "/@Scope%2FName"}


def test_no_path_under_npm_reaches_the_health_routes_or_files_outside_the_store(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    proxy = start_proxy(guarded, public_registry)  # the private upstream is the file store
    outside = Path(proxy.env["MIRRORGATE_DATA_DIR"]) / "outside"
    planted = make_version("outside", "1.0.0")
    (outside / "tarballs").mkdir(parents=True)
    (outside / "versions").mkdir(parents=True)
    (outside / "tarballs" / planted.filename).write_bytes(planted.tarball)
    (outside / "versions" / "1.0.0.json").write_bytes(b'{"name": "outside"}')

    paths = ["/npm/..%2foutside", "/npm/%2e%2e%2foutside/-/outside-1.0.0.tgz",
             "/npm/%2e%2e/outside/-/outside-1.0.0.tgz", "/npm/..%5coutside",
             "/npm/%2e%2e/metrics", "/npm/..%2fmetrics", "/npm/%2e%2e/livez",
             "/npm/-/../metrics", "/npm/good/-/../../../metrics",
             "/npm/-/npm/v1/security/audits", "/npm/good/-/..", "/npm/good/a/b/c"]
    for path in paths:
        reply = request(proxy, path)
        guard.seen(reply, f"the answer to {path}")
        assert reply.status in (400, 404), f"{path}: {reply.status} {reply.body[:200]!r}"
        assert reply.headers["Content-Type"] == "application/json", path
        assert reply.json()["reason"], path
        assert planted.tarball not in reply.body
        assert b"mirrorgate_requests" not in reply.body
    assert public_registry.requests == []


def test_raw_control_characters_in_the_request_line_are_refused_and_logged_not_crashed_on(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
) -> None:
    proxy = start_proxy(guarded, public_registry)
    targets = [b"/npm/\x01good", b"/npm/go\x7fod", b"/npm/good\x00", b"/npm/\tgood",
               b"/npm/g\xc3\xa9", b"/npm/good\rSet-Cookie: x"]

    for target in targets:
        answer = raw_request_line(proxy, target)
        guard.seen(answer, f"the answer to {target!r}")
        assert answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")), answer[:200]

    wait_for(lambda: len(proxy.events("http_request_malformed")) >= len(targets), timeout=5,
             message="a line per refusal")
    lines = proxy.events("http_request_malformed")
    assert len(lines) == len(targets)
    assert all(line["status"] == 400 and line["reason"] for line in lines)
    assert "Traceback" not in proxy.stderr()
    assert proxy.metric("mirrorgate_refusals_total", reason="malformed_request") == len(targets)
    assert public_registry.requests == []
    assert request(proxy, "/npm/-/ping").status == 200
