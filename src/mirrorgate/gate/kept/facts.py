"""What the gate must not forget, held in memory and kept current from the state store.

Requests read this memory only (the warm path never touches the store). What the gate learns
goes into memory at once and to the store from a bounded buffer, in the background; what
another process wrote arrives through `Store.changes`, polled every `POLL` seconds. The story,
and what each fault does: docs/state-store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from mirrorgate.gate.cache import NoStaleAnswer
from mirrorgate.metrics import Metrics
from mirrorgate.store import (
    FIRST_PARTY,
    INSTALLED,
    WITHDRAWN,
    Fact,
    Store,
    StoreSetupError,
    StoreUnavailableError,
    Verdict,
)
from mirrorgate.store.waivers import WAIVER

__all__ = ["KEPT_KINDS", "LIMITS", "MAX_KEPT", "MAX_PENDING", "MAX_REFUSALS", "MAX_VERDICTS",
           "POLL", "KeptFacts", "UnrecordedError"]

log = structlog.get_logger("mirrorgate.store")

POLL = 0.25
"""Seconds between looks for what other processes wrote. Measured against LISTEN/NOTIFY
(bench/state_store.py): a poll is seen within 250 ms for about 1 ms of the server's time, works
the same on SQLite (a sidecar on the volume) and after a reconnect, when a listener would have
missed whatever was sent meanwhile and had to poll anyway."""
OPEN_WAIT = 5.0
"""Seconds start-up waits for the store before it listens anyway, not ready."""
RETRY = 1.0
"""Seconds between attempts to reach a store that did not answer."""
MAX_PENDING = 10_000
"""Writes that may be lost (names installed, clean verdicts) held while the store is
unreachable; past it the oldest of them is dropped, and nothing else."""
MAX_KEPT = 100_000
"""Writes the gate must not lose (withdrawals, first-party names, waivers, each one's
tombstone, and refusals) held while the store is unreachable; never dropped: past it what
would add one is refused (`UnrecordedError`) until the store takes them."""
KEPT_KINDS = frozenset({FIRST_PARTY, WITHDRAWN, WAIVER})
"""The fact kinds whose writes are never dropped (with the verdicts where a signal fired)."""
LIMITS = {FIRST_PARTY: 100_000, WITHDRAWN: 100_000, INSTALLED: 50_000, WAIVER: 10_000}
"""Facts held in memory per kind (the least recently learned forgotten first)."""
MAX_VERDICTS = 10_000
"""Clean release verdicts held in memory; an older one is read again at its next first pull."""
MAX_REFUSALS = 100_000
"""Release verdicts where a signal fired, held in memory: never pushed out by clean ones, so no
burst of other verdicts lets a refused version be judged (or vouch) afresh."""
META = "meta"  # facts about the store itself
IMPORTED = "files-imported"  # set once the files before the store were imported into it
_DROP_REPORT = 1000  # the first drop is logged, then every 1000th
_PAGE = 5_000


class UnrecordedError(NoStaleAnswer):
    """A fact the gate must keep could not be held for the store (`MAX_KEPT` of them wait): the
    request that learned it is refused (503) rather than the fact forgotten at a restart, and
    no stale answer stands in for it (docs/state-store.md#writes-the-gate-never-drops)."""

    retry_after = 30


class _Waiting:
    """One write buffer: facts by (kind, key) and verdicts by their key, the newest last."""

    def __init__(self) -> None:
        self.facts: OrderedDict[tuple[str, str], Fact] = OrderedDict()
        self.verdicts: OrderedDict[tuple[str, str, str], Verdict] = OrderedDict()

    def __len__(self) -> int:
        return len(self.facts) + len(self.verdicts)


class KeptFacts:
    """Facts by kind (`store.KINDS`) and release verdicts, in memory; `opener` None keeps them
    in this process only (the operator commands, tests)."""

    def __init__(self, opener: Callable[[], Awaitable[Store]] | None = None, *,
                 metrics: Metrics | None = None, poll: float = POLL,
                 max_pending: int = MAX_PENDING, max_kept: int = MAX_KEPT,
                 importer: Callable[[Store], Awaitable[int]] | None = None) -> None:
        self._opener = opener
        self._importer = importer
        self.metrics = metrics
        self.poll = poll
        self.max_pending = max_pending
        self.max_kept = max_kept
        self.store: Store | None = None
        self.ready = opener is None
        """Whether the facts are loaded: until then a decision that needs one fails closed."""
        self.reachable = opener is None
        self.problem: str | None = None
        """Why the store does not answer, while it does not (/readyz shows it before loading)."""
        self._facts: dict[str, OrderedDict[str, str]] = {kind: OrderedDict() for kind in LIMITS}
        # by (name, version, integrity): a verdict speaks for the bytes it read, never for
        # other bytes a registry later lists under the same version
        self._verdicts: OrderedDict[tuple[str, str, str], Verdict] = OrderedDict()
        self._flagged: OrderedDict[tuple[str, str, str], Verdict] = OrderedDict()
        # two buffers, so no volume of what may be lost pushes out what may not
        self._kept = _Waiting()
        self._droppable = _Waiting()
        self._meta: dict[str, str] = {}
        self._dropped = 0
        self._refused = 0
        self._cursor = 0
        self._wake: asyncio.Event | None = None
        self.listeners: list[Callable[[str], None]] = []
        """Called with a kind ("verdict" for verdicts) when another process changed it."""
        self.watchers: list[Callable[[str, Sequence[str], bool], None]] = []
        """Called with a kind, the keys of it that changed, and whether they changed here
        (else in another process, or at the load): what was built from the old values is
        dropped (`gate.Gate`)."""
        if metrics is not None:
            metrics.watch_store(lambda: (self.reachable, self.pending, len(self._kept)))

    @property
    def persistent(self) -> bool:
        return self._opener is not None

    @property
    def pending(self) -> int:
        return len(self._kept) + len(self._droppable)

    def _waiting(self, kind: str, key: str) -> bool:
        return (kind, key) in self._kept.facts or (kind, key) in self._droppable.facts

    # --- reads and writes: memory only, never awaited ------------------------------------

    def get(self, kind: str, key: str) -> str | None:
        return self._facts[kind].get(key)

    def keys(self, kind: str) -> list[str]:
        return list(self._facts[kind])

    def count(self, kind: str) -> int:
        return len(self._facts[kind])

    def put(self, kind: str, key: str, value: str = "") -> None:
        held = self._facts[kind]
        if held.get(key) == value:
            held.move_to_end(key)
            return
        self._room(kind, key)
        self._hold(kind, key, value)
        self._queue(Fact(kind, key, value))
        self._watched(kind, (key,), here=True)

    def forget(self, kind: str, key: str) -> None:
        if key in self._facts[kind]:
            self._room(kind, key)  # a tombstone is kept as the fact was
            del self._facts[kind][key]
            self._queue(Fact(kind, key, None))
            self._watched(kind, (key,), here=True)

    def _watched(self, kind: str, keys: Sequence[str], *, here: bool) -> None:
        for watcher in self.watchers:
            watcher(kind, keys, here)

    def changed_here(self, kind: str) -> None:
        """Tell the listeners this process changed `kind` itself (they hear other processes'
        changes from the store): a waiver granted on this replica's status page."""
        for listener in self.listeners:
            listener(kind)

    def verdict(self, name: str, version: str, integrity: str) -> Verdict | None:
        """The verdict on these bytes of `name@version` (`integrity`: their strongest digest's
        SRI, `integrity.strongest_sri`); None when they were never judged."""
        key = (name, version, integrity)
        return self._flagged.get(key) or self._verdicts.get(key)

    @property
    def held(self) -> int:
        """Release verdicts held in memory, clean and refusals (at most `MAX_VERDICTS` and
        `MAX_REFUSALS`)."""
        return len(self._verdicts) + len(self._flagged)

    def verdicts(self) -> list[Verdict]:
        return [*self._flagged.values(), *self._verdicts.values()]

    def keep(self, verdict: Verdict) -> None:
        key = (verdict.name, verdict.version, verdict.integrity)
        # a refusal is never dropped, nor what replaces one still waiting
        kept = verdict.verdict == "flagged" or key in self._kept.verdicts
        if kept:
            self._room("verdict", key)
        self._hold_verdict(verdict)
        if self._opener is not None:
            waiting = self._kept if kept else self._droppable
            waiting.verdicts.pop(key, None)
            waiting.verdicts[key] = verdict
            self._bound()
            self._kick(kept)

    def _room(self, kind: str, key: object) -> None:
        """Raise UnrecordedError when a write that must be kept would not fit its buffer (the
        memory is left as it was, so the fact is learned again once there is room)."""
        if (self._opener is None or len(self._kept) < self.max_kept
                or (kind != "verdict" and kind not in KEPT_KINDS)
                or (kind, key) in self._kept.facts or key in self._kept.verdicts):
            return
        self._refused += 1
        if self.metrics is not None:
            self.metrics.store_writes_refused.inc()
        if self._refused == 1 or self._refused % _DROP_REPORT == 0:
            log.error("store_writes_refused", refused=self._refused, cap=self.max_kept,
                      kind=kind, reason=self.problem or "the state store is behind",
                      consequence="requests that would add a fact the gate must keep are "
                                  "refused (503) until the state store takes the waiting ones")
        raise UnrecordedError(
            f"mirrorgate cannot record what it learned: {self.max_kept:,} facts it must keep "
            "(withdrawals, first-party names, refusals, waivers) wait for the state store, "
            f"which has not taken them ({self.problem or 'it is behind'}); what would add "
            "one is refused until it does")

    def _hold(self, kind: str, key: str, value: str) -> None:
        held = self._facts[kind]
        held[key] = value
        held.move_to_end(key)
        while len(held) > LIMITS[kind]:
            held.popitem(last=False)

    def _hold_verdict(self, verdict: Verdict) -> None:
        key = (verdict.name, verdict.version, verdict.integrity)
        # bytes judged again land in one map or the other, never both
        self._verdicts.pop(key, None)
        self._flagged.pop(key, None)
        held, limit = ((self._flagged, MAX_REFUSALS) if verdict.verdict == "flagged"
                       else (self._verdicts, MAX_VERDICTS))
        held[key] = verdict
        while len(held) > limit:
            held.popitem(last=False)

    def _queue(self, fact: Fact) -> None:
        if self._opener is None:
            return
        key = (fact.kind, fact.key)
        kept = fact.kind in KEPT_KINDS
        waiting = self._kept if kept else self._droppable
        waiting.facts.pop(key, None)
        waiting.facts[key] = fact  # the newest value of a key, at the end
        self._bound()
        self._kick(kept)

    def _bound(self) -> None:
        """Drop the oldest write that may be lost past `max_pending` of them; the kept ones
        are bounded by refusing new ones (`_room`), never by dropping."""
        droppable = self._droppable
        while len(droppable) > self.max_pending:
            if droppable.facts:
                droppable.facts.popitem(last=False)
            else:
                droppable.verdicts.popitem(last=False)
            self._dropped += 1
            if self.metrics is not None:
                self.metrics.store_writes_dropped.inc()
            if self._dropped == 1 or self._dropped % _DROP_REPORT == 0:
                log.warning("store_writes_dropped", dropped=self._dropped, cap=self.max_pending,
                            reason=self.problem or "the state store is behind")

    def _kick(self, kept: bool) -> None:
        """Write at once what the fleet must hold within a second (`KEPT_KINDS`, refusals);
        what may be lost (a name's install count, a clean verdict) waits for the next poll's
        pass, at most `POLL` later, in one transaction with what came meanwhile: at once, a
        replay paid a transaction and a change-feed read per name (docs/state-store.md)."""
        if kept and self._wake is not None:
            self._wake.set()

    # --- the store: opened, loaded, followed, written ------------------------------------

    async def open(self) -> None:
        """The first attempt at start-up: StoreSetupError (a migration that cannot run)
        propagates and stops the process; a store that does not answer is tried again by
        `run`, /readyz saying why meanwhile."""
        if self._opener is None:
            return
        try:
            # bounded: the listener (and /livez) must come up even when the store's host
            # drops packets; the background loop goes on trying
            async with asyncio.timeout(OPEN_WAIT):
                await self._connect()
        except StoreUnavailableError as error:
            self._unreachable("open", error)
        except TimeoutError:
            self._unreachable("open", StoreUnavailableError(
                f"the state store did not answer within {OPEN_WAIT:g} s"))

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: reach the store when it is not, write what waits, read what changed."""
        if self._opener is None:
            return
        self._wake = asyncio.Event()
        while not stop.is_set():
            pause = self.poll
            self._wake.clear()  # a kept write from here on is written at the next pass, at once
            try:
                if self.store is None or not self.ready:
                    await self._connect()
                else:
                    await self._flush(self.store)
                    await self._follow(self.store)
                if not self.reachable:
                    self._recovered()
                    self.reachable = True
            except StoreUnavailableError as error:
                self._unreachable("open" if not self.ready
                                  else "write" if self.pending else "poll", error)
                pause = RETRY
            except StoreSetupError as error:  # reached again, and a migration cannot run
                self.problem = str(error)
                log.error("store_setup_failed", reason=str(error))
                pause = RETRY * 30
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop, self._wake if self.reachable else None),
                                       pause)
        if self.store is not None and self.reachable:
            with contextlib.suppress(StoreUnavailableError):
                await self._flush(self.store)  # what was learned last, on the way out

    async def read(self, store: Store) -> None:
        """Everything `store` holds, into this memory, once, and nothing back: an operator
        command judges by what the fleet knows without writing the fleet's store."""
        await self._follow(store)

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def _connect(self) -> None:
        assert self._opener is not None
        if self.store is None:
            self.store = await self._opener()
            info = self.store.info
            log.info("store_opened", kind=info.kind, where=info.where, schema=info.schema)
        await self._follow(self.store)
        if self._importer is not None and IMPORTED not in self._meta:
            # the first start on this store: the facts of the files before it, once
            imported = await self._importer(self.store)
            await self.store.put_facts([Fact(META, IMPORTED, str(imported))])
            log.info("store_imported", facts=imported)
            await self._follow(self.store)
        self._importer = None
        if not self.ready:
            self.ready = True
            for kind in (*LIMITS, "verdict"):  # what was built before the load, built again
                for listener in self.listeners:
                    listener(kind)
        await self._flush(self.store)  # learned before the store answered
        if self.problem is not None:
            self._recovered()
        self.reachable = True

    async def _flush(self, store: Store) -> None:
        for waiting in (self._kept, self._droppable):  # what must be kept first
            if waiting.facts:
                facts = dict(waiting.facts)
                await store.put_facts(list(facts.values()))
                for key, fact in facts.items():
                    if waiting.facts.get(key) is fact:  # not changed again meanwhile
                        del waiting.facts[key]
            if waiting.verdicts:
                verdicts = dict(waiting.verdicts)
                await store.put_verdicts(list(verdicts.values()))
                for vkey, verdict in verdicts.items():
                    if waiting.verdicts.get(vkey) is verdict:
                        del waiting.verdicts[vkey]

    async def _follow(self, store: Store) -> None:
        while True:
            changes = await store.changes(self._cursor, _PAGE)
            changed: set[str] = set()
            keys: dict[str, list[str]] = {}
            for fact in changes.facts:
                if fact.kind == META:
                    self._meta[fact.key] = fact.value or ""
                    continue
                if fact.kind not in self._facts or self._waiting(fact.kind, fact.key):
                    continue  # a kind this release does not hold, or learned here since
                if fact.value is None:
                    if self._facts[fact.kind].pop(fact.key, None) is None:
                        continue  # forgotten here already
                elif self._facts[fact.kind].get(fact.key) == fact.value:
                    continue  # this process's own write, read back
                else:
                    self._hold(fact.kind, fact.key, fact.value)
                changed.add(fact.kind)
                keys.setdefault(fact.kind, []).append(fact.key)
            for verdict in changes.verdicts:
                held = self.verdict(verdict.name, verdict.version, verdict.integrity)
                if held is not None and dataclasses.replace(held, seq=verdict.seq) == verdict:
                    # this process's own, read back (the store numbers it): nothing changed,
                    # and the listeners' rebuild of every verdict held is not paid per poll
                    continue
                self._hold_verdict(verdict)
                changed.add("verdict")
            self._cursor = changes.cursor
            for kind, changed_keys in keys.items():
                self._watched(kind, changed_keys, here=False)
            if self.ready:
                for kind in changed:
                    for listener in self.listeners:
                        listener(kind)
            if len(changes.facts) + len(changes.verdicts) < _PAGE:
                return

    def _unreachable(self, operation: str, error: StoreUnavailableError) -> None:
        if self.metrics is not None:
            self.metrics.store_failures.labels(operation).inc()
        if self.reachable or self.problem is None:
            log.error("store_unreachable", reason=str(error), pending=self.pending,
                      consequence="serving from memory; writes wait in the buffer"
                      if self.ready else "not ready until the state store answers")
        self.reachable = False
        self.problem = str(error)

    def _recovered(self) -> None:
        log.info("store_recovered", pending=self.pending, dropped=self._dropped)
        self.problem = None


async def _first(stop: asyncio.Event, wake: asyncio.Event | None) -> Any:
    """Return when `stop` is set, or `wake` when there is one."""
    waits = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waits.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
