"""The advisory feed: the index in force, replaced whole by a background refresh.

One `AdvisoryFeed` is built with the rules and shared by everything that evaluates them (the
serve path, the worker's re-gate, the commands). Loading never blocks serving: every load
parses in a thread, and until the first one succeeds there is no index (the `unavailable` rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from mirrorgate.advisories.index import AdvisoryIndex
from mirrorgate.advisories.source import (
    SourceError,
    fetch_url,
    is_url,
    local_signature,
    read_local,
)
from mirrorgate.logs import loggable_url

__all__ = ["FETCH_TIMEOUT", "LOAD_OUTCOMES", "RETRY_AFTER_FAILURE", "AdvisoryFeed", "FeedState"]

log = structlog.get_logger("mirrorgate.advisories")

FETCH_TIMEOUT = 600.0
"""Seconds a download of the export may take in all."""
LOAD_OUTCOMES: tuple[str, ...] = ("loaded", "unchanged", "failed")
"""What a refresh comes to (`refresh()`'s answer, the `outcome` label of the loads metric)."""
RETRY_AFTER_FAILURE = 300.0
"""Seconds before a failed refresh is tried again (when `refresh` is longer)."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class FeedState:
    """What the feed holds: the index (None before the first load) and how current it is.
    Immutable and replaced by a single assignment, so a reader sees the old index or the new
    one, never a mix."""

    index: AdvisoryIndex | None = None
    as_of: datetime | None = None
    """The data's age: for a local file or directory, when it was last modified (the job that
    syncs it touches it); for a URL, when mirrorgate last confirmed it holds the newest copy
    (a 200 or a 304)."""
    generation: int = 0
    etag: str | None = None
    last_modified: str | None = None
    signature: tuple[int, int] | None = None


class AdvisoryFeed:
    """The current advisory index for one source, and the loop that keeps it current."""

    def __init__(self, source: str, refresh: timedelta, *,
                 now: Callable[[], datetime] = _utcnow,
                 ssl_context: ssl.SSLContext | None = None,
                 on_outcome: Callable[[str], None] | None = None,
                 malware_only: bool = False) -> None:
        self.source = source
        self.malware_only = malware_only
        self.refresh_every = refresh
        self.now = now
        self.ssl_context = ssl_context
        self.on_outcome = on_outcome
        self.state = FeedState()
        self.shown = loggable_url(source) if is_url(source) else source

    @property
    def index(self) -> AdvisoryIndex | None:
        return self.state.index

    def age(self, now: datetime) -> timedelta | None:
        as_of = self.state.as_of
        return None if as_of is None else now - as_of

    def _outcome(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _swap(self, index: AdvisoryIndex, as_of: datetime, *, etag: str | None = None,
              last_modified: str | None = None,
              signature: tuple[int, int] | None = None) -> None:
        self.state = FeedState(index, as_of, self.state.generation + 1, etag, last_modified,
                               signature)

    async def refresh(self) -> str:
        """Look for a newer copy once: "loaded", "unchanged" or "failed" (old index kept)."""
        started = time.perf_counter()
        old = self.state
        try:
            if is_url(self.source):
                download = await fetch_url(self.source, etag=old.etag,
                                           last_modified=old.last_modified,
                                           seconds=FETCH_TIMEOUT, ssl_context=self.ssl_context,
                                           malware_only=self.malware_only)
                if download.index is None and old.index is not None:
                    self.state = replace(old, as_of=self.now())
                    return self._unchanged()
                if download.index is None:  # a 304 with nothing loaded: ask again in full
                    self.state = replace(old, etag=None, last_modified=None)
                    return await self.refresh()
                self._swap(download.index, self.now(), etag=download.etag,
                           last_modified=download.last_modified)
            else:
                path = Path(self.source)
                signature = await asyncio.to_thread(local_signature, path)
                if old.index is not None and signature == old.signature:
                    return self._unchanged()
                index = await asyncio.to_thread(read_local, path,
                                                malware_only=self.malware_only)
                modified = datetime.fromtimestamp(signature[0] / 1e9, UTC)
                self._swap(index, modified, signature=signature)
        except (SourceError, OSError) as error:
            # unreadable, corrupt, truncated, empty copy, network error: the old index stays,
            # the failure is logged and counted, and the next refresh tries again
            reason = str(error) if isinstance(error, SourceError) else (
                f"cannot read {self.shown}: {error.strerror or error}")
            log.error("advisories_load_failed", source=self.shown, reason=reason,
                      kept_generation=old.generation,
                      kept_records=old.index.records if old.index is not None else 0)
            self._outcome("failed")
            return "failed"
        loaded = self.state.index
        assert loaded is not None
        log.info("advisories_loaded", source=self.shown, records=loaded.records,
                 packages=len(loaded), skipped=loaded.skipped, generation=self.state.generation,
                 seconds=round(time.perf_counter() - started, 3))
        self._outcome("loaded")
        return "loaded"

    def _unchanged(self) -> str:
        log.info("advisories_unchanged", source=self.shown, generation=self.state.generation)
        self._outcome("unchanged")
        return "unchanged"

    async def run(self, stop: asyncio.Event) -> None:
        """Load now, then look for a newer copy every `refresh` until `stop` is set; after a
        failure, sooner (`RETRY_AFTER_FAILURE`), so a blip at start-up does not leave the
        gate without data for a whole refresh interval."""
        while not stop.is_set():
            outcome = "failed"
            try:
                outcome = await self.refresh()
            except Exception:  # a bug in a refresh must not end the loop: log it, try later
                log.exception("advisories_refresh_crashed", source=self.shown)
            wait = self.refresh_every.total_seconds()
            if outcome == "failed":
                wait = min(wait, RETRY_AFTER_FAILURE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    def load_blocking(self) -> str:
        """One refresh run to completion (for commands and tests without a loop)."""
        return asyncio.run(self.refresh())
