"""The warm path's answers (`serve.warm`) on the wire: the very bytes aiohttp's `web.Response`
writes on the slow path for the same request, whatever its shape (coding, 304, HEAD, HTTP
version, keep-alive or close), and the same connection handling after them."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest
from aiohttp import web

from mirrorgate.access.tokens import ClientTokens
from mirrorgate.serve.app import answer_warm_first, build_proxy_app
from mirrorgate.serve.warm import PLAIN, WarmAnswer, raw_message
from tests.serve.rig import NPM_ACCEPT, RunningProxy, StartProxy, policy_tokens
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, realistic_package
from tests.servers.ports import free_port

_DATE = re.compile(rb"\r\nDate: ([A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT)\r\n")
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: (\d+)\r\n")


class Connection:
    """One raw HTTP connection: requests written as given, answers read whole (by their
    Content-Length; none for a HEAD or a 304)."""

    def __init__(self, authority: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.authority, self.reader, self.writer = authority, reader, writer

    @classmethod
    async def to(cls, proxy: RunningProxy) -> Connection:
        authority = proxy.url.split("/")[2]
        host, port = authority.split(":")
        return cls(authority, *await asyncio.open_connection(host, int(port)))

    def send(self, head: str) -> None:
        """`head` with this connection's Host after its request line."""
        line, rest = head.split("\r\n", 1)
        self.writer.write(f"{line}\r\nHost: {self.authority}\r\n{rest}".encode())

    async def ask(self, head: str | None, *, bodiless: bool = False) -> bytes:
        if head is not None:
            self.send(head)
        answer = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        length = _LENGTH.search(answer)
        if length is not None and not bodiless:
            answer += await asyncio.wait_for(self.reader.readexactly(int(length.group(1))), 10)
        return answer

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), 10) == b""

    def close(self) -> None:
        self.writer.close()


def without_date(answer: bytes) -> bytes:
    """The answer with its Date's value blanked (it may move a second between two answers),
    once it is checked to be there in aiohttp's format."""
    found = _DATE.search(answer)
    assert found is not None, answer[:400]
    return answer[:found.start(1)] + b"-" + answer[found.end(1):]


def warm_hits(proxy: RunningProxy) -> float:
    return proxy.metric("mirrorgate_request_seconds_count", route="packument", path="warm")


async def slow_then_warm(proxy: RunningProxy, head: str, *, bodiless: bool = False,
                         ttl: float = 60.0) -> tuple[bytes, bytes]:
    """`head` answered by the slow path (the entry past its TTL: revalidated, answered by
    `web.Response`), then again by the warm path, each on a connection of its own."""
    proxy.clock.advance(ttl + 1)
    answers, hits = [], []
    for _ in range(2):
        before = warm_hits(proxy)
        connection = await Connection.to(proxy)
        answers.append(await connection.ask(head, bodiless=bodiless))
        connection.close()
        hits.append(warm_hits(proxy) - before)
    assert hits == [0, 1], "the first is answered by the slow path, the second warm"
    return answers[0], answers[1]


def get(name: str, *, method: str = "GET", version: str = "1.1", **headers: str) -> str:
    lines = [f"{method} /npm/{name} HTTP/{version}", f"Accept: {NPM_ACCEPT}",
             *(f"{key.replace('_', '-')}: {value}" for key, value in headers.items())]
    return "\r\n".join(lines) + "\r\n\r\n"


@pytest.fixture
async def warm_proxy(public_registry: FixtureRegistry, start_proxy: StartProxy) -> RunningProxy:
    public_registry.add(realistic_package("warm-bytes"), make_package("warm-small"))
    proxy = await start_proxy(public_registry.url)
    for name in ("warm-bytes", "warm-small"):
        assert (await proxy.get(f"npm/{name}", Accept=NPM_ACCEPT)).status == 200
    return proxy


@pytest.mark.parametrize("headers", [
    {"Accept_Encoding": "gzip, deflate"},
    {"Accept_Encoding": "identity"},
    {},
], ids=["gzip", "identity", "no-coding"])
@pytest.mark.parametrize("name", ["warm-bytes", "warm-small"])
async def test_a_warm_200_is_the_slow_paths_bytes(
    warm_proxy: RunningProxy, name: str, headers: dict[str, str],
) -> None:
    slow, warm = await slow_then_warm(warm_proxy, get(name, **headers))

    assert slow.startswith(b"HTTP/1.1 200 OK\r\n")
    assert without_date(warm) == without_date(slow)
    # the control: the coding asked is the coding answered
    assert (b"\r\nContent-Encoding: gzip\r\n" in warm) == ("gzip" in str(headers))


