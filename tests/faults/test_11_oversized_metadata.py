"""Row 11 of the faults table: oversized or deep metadata.

> | 11 | oversized or deep metadata: a 64 MiB packument, JSON nested 10,000 deep, 200,000 versions
> | refused with 502 and a reason before the process's memory grows past the cap; no crash |

A hand-written upstream (`hostile_upstream`) plays the public registry and serves each hostile
document: 64 MiB declared in Content-Length, 64 MiB sent chunked with no length (so the cap
must hold while reading), a gzip bomb (64 KiB on the wire, 64 MiB once inflated), arrays nested
10,000 deep, 200,000 versions in 9 MB (under the byte cap, so the version bound refuses it),
and 8 MiB of `[{},{},...]`, a document small on the wire whose parse would cost 24 times its
size (so the bound on JSON values refuses it).

The cap: `MIRRORGATE_MAX_METADATA_BYTES` (32 MiB, the default) for bytes read, and for the
process, the memory the deployment budgets for one packument (the deploy tests'
`METADATA_COPIES`: five times the byte cap, the body plus its parsed objects). Each case resets
the process's peak RSS (`/proc/<pid>/clear_refs`), sends the request, and records the RSS
before, the peak during and the RSS after; the figures are printed (pytest -s). A document
refused while reading may grow the process by no more than the byte cap (plus slack); one
under the cap, which is parsed before its versions are counted, by no more than the budget.
"""

from __future__ import annotations

import contextlib
import gzip
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cache

import orjson
import pytest
from aiohttp import web

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.faults.memory import MIB, mib, reset_peak, rss
from tests.servers.availability import serving
from tests.servers.packages import make_package
from tests.servers.processes import MirrorgateProcess, Reply, http_request
from tests.servers.threaded import ThreadedApp

METADATA_CAP = 32 * MIB
"""MIRRORGATE_MAX_METADATA_BYTES's default, which these runs keep."""
BUDGET = 5 * METADATA_CAP
"""The memory the deployment sizing allows for one packument being read and parsed."""
HUGE = 64 * MIB
BLOCK = b" " * MIB
SMALL = make_package("small", ["1.0.0"])


async def _declared(request: web.Request) -> web.StreamResponse:
    return await _stream(request, length=HUGE)


async def _chunked(request: web.Request) -> web.StreamResponse:
    return await _stream(request, length=None)


