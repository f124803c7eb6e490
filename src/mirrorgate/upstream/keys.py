"""The public registry's signing keys (`/-/npm/v1/keys`), fetched through the public upstream.

The signature rule needs them on the serve path and `/npm/-/npm/v1/keys` serves them to npm
clients (`npm audit signatures`), so they are fetched once and held, refreshed in the
background, and never allowed to stall serving: see `RegistryKeys.current` for the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import orjson
import structlog

from mirrorgate.metrics import Metrics
from mirrorgate.rules import KeySet, parse_keys
from mirrorgate.upstream.client import Upstream, UpstreamError

__all__ = ["FIRST_WAIT", "KEYS_PATH", "REFRESH_AFTER", "RETRY_AFTER", "RegistryKeys"]

log = structlog.get_logger("mirrorgate.serve")

KEYS_PATH = "-/npm/v1/keys"
REFRESH_AFTER = 3600.0
"""Seconds keys are held before a background refresh: keys rotate rarely (and carry their own
`expires`), and an hour bounds how long a key the registry withdrew is still trusted."""
RETRY_AFTER = 30.0
"""Seconds after a failed fetch before the next attempt (the old keys are kept meanwhile)."""
FIRST_WAIT = 3.0
"""Seconds a request waits for keys when none are held yet. Past it the request goes on
without keys (the rules' `missing` setting decides) and the fetch finishes in the background:
a slow keys endpoint costs the first requests this much once, never every request."""


class RegistryKeys:
    """The keys, their document as served, and the one fetch in flight (single-flight)."""

    def __init__(self, public: Upstream, *, clock: Callable[[], float],
                 metrics: Metrics | None = None) -> None:
        self._public = public
        self._metrics = metrics
        self._clock = clock
        self._keys: KeySet | None = None
        self._document: bytes | None = None
        self._next_fetch = 0.0
        self._task: asyncio.Task[None] | None = None

    async def current(self) -> KeySet | None:
        """The keys to verify with, or None while the registry has none or cannot be reached."""
        await self._ready()
        return self._keys

    async def document(self) -> bytes | None:
        """The keys document as the public registry served it (re-serialised), or None."""
        await self._ready()
        return self._document

    async def _ready(self) -> None:
        if self._clock() >= self._next_fetch and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._fetch(), name="mirrorgate-registry-keys")
        if self._document is None and self._task is not None and not self._task.done():
            # shield: a request that gives up must not cancel the fetch others will use.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), FIRST_WAIT)

    async def _fetch(self) -> None:
        try:
            answer = await self._public.get_json(KEYS_PATH)
            if answer.status != 200 or answer.document is None:
                raise ValueError(f"the public registry answered {answer.status}: it publishes "
                                 "no signing keys")
            document: dict[str, Any] = answer.document
            keys = parse_keys(document)
        except (UpstreamError, ValueError) as error:
            # An upstream failure is counted by the client; an unusable answer is counted here.
            if isinstance(error, ValueError) and self._metrics is not None:
                self._metrics.refusals.labels("bad_registry_keys").inc()
            self._next_fetch = self._clock() + RETRY_AFTER
            log.warning("registry_keys_unavailable", detail=str(error)[:300],
                        kept=self._keys is not None, retry_in=RETRY_AFTER)
            return
        self._keys, self._document = keys, orjson.dumps(document)
        self._next_fetch = self._clock() + REFRESH_AFTER
        log.info("registry_keys_loaded", keyids=sorted(keys.keys)[:16])

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
