"""`prewarm` and `audit` through a running mirrorgate (`--proxy URL`): no upstream credentials.

What the proxy's answers show decides what these modes can do (docs/operations-commands.md):
its full packument keeps the mirror mark and lists denials under `policyRestrictions`, and a
tarball read through it to its end makes it enqueue the job itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from mirrorgate.commands import audit as audits
from mirrorgate.commands import prewarm as prewarms
from mirrorgate.config import ViaProxySettings
from mirrorgate.integrity import (
    DigestMismatch,
    StreamVerifier,
    TooLarge,
    Unverifiable,
    digests_from_dist,
    parse_integrity,
)
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name, tarball_filename
from mirrorgate.npm.ownership import mirrored_mark
from mirrorgate.upstream.client import FILLS, TARBALLS, Upstream, UpstreamError

__all__ = ["ProxyView", "audit_via_proxy", "open_proxy", "prewarm_via_proxy", "registry_url",
           "token_refused", "wait_via_proxy"]


def registry_url(url: str) -> str:
    """The proxy's npm registry URL from its root or from that URL itself."""
    base = url if url.endswith("/") else url + "/"
    return base if base.endswith("/npm/") else base + "npm/"


@contextlib.asynccontextmanager
async def open_proxy(settings: ViaProxySettings, url: str) -> AsyncIterator[Upstream]:
    """The running mirrorgate as an upstream: the same client (bounded, origin-locked, bytes
    as stored) the proxy uses for its own upstreams, sending `MIRRORGATE_PROXY_TOKEN` to that
    origin alone."""
    client = Upstream("proxy", registry_url(url), timeout=settings.upstream_timeout,
                      max_metadata_bytes=settings.max_metadata_bytes,
                      token=settings.proxy_token)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def token_refused(settings: ViaProxySettings, url: str) -> str | None:
    """What to set when the running mirrorgate at `url` refuses this command's token (its
    `/npm/-/ping` answers 401); None when it takes it, needs none, or failed otherwise (each
    name's own request then reports that).

    Asked once before any name: a refused token would otherwise fail every pinned version
    alike, one line each, as if they were findings. It is a setting that cannot be used, so
    the command stops with exit status 2 naming the variable."""
    async with open_proxy(settings, url) as proxy:
        try:
            await proxy.get_json("-/ping", pool=FILLS)
        except UpstreamError as error:
            if error.status == 401:
                where = registry_url(url)
                if settings.proxy_token is None:
                    return (f"mirrorgate at {where} requires a client token: set "
                            "MIRRORGATE_PROXY_TOKEN (or MIRRORGATE_PROXY_TOKEN_FILE) to one "
                            "listed in its MIRRORGATE_CLIENT_TOKENS_FILE (`mirrorgate token "
                            "new NAME` makes one)")
                return (f"mirrorgate at {where} refused MIRRORGATE_PROXY_TOKEN (401): it is "
                        "not listed in that mirrorgate's MIRRORGATE_CLIENT_TOKENS_FILE; set it "
                        "to a token that is (`mirrorgate token new NAME` makes one)")
    return None


class ProxyView:
    """What a running mirrorgate serves for one name: admitted and denied versions, each denied
    one with its rule and reason as the proxy states them (`policyRestrictions.denials`)."""

    def __init__(self, document: Mapping[str, Any] | None, *, all_denied: str | None = None):
        document = document or {}
        self.versions = _mapping(document.get("versions"))
        policy = _mapping(document.get("policyRestrictions"))
        self.denied = _mapping(policy.get("versions"))
        self.denials = _mapping(policy.get("denials"))
        message = policy.get("message")
        self.message = message if isinstance(message, str) else ""
        self.all_denied = all_denied

    def rule(self, version: str) -> str | None:
        """The rule that denied `version`, as the proxy names it (None: not named)."""
        rule = _mapping(self.denials.get(version)).get("rule")
        return rule if isinstance(rule, str) else None

    def reason(self, version: str) -> str:
        """`RULE (REASON)` for a denied `version`, read from the fields the proxy sends."""
        denial = _mapping(self.denials.get(version))
        rule, reason = denial.get("rule"), denial.get("reason")
        if isinstance(rule, str) and isinstance(reason, str):
            return f"{rule} ({reason})"
        return self.message or "denied by the proxy's admission rules"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


