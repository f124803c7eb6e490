"""A generated public registry for bursts: many packages of many versions, served cheaply.

Row 13 pulls 50,000 distinct versions. The fixture registry would build a real tarball per
version and a `FixtureVersion` object each; this registry generates instead:

- packages `bulk-000`, `bulk-001`... each with versions `1.0.0`, `1.0.1`..., every version's
  `dist` pointing at this registry, with the integrity of one shared tarball (a real gzip'd tar,
  so the bytes are a real package; mirrorgate's serve path streams bytes and never verifies);
- each packument rendered once per base URL and served with an ETag (304 on a match);
- request counts kept by kind, so a test can tell how often mirrorgate came back.

It is a `ThreadedApp`: started, stopped and restarted like the fixture registry.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from functools import cached_property

import orjson
from aiohttp import web

from tests.servers.packages import make_version
from tests.servers.threaded import ThreadedApp
from tests.sri import sri

__all__ = ["BulkRegistry"]

JSON = "application/json"


class BulkRegistry(ThreadedApp):
    def __init__(self, packages: int, versions: int) -> None:
        super().__init__(self._build, name="bulk-registry")
        self.names = [f"bulk-{index:03d}" for index in range(packages)]
        self.versions = [f"1.0.{index}" for index in range(versions)]
        self._known = set(self.names)
        self._rendered: dict[tuple[str, str], tuple[bytes, str]] = {}
        self._lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    @cached_property
    def tarball(self) -> bytes:
        return make_version("bulk", "1.0.0").tarball

    @cached_property
    def integrity(self) -> str:
        return sri("sha512", self.tarball)

    def tarball_paths(self) -> list[str]:
        """Every version's tarball path, package by package in turn (`bulk-000@1.0.0`,
        `bulk-001@1.0.0`...), so every packument is asked for within the first requests."""
        return [f"/{name}/-/{name}-{version}.tgz"
                for version in self.versions for name in self.names]

    def packument(self, name: str, base: str) -> bytes:
        key = (name, base)
        with self._lock:
            rendered = self._rendered.get(key)
        if rendered is None:
            shasum = hashlib.sha1(self.tarball, usedforsecurity=False).hexdigest()
            versions = {
                version: {"name": name, "version": version,
                          "dist": {"tarball": f"{base}{name}/-/{name}-{version}.tgz",
                                   "integrity": self.integrity, "shasum": shasum}}
                for version in self.versions}
            body = orjson.dumps({
                "_id": name, "name": name, "dist-tags": {"latest": self.versions[-1]},
                "versions": versions,
                "time": dict.fromkeys(self.versions, "2020-01-01T00:00:00.000Z"),
            })
            rendered = (body, '"' + hashlib.sha1(body, usedforsecurity=False).hexdigest() + '"')
            with self._lock:
                self._rendered[key] = rendered
        return rendered[0]

    def _build(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{name}", self._packument)
        app.router.add_get("/{name}/-/{file}", self._tarball)
        return app

    async def _packument(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in self._known:
            self.seen["missing"] += 1
            return web.Response(status=404, body=b'{"error":"Not found"}', content_type=JSON)
        self.seen["packument"] += 1
        body = self.packument(name, f"http://{request.host}/")
        etag = self._rendered[(name, f"http://{request.host}/")][1]
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(body=body, headers={"Content-Type": JSON, "ETag": etag})

    async def _tarball(self, request: web.Request) -> web.StreamResponse:
        self.seen["tarball"] += 1
        return web.Response(body=self.tarball, content_type="application/octet-stream")