@pytest.mark.parametrize("coding", ["gzip", "identity"])
async def test_a_warm_304_is_the_slow_paths_bytes(warm_proxy: RunningProxy, coding: str) -> None:
    etag = (await warm_proxy.get("npm/warm-bytes", Accept=NPM_ACCEPT)).headers["ETag"]

    slow, warm = await slow_then_warm(
        warm_proxy, get("warm-bytes", Accept_Encoding=coding, If_None_Match=etag),
        bodiless=True)
    _, plain = await slow_then_warm(warm_proxy, get("warm-bytes", Accept_Encoding=coding,
                                                    If_None_Match='W/"another"'))

    assert slow.startswith(b"HTTP/1.1 304 Not Modified\r\n")
    assert without_date(warm) == without_date(slow)
    assert b"Content-Length" not in warm
    assert warm.endswith(b"\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 200 OK\r\n")  # an ETag that does not match: the body


@pytest.mark.parametrize("coding", ["gzip", "identity"])
async def test_a_warm_head_is_the_slow_paths_head_and_sends_no_body(
    warm_proxy: RunningProxy, coding: str,
) -> None:
    slow, warm = await slow_then_warm(
        warm_proxy, get("warm-bytes", method="HEAD", Accept_Encoding=coding), bodiless=True)
    connection = await Connection.to(warm_proxy)
    head = await connection.ask(get("warm-bytes", method="HEAD", Accept_Encoding=coding),
                                bodiless=True)
    # the next answer on the connection begins right after the head: no body was sent
    after = await connection.ask(get("warm-small", Accept_Encoding=coding))
    connection.close()

    assert without_date(warm) == without_date(slow) == without_date(head)
    assert int(_LENGTH.search(warm).group(1)) > 1000  # type: ignore[union-attr]
    assert after.startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize(("version", "connection", "kept"), [
    ("1.1", "close", False),
    ("1.0", None, False),
    ("1.0", "keep-alive", True),
    ("1.1", "keep-alive", True),
])
async def test_keep_alive_and_close_are_answered_and_honoured_as_on_the_slow_path(
    warm_proxy: RunningProxy, version: str, connection: str | None, kept: bool,
) -> None:
    headers = {"Accept_Encoding": "gzip"} | ({"Connection": connection} if connection else {})
    head = get("warm-bytes", version=version, **headers)
    slow, warm = await slow_then_warm(warm_proxy, head)
    open_after = []
    for slow_path in (True, False):
        if slow_path:
            warm_proxy.clock.advance(61)
        client = await Connection.to(warm_proxy)
        await client.ask(head)
        if kept:  # a second request on the same connection is answered
            again = await client.ask(head)
            open_after.append(again.startswith(f"HTTP/{version} 200".encode()))
        else:
            open_after.append(not await client.closed_by_server())
        client.close()

    assert slow.startswith(f"HTTP/{version} 200 OK\r\n".encode())
    assert without_date(warm) == without_date(slow)
    assert open_after == [kept, kept]


async def test_pipelined_warm_requests_are_answered_in_order(warm_proxy: RunningProxy) -> None:
    connection = await Connection.to(warm_proxy)
    names = ["warm-small", "warm-bytes", "warm-small"]
    for name in names:  # all sent before the first answer is read
        connection.send(get(name, Accept_Encoding="identity"))
    answers = [await connection.ask(None) for _ in names]
    connection.close()

    single = [await warm_proxy.request("GET", f"npm/{name}", decompress=False,
                                       headers={"Accept": NPM_ACCEPT,
                                                "Accept-Encoding": "identity"})
              for name in names]
    assert [answer.split(b"\r\n\r\n", 1)[1] for answer in answers] == [
        reply.body for reply in single]


