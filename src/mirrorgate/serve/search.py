"""`npm search` through mirrorgate: the public upstream's `/-/v1/search`, filtered by the rules.

The proxy holds no index of its own: the public upstream answers the query, and each result is
checked against the packument mirrorgate serves for that name. One query costs at most
`FILLS_PER_QUERY` packument fills (a result whose packument is neither cached nor among them
is left out, never shown unchecked), and its answer is kept for the packument cache's TTL, so a
client asking for 250 results, again and again, cannot turn one search into hundreds of
public requests.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from mirrorgate.gate import Gated
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.serve.refusals import Refused
from mirrorgate.upstream.client import Upstream, UpstreamError

__all__ = ["FILLS_PER_QUERY", "MAX_SIZE", "Search"]

# only npm's search parameters are forwarded, `size` capped as the public registry caps it
PARAMETERS = ("text", "size", "from", "quality", "popularity", "maintenance")
MAX_SIZE = 250
LOOKUPS = 8
"""Packuments looked up at once while filtering one page of results."""
FILLS_PER_QUERY = 20
"""Packuments one query may fill (ask the upstreams for); npm asks for 20 results a page."""
ANSWERS_KEPT = 256
"""Search answers kept (for the packument cache's TTL), the least recently asked dropped."""
NO_SEARCH = (404, 405, 501)
"""Upstream statuses meaning it has no search: a 501 saying so (other failures: 502-504)."""

GatedOf = Callable[[PackageName, str | None], Awaitable[Gated | None]]
CachedOf = Callable[[PackageName, str | None], Gated | bool | None]
"""The packument's fresh cache entry (a `Gated`, or None for a name no upstream has), or False
when there is none: looked up without filling."""


def _query(given: Mapping[str, str]) -> str:
    params = {key: given[key] for key in PARAMETERS if key in given}
    if "size" in params:
        try:
            params["size"] = str(max(1, min(MAX_SIZE, int(params["size"]))))
        except ValueError:
            raise Refused(400, f"size={params['size'][:20]!r} is not a number; npm search "
                          "sends a whole number of results", reason="bad search size") from None
    return urlencode(params)


def _no_search(public: Upstream, status: int) -> Refused:
    return Refused(501, f"the public upstream ({public.origin}) offers no search: its "
                   f"/-/v1/search answered {status}; look the package up by name instead",
                   reason="search unavailable", upstream="public")


class _Budget:
    """The fills one query may still cost."""

    def __init__(self, fills: int) -> None:
        self.fills = fills

    def take(self) -> bool:
        if self.fills <= 0:
            return False
        self.fills -= 1
        return True


async def _admitted(result: Any, gated_of: GatedOf, cached_of: CachedOf, budget: _Budget,
                    lookups: asyncio.Semaphore, policy: str | None) -> dict[str, Any] | None:
    """The result as mirrorgate would serve it to a client under `policy`, or None when nothing
    of it is admitted.

    Its `version` becomes the served `latest` when the upstream's pick was denied. A name whose
    packument cannot be had (the upstream failed, the name is invalid) is left out, never shown
    unchecked."""
    package = result.get("package") if isinstance(result, dict) else None
    if not isinstance(package, dict) or not isinstance(package.get("name"), str):
        return None
    try:
        name = parse_name(package["name"])
        cached = cached_of(name, policy)
        if cached is False and not budget.take():
            return None  # this query has asked the upstreams enough: left out, not unchecked
        if cached is False:
            async with lookups:
                gated = await gated_of(name, policy)
        else:
            gated = cached if isinstance(cached, Gated) else None
    except (InvalidNameError, Refused):
        return None
    if gated is None or not gated.survivors:
        return None
    version = package.get("version")
    if version not in gated.survivors:
        version = gated.dist_tags.get("latest")
    if gated.first_party:
        # The organisation's name: public's description, keywords, links and publisher are an
        # impostor's words ("the real one is acme-utils-evil"), never served under it, as in
        # its packument; what the result says of it comes from the private side alone.
        return {**result, "package": _own_words(name, gated, version)}
    return {**result, "package": {**package, "version": version}}


def _own_words(name: PackageName, gated: Gated, version: str | None) -> dict[str, Any]:
    """A search result's `package` for a first-party name, from its private packument."""
    head = gated.head
    package: dict[str, Any] = {"name": name.full, "version": version, "links": {}}
    record = gated.versions.get(version) if version is not None else None
    served = record.manifest() if record is not None and record.private else {}
    for source in (head, served):  # the packument's, else its served version's
        if isinstance(source.get("description"), str):
            package["description"] = source["description"]
            break
    for key in ("keywords", "maintainers"):  # lists npm search maps over: never absent
        package[key] = head[key] if isinstance(head.get(key), list) else []
    if isinstance(gated.time.get("modified"), str):
        package["date"] = gated.time["modified"]
    return package


class Search:
    """The search route: the upstream's answer to a query, filtered, kept for `ttl` seconds."""

    def __init__(self, public: Upstream, gated_of: GatedOf, cached_of: CachedOf, *,
                 ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.public = public
        self.gated_of = gated_of
        self.cached_of = cached_of
        self.ttl = ttl
        self.clock = clock
        # per query and policy set: what a result admits is the asking client's policy's word
        self._answers: OrderedDict[tuple[str, str | None],
                                   tuple[float, dict[str, Any]]] = OrderedDict()

    async def __call__(self, query: Mapping[str, str],
                       policy: str | None = None) -> dict[str, Any]:
        asked = _query(query)
        kept = self._answers.get((asked, policy))
        if kept is not None and self.clock() < kept[0]:
            self._answers.move_to_end((asked, policy))
            return kept[1]
        answer = await self._search(asked, policy)
        self._answers[(asked, policy)] = (self.clock() + self.ttl, answer)
        self._answers.move_to_end((asked, policy))
        while len(self._answers) > ANSWERS_KEPT:
            self._answers.popitem(last=False)
        return answer

    async def _search(self, asked: str, policy: str | None) -> dict[str, Any]:
        """The upstream's answer to `asked` with every result the rules (`policy`'s) do not
        admit (or that this query may not check) removed."""
        public = self.public
        try:
            answer = await public.get_json("-/v1/search?" + asked)
        except UpstreamError as error:
            if error.kind == "status" and error.status in NO_SEARCH:
                raise _no_search(public, error.status or 0) from None
            raise Refused(error.client_status, f"the public upstream's search failed: {error}",
                          reason="search failed", upstream="public", kind=error.kind) from None
        if answer.status in NO_SEARCH or answer.document is None:
            raise _no_search(public, answer.status)
        objects = answer.document.get("objects")
        results = objects if isinstance(objects, list) else []
        lookups = asyncio.Semaphore(LOOKUPS)
        budget = _Budget(FILLS_PER_QUERY)
        checked = await asyncio.gather(*(_admitted(r, self.gated_of, self.cached_of, budget,
                                                   lookups, policy) for r in results))
        kept = [result for result in checked if result is not None]
        total = answer.document.get("total")
        # `total` counts matches beyond this page too; those removed here are taken off it
        shown = total - (len(results) - len(kept)) if isinstance(total, int) else len(kept)
        return {"objects": kept, "total": max(shown, len(kept)),
                "time": answer.document.get("time")}