async def read_view(proxy: Upstream, name: PackageName) -> ProxyView | None:
    """The proxy's full packument of `name` (None: not found); raises UpstreamError."""
    try:
        answer = await proxy.get_json(name.url_path(), pool=FILLS)
    except UpstreamError as error:
        if error.status == 403:  # every version denied: the packument itself is refused
            return ProxyView(None, all_denied="every version of the package is denied by "
                             "the proxy's admission rules")
        raise
    return ProxyView(answer.document) if answer.status == 200 else None


async def _read_through(proxy: Upstream, name: PackageName, version: str,
                        digests_text: Mapping[str, Any] | str, limit: int) -> str | None:
    """Read a tarball through the proxy to its end, hashed against `digests_text` (a `dist`
    or an SRI string). None when it matched, what went wrong when it could not be read;
    raises DigestMismatch for other bytes."""
    digests = (digests_from_dist(digests_text) if isinstance(digests_text, Mapping)
               else parse_integrity(digests_text))
    try:
        verifier = StreamVerifier(digests, expected_size=None, limit=limit)
    except Unverifiable as error:
        return str(error)
    url = proxy.url(name.tarball_path(tarball_filename(name, version)))
    try:
        async with proxy.stream(url, pool=TARBALLS) as body:
            if body is None:
                return "the proxy has no tarball for it"
            async for chunk in body.chunks:
                verifier.update(chunk)
        verifier.finish()
    except TooLarge as error:
        return f"larger than MIRRORGATE_MAX_TARBALL_BYTES ({error.limit})"
    except (UpstreamError, aiohttp.ClientError, TimeoutError, OSError) as error:
        return f"the tarball could not be read through the proxy: {error}"
    return None


def _marked(manifest: object) -> bool:
    return isinstance(manifest, Mapping) and mirrored_mark(manifest) is not None


# Prewarming through the proxy is pulling: a public-only version's tarball is read through it
# to the end (and hashed against its integrity), and the proxy enqueues the job, signed, on
# its own queue, as it does for any client.
async def prewarm_via_proxy(locked: Iterable[tuple[str, str]], proxy: Upstream, *,
                            max_tarball_bytes: int,
                            progress: Callable[[prewarms.Result], None] | None = None,
                            ) -> list[prewarms.Result]:
    Outcome, Result = prewarms.Outcome, prewarms.Result  # noqa: N806 - short local aliases
    by_name: dict[str, list[str]] = {}
    for name, version in locked:
        by_name.setdefault(name, [])
        if version not in by_name[name]:
            by_name[name].append(version)
    results: list[prewarms.Result] = []
    slots = asyncio.Semaphore(prewarms.NAMES_AT_ONCE)

    async def one(name: str, versions: list[str]) -> None:
        async with slots:
            for result in await _pull(name, versions):
                results.append(result)
                if progress is not None:
                    progress(result)

    async def _pull(name: str, versions: list[str]) -> list[prewarms.Result]:
        try:
            package = parse_name(name)
            view = await read_view(proxy, package)
        except (InvalidNameError, UpstreamError) as error:
            return [Result(name, v, Outcome.FAILED, str(error)) for v in versions]
        out: list[prewarms.Result] = []
        for version in versions:
            if view is None:
                out.append(Result(name, version, Outcome.NOT_FOUND, "the proxy does not know "
                                  "the package"))
            elif view.all_denied is not None:
                out.append(Result(name, version, Outcome.REFUSED, view.all_denied))
            elif version in view.denied:
                out.append(Result(name, version, Outcome.REFUSED, view.reason(version)))
            elif version not in view.versions:
                out.append(Result(name, version, Outcome.NOT_FOUND, f"the proxy lists no "
                                  f"version {version}"))
            elif _marked(view.versions[version]):
                out.append(Result(name, version, Outcome.ALREADY_PRESENT, "mirrored"))
            else:
                dist = view.versions[version].get("dist") or {}
                try:
                    problem = await _read_through(proxy, package, version, dist,
                                                  max_tarball_bytes)
                except DigestMismatch as mismatch:  # the proxy cut it: it enqueued nothing
                    problem = f"the bytes served are not the ones admitted ({mismatch})"
                out.append(Result(name, version, Outcome.ENQUEUED,
                                  "pulled through the proxy, which enqueued its job")
                           if problem is None else
                           Result(name, version, Outcome.FAILED, problem))
        return out

    await asyncio.gather(*(one(name, versions) for name, versions in by_name.items()))
    return results


