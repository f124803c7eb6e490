"""The packument routes, `GET|HEAD /npm/<name>`, `/npm/<name>/<version>` and dist-tags: the
gate's cached entry, rendered once per (form, base URL) and answered as npm reads it.

The warm path (`app.ProxyServer.npm`) answers a fresh rendering before anything runs; this is
the slow path behind it, and the one place a packument is rendered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from aiohttp import web
from multidict import CIMultiDictProxy

from mirrorgate.gate import (
    Cached,
    Gated,
    PackumentEntry,
    Rendered,
    RenderKey,
)
from mirrorgate.gate.assembled import Gate
from mirrorgate.gate.packuments.entry import MAX_BASES, build_rendered, rendered_body
from mirrorgate.gate.refusals import Refusal
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.negotiation import Memo, accepts_gzip
from mirrorgate.npm.packument import FULL, on_base
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules.wayout import exception_how
from mirrorgate.serve.access import policy_of
from mirrorgate.serve.refusals import Refused, json_response
from mirrorgate.serve.warm import GZIPPED, NOT_MODIFIED, kind_of

__all__ = ["PackumentRoute"]

log = structlog.get_logger("mirrorgate.serve")


class PackumentRoute:
    """Packuments, version documents and dist-tags from the gate's cache. `key` is a request's
    (abbreviated, base URL), raising BadBaseError for hostile headers; `vary` the Vary header."""

    def __init__(self, gate: Gate, metrics: Metrics, *, key: Callable[[web.Request], RenderKey],
                 vary: str, contact: str | None) -> None:
        self.gate = gate
        self.packuments = gate.packuments
        self.metrics = metrics
        self._key = key
        self._vary = vary
        self.contact = contact
        """MIRRORGATE_OPERATOR_CONTACT, named in a refusal's way out."""
        self._gzip: Memo[str, bool] = Memo(accepts_gzip)
        self._kept_bases: dict[str, None] = {}
        self._rendering_once = asyncio.Semaphore(1)
        self._unknown_bases_seen = 0

    def footer(self, name: PackageName) -> str:
        """The last line of a packument's `policyRestrictions` message: how to get an
        exception (MIRRORGATE_OPERATOR_CONTACT is the proxy's, not the gate's)."""
        return exception_how(name.full, None, self.contact)

    def send(self, request: web.Request, rendered: Rendered) -> web.Response:
        headers = request.headers
        return self.answer(headers, rendered,
                           self.takes_gzip(headers.get("Accept-Encoding") or ""))

    def takes_gzip(self, accept_encoding: str) -> bool:
        return self._gzip(accept_encoding)

    def answer(self, headers: CIMultiDictProxy[str], rendered: Rendered,
               gzip: bool) -> web.Response:
        """`rendered` as a request with these headers asked (`warm.kind_of`), as aiohttp
        answers; the warm path writes the same bytes (`warm.WarmAnswer`)."""
        kind = kind_of(headers, rendered, gzip)
        if kind == NOT_MODIFIED:
            return web.Response(status=304, headers=rendered.not_modified_headers)
        if kind == GZIPPED:
            return web.Response(body=rendered.gzipped, headers=rendered.gzip_headers)
        return web.Response(body=rendered.body, headers=rendered.headers)

    async def entry(self, name: PackageName,
                    policy: str | None = None) -> Cached[PackumentEntry]:
        """The gate's entry of `name` under `policy` (the client's policy set), or its
        refusal raised (`gate.admission.Admissions.document`)."""
        found = await self.gate.admissions.document(name, policy)
        if isinstance(found, Refusal):
            raise Refused.of(found)
        return found

    async def gated_or_none(self, name: PackageName,
                            policy: str | None = None) -> Gated | None:
        return (await self.entry(name, policy)).value.gated

    def cached_or_false(self, name: PackageName,
                        policy: str | None = None) -> Gated | bool | None:
        """The fresh cached packument of `name` (None: no upstream has it), False when none
        is cached; never fills."""
        slot = self.packuments.fresh(name, policy)
        return False if slot is None else slot.value.gated

    async def packument(self, request: web.Request, name: PackageName) -> web.Response:
        slot = await self.gate.admissions.packument(name, policy_of(request))
        if isinstance(slot, Refusal):
            raise Refused.of(slot)
        gated = slot.value.gated
        assert gated is not None  # the gate answers an entry with a packument, else refuses
        key = self._key(request)
        rendered = slot.value.renderings.get(key)
        if rendered is None and self._known_base(key[1]):
            rendered = await self._render(slot, gated, key)
        elif rendered is None:
            rendered = await self._render_once(
                slot, gated, key, self.takes_gzip(request.headers.get("Accept-Encoding") or ""))
        return self.send(request, rendered)

    def _known_base(self, base: str) -> bool:
        """Whether renderings for `base` are kept: MIRRORGATE_PUBLIC_URL's, or one of the first
        `MAX_BASES` the process was asked for. A deployment is reached by a few names; a
        client inventing `Host` values must not spend the CPU of a rendering per value, nor
        push out the renderings other clients' warm hits are answered from."""
        if base in self._kept_bases:
            return True
        if len(self._kept_bases) < MAX_BASES:
            self._kept_bases[base] = None
            return True
        return False

    async def _render_once(self, slot: Cached[PackumentEntry], gated: Gated,
                           key: RenderKey, gzipped: bool) -> Rendered:
        """A rendering for a base whose renderings are not kept: the entry's bytes on the
        placeholder (made once per form) with the base put in, uncompressed, one at a time
        under the request's admission slot, then dropped."""
        if not self._unknown_bases_seen:
            log.warning("unknown_base_rendered", base=key[1][:200], kept=list(self._kept_bases),
                        hint="set MIRRORGATE_PUBLIC_URL to the URL clients use")
        self._unknown_bases_seen += 1
        self.metrics.unkept_renderings.inc()
        abbreviated, base = key
        entry = slot.value
        async with self._rendering_once:
            unplaced = entry.unplaced.get(abbreviated)
            if unplaced is None:
                unplaced = await in_thread_if_large(gated.size, gated.render, abbreviated, None,
                                                    self.footer(gated.name))
                entry.unplaced[abbreviated] = unplaced
                self.packuments.cache.grow(slot, len(unplaced))
            return await in_thread_if_large(len(unplaced), _placed, unplaced, abbreviated, base,
                                            self._vary, gzipped)

    async def _render(self, slot: Cached[PackumentEntry], gated: Gated, key: RenderKey) -> Rendered:
        """Render once per key, however many requests ask at the same time."""
        entry = slot.value
        task = entry.pending.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._render_into(slot, gated, key))
            entry.pending[key] = task
        return await asyncio.shield(task)

    async def _render_into(self, slot: Cached[PackumentEntry], gated: Gated,
                           key: RenderKey) -> Rendered:
        entry = slot.value
        try:
            rendered = await in_thread_if_large(gated.size, build_rendered, gated, *key,
                                                self._vary, self.footer(gated.name))
        finally:
            entry.pending.pop(key, None)
        self.packuments.cache.grow(slot, entry.keep(key, rendered))
        return rendered

    async def version(self, request: web.Request, name: PackageName,
                       wanted: str) -> web.Response:
        record = await self.gate.admissions.version(name, wanted, policy_of(request))
        if isinstance(record, Refusal):
            raise Refused.of(record)
        body = record.document(self._key(request)[1])
        return web.Response(body=body, headers={"Content-Type": FULL, "Vary": self._vary})

    async def dist_tags(self, name: PackageName, policy: str | None = None) -> web.Response:
        """`npm dist-tag ls`: the tags of the packument served, so never a denied version."""
        gated = await self.gated_or_none(name, policy)
        if gated is None or not gated.survivors:
            raise Refused(404, f"{name.full} has no admitted versions on the private or the "
                          "public upstream", reason="not found")
        return json_response(200, gated.dist_tags)


def _placed(unplaced: bytes, abbreviated: bool, base: str, vary: str,
            gzipped: bool) -> Rendered:
    return rendered_body(on_base(unplaced, base), abbreviated, vary, kept=False,
                         gzipped=gzipped)