async def test_a_warm_answer_behind_client_tokens_is_the_slow_paths_bytes(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    # the access middleware runs around the warm path: a client's token is still checked
    # (the attack: a warm packument read without one), and its answer is the same bytes
    public_registry.add(realistic_package("warm-guarded"))
    tokens = policy_tokens(tmp_path / "tokens", builds=None)
    proxy = await start_proxy(public_registry.url, client_tokens_file=tmp_path / "tokens")
    head = get("warm-guarded", Accept_Encoding="gzip", Authorization=tokens["builds"])
    connection = await Connection.to(proxy)
    await connection.ask(head)
    connection.close()

    slow, warm = await slow_then_warm(proxy, head)
    refused = await Connection.to(proxy)
    anonymous = await refused.ask(get("warm-guarded", Accept_Encoding="gzip"))
    refused.close()

    assert without_date(warm) == without_date(slow)
    assert warm.startswith(b"HTTP/1.1 200 OK\r\n")
    assert anonymous.startswith(b"HTTP/1.1 401 ")


async def test_the_parsed_message_holds_what_aiohttps_request_properties_read() -> None:
    # the warm path reads the request line, headers and keep-alive from aiohttp's parsed
    # message (`raw_message`, a private field): this fails first if aiohttp moves them
    seen: list[tuple[bool, ...]] = []

    async def handler(request: web.Request) -> web.Response:
        for read in (request, request.clone(method="HEAD", headers={"Accept": "x/y"})):
            message = raw_message(read)
            seen.append((message.method == read.method, message.path == read.raw_path,
                         message.headers is read.headers, message.version == read.version,
                         (not message.should_close) == read.keep_alive))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        for head in ("GET /npm/a%2fb?write=1 HTTP/1.1\r\nHost: h\r\n\r\n",
                     "HEAD /npm/x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                     "GET /npm/x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head.encode())
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            writer.close()
    finally:
        await runner.cleanup()

    assert len(seen) == 6
    assert set(seen) == {(True,) * 5}


async def test_a_warm_answer_reads_as_a_response_to_what_runs_around_it(
    warm_proxy: RunningProxy,
) -> None:
    # middlewares (access, tracing) read a response's status and its own mapping; aiohttp's
    # server reads keep_alive after writing it
    entry = warm_proxy.server.packuments.cache.peek("warm-small")
    assert entry is not None
    rendered = next(iter(entry.value.renderings.values()))
    answer = WarmAnswer(rendered, PLAIN)

    assert (answer.status, answer.reason, answer.keep_alive) == (200, "OK", None)
    assert answer.get("mirrorgate_outcome", "absent") == "absent"
    assert dict(answer.headers) == dict(rendered.headers)
    assert not answer.prepared


async def test_warm_hits_are_answered_before_routing_only_where_no_middleware_must_see_them(
    warm_proxy: RunningProxy, tmp_path: Path,
) -> None:
    # the attack: a tokens file configured, and a warm packument answered before the access
    # middleware asked for a token; the control: an open proxy's warm hits skip the router
    policy_tokens(tmp_path / "tokens", builds=None)
    guarded = dataclasses.replace(warm_proxy.proxy, clients=ClientTokens(tmp_path / "tokens"))
    installed = {}
    for label, proxy in (("open", warm_proxy.proxy), ("tokens", guarded)):
        app = build_proxy_app(proxy, clock=warm_proxy.clock)
        # a warm answer is written whole, without the signal: none may be connected
        assert not app.on_response_prepare
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        assert runner.server is not None
        routed = runner.server.request_handler
        answer_warm_first(runner)
        installed[label] = runner.server.request_handler is not routed
        await runner.cleanup()

    assert installed == {"open": True, "tokens": False}


async def test_a_warm_request_that_expects_a_continue_is_routed_and_gets_it(
    warm_proxy: RunningProxy,
) -> None:
    # aiohttp's application answers `Expect` (a 100 Continue first); the warm path must not
    # answer such a request before it
    connection = await Connection.to(warm_proxy)
    connection.send(get("warm-small", Accept_Encoding="identity", Expect="100-continue"))
    interim = await asyncio.wait_for(connection.reader.readuntil(b"\r\n\r\n"), 10)
    answer = await connection.ask(None)
    plain = await connection.ask(get("warm-small", Accept_Encoding="identity"))
    connection.close()

    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert without_date(answer) == without_date(plain)


async def test_only_http_1_1_kept_alive_heads_are_kept_beside_a_rendering(
    warm_proxy: RunningProxy,
) -> None:
    # the attack: a client cycling its HTTP version and Connection to grow what each cached
    # rendering holds; the control: the heads of what clients send are kept
    for version, connection in (("1.0", None), ("1.0", "keep-alive"), ("1.1", "close"),
                                ("1.1", None)):
        for method in ("GET", "HEAD"):
            client = await Connection.to(warm_proxy)
            answer = await client.ask(
                get("warm-small", method=method, version=version, Accept_Encoding="gzip",
                    **({"Connection": connection} if connection else {})),
                bodiless=method == "HEAD")
            client.close()
            assert answer.startswith(f"HTTP/{version} 200 OK\r\n".encode())
    entry = warm_proxy.server.packuments.cache.peek("warm-small")
    assert entry is not None

    kept = {shape for rendered in entry.value.renderings.values() for shape in rendered.wire}
    assert kept == {("gzip", (1, 1), True, True), ("gzip", (1, 1), True, False)}


async def test_a_request_found_cold_before_routing_is_not_looked_up_warm_again(
    warm_proxy: RunningProxy, public_registry: FixtureRegistry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    public_registry.add(make_package("cold-once"))
    server = warm_proxy.server
    looked: list[str] = []
    warm = server.warm

    def counted(request: web.BaseRequest, started: float) -> WarmAnswer | None:
        looked.append(raw_message(request).path)
        return warm(request, started)

    monkeypatch.setattr(server, "warm", counted)
    cold = await warm_proxy.get("npm/cold-once", Accept=NPM_ACCEPT)
    tarball = await warm_proxy.get("npm/cold-once/-/cold-once-1.0.0.tgz")
    # the control: a request not looked at before routing (`Expect`) is looked at once, routed
    expecting = await warm_proxy.get("npm/cold-once", Accept=NPM_ACCEPT,
                                     Expect="100-continue")

    assert (cold.status, tarball.status, expecting.status) == (200, 200, 200)
    assert looked == ["/npm/cold-once", "/npm/cold-once/-/cold-once-1.0.0.tgz",
                      "/npm/cold-once"]
