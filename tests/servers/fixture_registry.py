"""The fixture "public" npm registry: an aiohttp server, in its own thread, serving packages.

mirrorgate's public upstream in the tests. It answers the npm read protocol for the
`FixturePackage`s added to it and injects the faults the fault tests need. Decisions:

- It is a `ThreadedApp`: its own event loop in a background thread, started and stopped from
  plain code, so it keeps answering while a test blocks its own loop
  (`subprocess.run(["npm", ...])`, a sync HTTP call). Its port is chosen once, so `stop()` and
  `start()` bring it back on the same URL: the public upstream going down and coming back.
- Paths are matched after percent-decoding, so `/@s/n`, `/@s%2fn` and `/@s%2Fn` are the same
  package; what was actually requested is kept verbatim in `requests`.
- Packuments are rendered once per package and representation (full, or abbreviated when the
  Accept header asks for `application/vnd.npm.install-v1+json`) and carry an ETag;
  `If-None-Match` answers 304. `add()` (also while running) replaces a package and its cache.
- Faults are explicit and few: `fault(path, Fault(...))` makes requests under `path` (a path
  prefix on segment boundaries, or `exact=True`) answer a status, wait, send other bytes, send
  slowly, or cut the body short after a truthful Content-Length; `times` limits a fault to the
  next N requests. The newest matching fault wins. `clear_faults()` removes them all.
- Manners are how every answer travels (`Manners`, settable while running): gzip content coding
  on documents and tarballs (when the request accepts it, as Verdaccio and most registries do,
  or always, as a misbehaving cache does), chunked bodies without Content-Length, and bodies
  that trickle out in small pieces. The default is the common real-world one: gzip when
  accepted. A fault's answer is sent as the fault says, without manners.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.servers.packages import FixturePackage, tarball_path
from tests.servers.threaded import ThreadedApp

__all__ = ["ABBREVIATED", "Fault", "FixtureRegistry", "Manners", "SeenRequest"]

ABBREVIATED = "application/vnd.npm.install-v1+json"
JSON = "application/json"
OCTETS = "application/octet-stream"
_ATTESTATIONS = "-/npm/v1/attestations/"


@dataclass(frozen=True)
class Fault:
    """What to do instead of (or on the way to) the real answer.

    - `status`: answer this status, with `body` or a small JSON error, instead of the real one.
    - `headers`: added to whatever is answered (`Retry-After`...).
    - `delay`: seconds to wait before answering (a hang, when longer than the client waits).
    - `body`: answer these bytes instead of the real body (a tampered tarball, a changed or
      huge or deeply nested packument); status 200 unless `status` says otherwise.
    - `truncate_after`: send the full Content-Length, then only this many bytes, then close.
    - `chunk_size`/`chunk_delay`: send the body in chunks with a pause between (a slow body).
    - `times`: apply to the next N matching requests only, then answer normally.
    """

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes | None = None
    truncate_after: int | None = None
    chunk_size: int = 1024
    chunk_delay: float = 0.0
    times: int | None = None


@dataclass(frozen=True)
class Manners:
    """How every (non-fault) answer with a body travels.

    - `gzip`: `never`; `accepted` (the default): `Content-Encoding: gzip` on documents and
      tarballs over `gzip_above` bytes when the request's Accept-Encoding allows gzip, as
      Verdaccio (express `compression`) does; `always`: whatever the request asked for, as a
      misbehaving cache or CDN does.
    - `chunked`: no Content-Length, the body sent with chunked transfer coding.
    - `trickle`: seconds to wait between pieces of `piece` bytes (a slow, real-world link).
    """

    gzip: Literal["never", "accepted", "always"] = "accepted"
    gzip_above: int = 1024
    chunked: bool = False
    trickle: float = 0.0
    piece: int = 16 * 1024

    def codes(self, request: web.Request, body: bytes) -> bool:
        if self.gzip == "never" or len(body) <= self.gzip_above:
            return False
        if self.gzip == "always":
            return True
        return _accepts_gzip(request.headers.get("Accept-Encoding", ""))


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            quality = params.strip().removeprefix("q=")
            return not (params and quality.replace(".", "").strip("0") == "")
    return False


class SeenRequest(NamedTuple):
    """A request as received: the method, the raw path (query included) and the headers."""

    method: str
    path: str
    headers: CIMultiDictProxy[str]


@dataclass
class _Rule:
    path: str
    exact: bool
    fault: Fault
    remaining: int | None

    def matches(self, path: str) -> bool:
        if path == self.path:
            return True
        if self.exact:
            return False
        return path.startswith(self.path if self.path.endswith("/") else self.path + "/")


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha1(body, usedforsecurity=False).hexdigest() + '"'


def _not_modified(request: web.Request, etag: str) -> bool:
    wanted = request.headers.get("If-None-Match")
    if not wanted:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in wanted.split(",")}
    return etag in tags or "*" in tags


def _error(status: int, message: str) -> _Answer:
    return _Answer(status, {"Content-Type": JSON}, orjson.dumps({"error": message}))


class FixtureRegistry(ThreadedApp):
    """An npm registry for tests, on 127.0.0.1, serving `FixturePackage`s. Use `start()` and
    `stop()` (or `with FixtureRegistry() as registry:`); both are plain, blocking calls, and a
    request held in a `delay` is cancelled by `stop()`."""

    def __init__(self, *packages: FixturePackage, host: str = "127.0.0.1",
                 port: int | None = None, manners: Manners | None = None) -> None:
        super().__init__(self._build, host=host, port=port, name="fixture-registry")
        self.manners = manners or Manners()
        """How answers travel; assign a new `Manners` at any time."""
        self._lock = threading.Lock()
        self._packages: dict[str, FixturePackage] = {}
        self._rendered: dict[tuple[str, bool], tuple[bytes, str]] = {}
        self._rules: list[_Rule] = []
        self._requests: list[SeenRequest] = []
        self._attestations: dict[str, bytes] = {}
        self.add(*packages)

    # -- what tests use ------------------------------------------------------------------

    def add(self, *packages: FixturePackage) -> None:
        """Serve these packages (replacing any of the same name), also while running."""
        with self._lock:
            for package in packages:
                self._packages[package.name] = package
                self._rendered.pop((package.name, False), None)
                self._rendered.pop((package.name, True), None)

    def remove(self, name: str) -> None:
        with self._lock:
            self._packages.pop(name, None)
            self._rendered.pop((name, False), None)
            self._rendered.pop((name, True), None)

    def package(self, name: str) -> FixturePackage:
        with self._lock:
            return self._packages[name]

    def packument(self, name: str, abbreviated: bool = False) -> dict[str, Any]:
        """The document this registry serves for `name`, parsed (for expectations)."""
        body, _etag = self._render(name, abbreviated)
        document: dict[str, Any] = orjson.loads(body)
        return document

    def tarball_url(self, name: str, version: str) -> str:
        return self.url.rstrip("/") + tarball_path(name, version)

    @property
    def requests(self) -> list[SeenRequest]:
        """A snapshot of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def attest(self, name: str, version: str, document: Mapping[str, Any]) -> None:
        """Serve `document` as `name@version`'s attestations document, at npm's
        `/-/npm/v1/attestations/<name>@<version>` (`tests.servers.attestations`)."""
        with self._lock:
            self._attestations[f"{name}@{version}"] = orjson.dumps(document)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def fault(self, path: str, fault: Fault, *, exact: bool = False) -> None:
        """Apply `fault` to requests for `path` (decoded or not: `/@s%2fn` is `/@s/n`) and,
        unless `exact`, everything under it (`/alpha` covers `/alpha/-/alpha-1.0.0.tgz`,
        not `/alphabet`)."""
        with self._lock:
            self._rules.append(_Rule(unquote(path), exact, fault, fault.times))

    def clear_faults(self) -> None:
        with self._lock:
            self._rules.clear()

    def _build(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    # -- the protocol --------------------------------------------------------------------

    def _render(self, name: str, abbreviated: bool) -> tuple[bytes, str]:
        with self._lock:
            cached = self._rendered.get((name, abbreviated))
            package = self._packages[name]
        if cached is not None:
            return cached
        document = package.abbreviated(self.url) if abbreviated else package.packument(self.url)
        body = orjson.dumps(document)
        rendered = (body, _etag(body))
        with self._lock:
            if self._packages.get(name) is package:
                self._rendered[(name, abbreviated)] = rendered
        return rendered

    def _lookup(self, name: str) -> FixturePackage | None:
        with self._lock:
            return self._packages.get(name)

    def _answer(self, request: web.Request, path: str) -> _Answer:
        if request.method not in ("GET", "HEAD"):
            return _error(405, f"{request.method} is not supported by the fixture registry")
        if path == "/-/ping":
            return _Answer(200, {"Content-Type": JSON}, b"{}")
        rest = path.lstrip("/")
        if rest.startswith(_ATTESTATIONS):
            with self._lock:
                document = self._attestations.get(rest[len(_ATTESTATIONS):])
            if document is None:
                return _error(404, "Not found")
            return _Answer(200, {"Content-Type": JSON}, document)
        if "/-/" in rest:
            name, filename = rest.split("/-/", 1)
            return self._tarball(request, name, filename)
        parts = rest.split("/")
        cut = 2 if rest.startswith("@") else 1
        name, remainder = "/".join(parts[:cut]), parts[cut:]
        package = self._lookup(name)
        if package is None or len(remainder) > 1:
            return _error(404, "Not found")
        if remainder:
            return self._version(package, remainder[0])
        abbreviated = ABBREVIATED in request.headers.get("Accept", "")
        body, etag = self._render(name, abbreviated)
        headers = {"Content-Type": ABBREVIATED if abbreviated else JSON, "ETag": etag,
                   "Vary": "Accept"}
        if _not_modified(request, etag):
            return _Answer(304, headers, b"")
        return _Answer(200, headers, body)

    def _version(self, package: FixturePackage, wanted: str) -> _Answer:
        version = package.versions.get(package.dist_tags.get(wanted, wanted))
        if version is None:
            return _error(404, "version not found")
        return _Answer(200, {"Content-Type": JSON}, orjson.dumps(version.document(self.url)))

    def _tarball(self, request: web.Request, name: str, filename: str) -> _Answer:
        package = self._lookup(name)
        version = package.by_filename(filename) if package is not None else None
        if version is None:
            return _error(404, "Not found")
        body = version.tarball
        etag = _etag(body)
        headers = {"Content-Type": OCTETS, "ETag": etag}
        if _not_modified(request, etag):
            return _Answer(304, headers, b"")
        return _Answer(200, headers, body)

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for rule in reversed(self._rules):
                if not rule.matches(path):
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                return rule.fault
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = unquote(request.raw_path.split("?", 1)[0])
        with self._lock:
            self._requests.append(SeenRequest(request.method, request.raw_path,
                                              CIMultiDictProxy(CIMultiDict(request.headers))))
        fault = self._take_fault(path)
        if fault is not None and fault.delay > 0:
            await asyncio.sleep(fault.delay)
        answer = self._answer(request, path)
        if fault is None:
            return await self._mannered(request, answer, self.manners)
        return await self._faulty(request, answer, fault)

    async def _mannered(self, request: web.Request, answer: _Answer,
                        manners: Manners) -> web.StreamResponse:
        headers, body = dict(answer.headers), answer.body
        if answer.status == 200 and manners.codes(request, body):
            # gzip mtime 0: the same coded bytes every time, as a cache would store them
            body = gzip.compress(body, mtime=0)
            headers["Content-Encoding"] = "gzip"
            headers["Vary"] = ", ".join(filter(None, [headers.get("Vary"), "Accept-Encoding"]))
        if not manners.chunked and manners.trickle <= 0:
            return web.Response(status=answer.status, headers=headers, body=body)
        response = web.StreamResponse(status=answer.status, headers=headers)
        if manners.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = len(body)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        step = max(1, manners.piece)
        for start in range(0, len(body), step):
            await response.write(body[start:start + step])
            if manners.trickle > 0:
                await asyncio.sleep(manners.trickle)
        await response.write_eof()
        return response

    async def _faulty(self, request: web.Request, answer: _Answer,
                      fault: Fault) -> web.StreamResponse:
        status, headers, body = answer.status, dict(answer.headers), answer.body
        if fault.status is not None:
            status = fault.status
            headers = {"Content-Type": JSON}
            body = orjson.dumps({"error": f"fault injected: status {status}"})
        if fault.body is not None:
            if fault.status is None:
                status = 200
            headers.pop("ETag", None)
            headers.setdefault("Content-Type", OCTETS)
            body = fault.body
        headers.update(fault.headers)
        if fault.truncate_after is None and fault.chunk_delay <= 0:
            return web.Response(status=status, headers=headers, body=body)
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = len(body)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        limit = len(body) if fault.truncate_after is None else min(fault.truncate_after,
                                                                   len(body))
        step = max(1, fault.chunk_size)
        for start in range(0, limit, step):
            await response.write(body[start:min(start + step, limit)])
            if fault.chunk_delay > 0:
                await asyncio.sleep(fault.chunk_delay)
        if limit < len(body) and request.transport is not None:
            request.transport.close()
        return response