async def _stream(request: web.Request, length: int | None) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    if length is not None:
        response.content_length = length
    await response.prepare(request)
    # mirrorgate hangs up once it has read enough: that is the point, not a failure
    with contextlib.suppress(ConnectionError):
        await response.write(b'{"name":"huge","readme":"')
        for _ in range(HUGE // MIB):
            await response.write(BLOCK)
    return response


@cache
def _bomb() -> bytes:
    inflated = b'{"name":"bomb","readme":"' + b" " * HUGE + b'"}'
    return gzip.compress(inflated, compresslevel=9)


def _deep() -> bytes:
    return b'{"name":"deep","versions":' + b"[" * 10_000 + b"]" * 10_000 + b"}"


@cache
def _many() -> bytes:
    versions = {f"{i // 10_000}.{i // 100 % 100}.{i % 100}": {"name": "many"}
                for i in range(200_000)}
    return orjson.dumps({"name": "many", "versions": versions})


@cache
def _dense() -> bytes:
    return b'{"name":"dense","versions":{},"x":[' + b",".join([b"{}"] * (8 * MIB // 3)) + b"]}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _fixed(body: Callable[[], bytes], **headers: str) -> Handler:
    async def handler(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=body(), headers={"Content-Type": "application/json",
                                                  **headers})
    return handler


async def _small(request: web.Request) -> web.StreamResponse:
    document = SMALL.packument(f"http://{request.host}/")
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def _build() -> web.Application:
    app = web.Application()
    app.router.add_get("/declared", _declared)
    app.router.add_get("/chunked", _chunked)
    app.router.add_get("/bomb", _fixed(_bomb, **{"Content-Encoding": "gzip"}))
    app.router.add_get("/deep", _fixed(_deep))
    app.router.add_get("/many", _fixed(_many))
    app.router.add_get("/dense", _fixed(_dense))
    app.router.add_get("/small", _small)
    return app


@pytest.fixture
def hostile_upstream() -> Iterator[ThreadedApp]:
    with serving(ThreadedApp(_build, name="hostile-upstream"), "the hostile upstream") as app:
        yield app


@dataclass(frozen=True)
class Case:
    path: str
    kind: str
    """The failure kind mirrorgate reports (`kind` in the body)."""
    says: str
    """A fragment of the error sentence."""
    grows_at_most: int
    """The most the process's RSS may grow: what is read before the refusal, plus slack."""


READ = METADATA_CAP + 16 * MIB
"""Refused while reading: at most the cap's worth of bytes was held."""
CASES = {
    "64MiB-declared": Case("declared", "too-large", "limit is 33554432", 16 * MIB),
    "64MiB-chunked": Case("chunked", "too-large", "exceeds 33554432 bytes", READ),
    "64MiB-gzip-bomb": Case("bomb", "too-large", "exceeds 33554432 bytes", READ),
    "nested-10000-deep": Case("deep", "invalid", "not usable JSON", 16 * MIB),
    "200000-versions": Case("many", "too-many-versions", "lists 200000 versions", BUDGET),
    "dense-8MiB": Case("dense", "too-large", "JSON values", READ),
}


def get(proxy: MirrorgateProcess, path: str) -> Reply:
    return http_request("GET", proxy.registry_url + path, timeout=60)


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_metadata_is_refused_with_502_and_a_reason_within_the_memory_budget(
    case: str, guarded: GuardedFactory, guard: SecretGuard, hostile_upstream: ThreadedApp,
) -> None:
    expected = CASES[case]
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": hostile_upstream.url})
    assert get(proxy, "small").status == 200  # warm: imports and pools in place
    before = rss(proxy.pid)
    reset_peak(proxy.pid)

    started = time.monotonic()
    reply = get(proxy, expected.path)
    took = time.monotonic() - started
    after = rss(proxy.pid)
    guard.seen(reply)

    print(f"\nrow 11 {case}: {reply.status} in {took:.2f} s; RSS before {mib(before.current)}, "
          f"peak {mib(after.peak)} (+{mib(after.peak - before.current)}), "
          f"after {mib(after.current)}")
    assert reply.status == 502, reply.body[:300]
    body = reply.json()
    assert body["reason"]
    assert expected.says in body["error"]
    if expected.kind != "too-many-versions":
        assert body["kind"] == expected.kind
    assert after.peak - before.current < expected.grows_at_most, (
        f"the process grew by {mib(after.peak - before.current)} refusing {case}")
    assert proxy.returncode is None
    assert get(proxy, "small").status == 200
    assert proxy.get("livez").status == 200


def test_each_refusal_is_counted_and_logged_and_the_process_keeps_serving(
    guarded: GuardedFactory, guard: SecretGuard, hostile_upstream: ThreadedApp,
) -> None:
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": hostile_upstream.url})
    for expected in CASES.values():
        reply = get(proxy, expected.path)
        guard.seen(reply)
        assert reply.status == 502

    assert proxy.metric("mirrorgate_requests_total", route="packument", status="502") == len(
        CASES)
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason="too-large") == 4
    assert proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                        reason="invalid") == 1
    assert proxy.metric("mirrorgate_refusals_total", reason="too_many_versions") == 1
    failed = {line["package"]: line["kind"] for line in proxy.events("upstream_failed")}
    assert failed == {"declared": "too-large", "chunked": "too-large", "bomb": "too-large",
                      "deep": "invalid", "dense": "too-large"}
    [refused] = proxy.events("packument_refused")
    assert refused["package"] == "many"
    assert get(proxy, "small").status == 200
    assert proxy.returncode is None
