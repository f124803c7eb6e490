"""A publish is streamed to the private upstream, never held whole, and abandoned mid-body when a
check fails.

The private upstream here is a small recording registry (not Verdaccio) because what is tested
is when bytes arrive and whether the request ever completed, which a real registry does not
show; the Verdaccio tests in tests/publish show what is stored.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

from mirrorgate.access.tokens import new_token, token_line
from mirrorgate.config import Secret
from mirrorgate.rules import parse_rules
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package
from tests.servers.ports import free_port

RULES = parse_rules('[publish]\nnames = ["@acme/*"]')
PUBLISHER = new_token()
ARRIVED = 32 * 1024
"""Bytes the private upstream must hold before the client sends the rest of its body."""


class RecordingRegistry:
    """Answers 404 to reads and 201 to a PUT it read to the end; records what arrived."""

    def __init__(self) -> None:
        self.received = 0
        self.arrived = asyncio.Event()
        self.completed: list[int] = []
        self.cut_off: list[int] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "PUT":
            return web.json_response({"error": "not found"}, status=404)
        self.received = 0
        try:
            async for chunk in request.content.iter_any():
                self.received += len(chunk)
                if self.received >= ARRIVED:
                    self.arrived.set()
        except (aiohttp.ClientPayloadError, ConnectionError):
            self.cut_off.append(self.received)
            raise
        self.completed.append(self.received)
        return web.json_response({"ok": "created new package", "success": True}, status=201)

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/"

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def document(tarball: bytes | None = None) -> bytes:
    """npm's publish document for a tarball of about 400 KiB, its `dist` declaring the real
    tarball's digests; `tarball` attaches other bytes under the same declaration."""
    version = make_package("@acme/streamed", ["1.0.0"]).version("1.0.0")
    declared = version.tarball + b"\0" * (400 * 1024)  # bytes after the gzip: npm never reads
    manifest = version.document("http://127.0.0.1:9/npm/")
    manifest["dist"]["integrity"] = "sha512-" + base64.b64encode(
        hashlib.sha512(declared).digest()).decode()
    manifest["dist"]["shasum"] = hashlib.sha1(declared).hexdigest()  # noqa: S324 - npm's
    attached = declared if tarball is None else tarball
    return json.dumps({
        "_id": "@acme/streamed", "name": "@acme/streamed",
        "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": manifest},
        "_attachments": {"@acme/streamed-1.0.0.tgz": {
            "content_type": "application/octet-stream",
            "data": base64.b64encode(attached).decode(), "length": len(attached)}},
    }).encode()


async def start(start_proxy: StartProxy, public: FixtureRegistry, tmp_path: Path,
                private: RecordingRegistry) -> str:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token_line('release-bot', PUBLISHER)} publish:@acme/*\n",
                      encoding="utf-8")
    await private.start()
    proxy = await start_proxy(public.url, private=private.url, rules=RULES,
                              client_tokens_file=tokens)
    return proxy.registry + "@acme%2fstreamed"


async def put(url: str, body: AsyncIterator[bytes]) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.put(
            url, data=body, headers={"Authorization": f"Bearer {PUBLISHER}",
                                     "Content-Type": "application/json"}) as response:
        return response.status, await response.json()


async def test_the_body_reaches_the_private_upstream_while_the_client_is_still_sending(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    private = RecordingRegistry()
    body = document()
    try:
        url = await start(start_proxy, public_registry, tmp_path, private)

        async def slowly() -> AsyncIterator[bytes]:
            yield body[:200 * 1024]
            # a proxy that read the whole body before forwarding it would never get here
            await asyncio.wait_for(private.arrived.wait(), timeout=10)
            yield body[200 * 1024:]

        status, answer = await put(url, slowly())
    finally:
        await private.close()

    assert (status, answer) == (201, {"ok": "created new package", "success": True})
    assert private.completed == [len(body)]


async def test_a_failed_check_abandons_the_upstream_request_before_its_end(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    # the attack: bytes other than the declared ones; the registry must never get a complete
    # document it could store
    private = RecordingRegistry()
    forged = document(tarball=b"\1" * (500 * 1024))
    try:
        url = await start(start_proxy, public_registry, tmp_path, private)

        async def whole() -> AsyncIterator[bytes]:
            for start_at in range(0, len(forged), 64 * 1024):
                yield forged[start_at:start_at + 64 * 1024]

        status, answer = await put(url, whole())
        await asyncio.sleep(0.2)  # the recording registry notices the cut connection
    finally:
        await private.close()

    assert status == 400
    assert "does not match its declared sha512" in str(answer["error"])
    assert private.completed == []
    [cut_at] = private.cut_off
    assert cut_at < len(forged)


class EchoingRegistry(RecordingRegistry):
    """Refuses a publish quoting the request's headers back, as some gateways' error pages do."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "PUT":
            return web.json_response({"error": "not found"}, status=404)
        await request.read()
        echoed = request.headers.get("Authorization", "")
        return web.json_response({"error": f"forbidden for {echoed}"}, status=403)


async def test_a_private_refusal_echoing_mirrorgates_token_never_reaches_the_client(
    public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path,
) -> None:
    # the refusal is quoted to the client; mirrorgate's own credential for the private registry
    # must not travel with it to whoever holds a publish token
    private = EchoingRegistry()
    secret = "private-registry-credential-" + "x" * 16
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token_line('release-bot', PUBLISHER)} publish:@acme/*\n",
                      encoding="utf-8")
    try:
        await private.start()
        proxy = await start_proxy(public_registry.url, private=private.url, rules=RULES,
                                  client_tokens_file=tokens, private_token=Secret(secret))

        async def whole() -> AsyncIterator[bytes]:
            yield document()

        status, answer = await put(proxy.registry + "@acme%2fstreamed", whole())
    finally:
        await private.close()

    assert status == 403
    assert answer["upstream"] == "private"
    assert "forbidden for Bearer" in str(answer["error"])
    assert secret not in json.dumps(answer)