async def wait_via_proxy(pulled: Iterable[prewarms.Result], proxy: Upstream, *,
                         within: float, poll: float = 5.0,
                         clock: Callable[[], float] = time.monotonic,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                         progress: Callable[[prewarms.Result], None] | None = None,
                         ) -> list[prewarms.Result]:
    """Follow versions pulled through the proxy: `published` once the packument it serves
    shows the version with the worker's mark, `pending` if not within `within` seconds. The
    proxy caches packuments, so a version shows up to `MIRRORGATE_CACHE_TTL` after the
    worker published it."""
    Outcome = prewarms.Outcome  # noqa: N806 - a short local alias

    async def settle(waiting: Sequence[prewarms.Result]) -> list[prewarms.Result]:
        settled: list[prewarms.Result] = []
        for name in dict.fromkeys(r.name for r in waiting):
            try:
                view = await read_view(proxy, parse_name(name))
            except (InvalidNameError, UpstreamError):
                continue  # asked again at the next poll
            settled.extend(replace(r, outcome=Outcome.PUBLISHED, detail="") for r in waiting
                           if r.name == name and view is not None
                           and _marked(view.versions.get(r.version)))
        return settled

    return await prewarms.poll_until_settled(
        [r for r in pulled if r.outcome is Outcome.ENQUEUED], settle, within=within, poll=poll,
        clock=clock, sleep=sleep, progress=progress,
        pending=f"not shown as mirrored by the proxy after {within:g} s (it shows a new "
        "mirror up to MIRRORGATE_CACHE_TTL late)")


async def audit_via_proxy(names: Iterable[str], proxy: Upstream, *, max_tarball_bytes: int,
                          progress: Callable[[str, list[audits.Result]], None] | None = None,
                          ) -> list[audits.Result]:
    """`audit.audit` through the proxy: `progress` hears each name once it is checked.

    A missing private tarball cannot be seen this way (the proxy then serves public's
    verified copy, as it must for clients), and a version the proxy denies is reported
    without its bytes being read (its tarball answers 403)."""
    Finding, Result = audits.Finding, audits.Result  # noqa: N806 - short local aliases
    results: list[audits.Result] = []
    slots = asyncio.Semaphore(audits.NAMES_AT_ONCE)

    async def check(name: str) -> list[audits.Result]:
        try:
            package = parse_name(name)
            view = await read_view(proxy, package)
        except (InvalidNameError, UpstreamError) as error:
            return [Result(name, "", Finding.FAILED, str(error))]
        if view is None:
            return []
        out: list[audits.Result] = []
        for version, manifest in view.denied.items():
            if _marked(manifest):
                rule = view.rule(version)
                finding = audits.denial_finding(rule) if rule is not None else Finding.REFUSED
                out.append(Result(name, version, finding, view.reason(version)))
        for version, manifest in view.versions.items():
            mark = mirrored_mark(manifest) if isinstance(manifest, Mapping) else None
            if mark is None:
                continue
            try:
                problem = await _read_through(proxy, package, version, mark.integrity,
                                              max_tarball_bytes)
            except DigestMismatch as mismatch:
                out.append(Result(name, version, Finding.TAMPERED, "the stored bytes are not "
                                  "the ones admitted", (mismatch.expected.sri(),
                                                        mismatch.actual.sri())))
                continue
            out.append(Result(name, version, Finding.OK) if problem is None else
                       Result(name, version, Finding.FAILED, problem))
        return out

    async def one(name: str) -> None:
        async with slots:
            found = await check(name)
            results.extend(found)
            if progress is not None:
                progress(name, found)

    await asyncio.gather(*(one(name) for name in dict.fromkeys(names)))
    return results
