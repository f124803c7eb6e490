"""Filling a packument cache entry: both upstreams at once, then the merge and the gate.

`PackumentSource.load` is the loader the packument cache calls on a miss or past the TTL; it
runs once per package however many clients wait, so rule denials, refused tarball URLs and
skipped version keys are counted and logged here, once per fill, never per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import structlog

from mirrorgate import tracing
from mirrorgate.gate.alerts import ALERTING_RULES, denial_alert
from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.kept.firstparty import FirstPartyNames
from mirrorgate.gate.kept.withdrawals import WithdrawnVersions
from mirrorgate.gate.packuments.entry import PackumentEntry, fingerprint
from mirrorgate.gate.packuments.lazyhistory import LazyHistory
from mirrorgate.gate.packuments.merge import Gating
from mirrorgate.gate.records import Gated, RefusedBytes, TooManyVersionsError
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.packument import versions_of
from mirrorgate.offload import Budget, in_thread_if_large
from mirrorgate.rules import ENFORCE, REPORT, KeySet, LiveRules, Rules, live, state_token
from mirrorgate.upstream.client import FILLS, JsonAnswer, Upstream, UpstreamError
from mirrorgate.upstream.keys import RegistryKeys
from mirrorgate.upstream.registry import PrivateRegistry

__all__ = ["DEGRADED_FRESH_FOR", "FirstPartyOutageError", "PackumentSource"]

log = structlog.get_logger("mirrorgate.serve")

DEGRADED_FRESH_FOR = 5.0
"""Seconds a packument built while one upstream was failing is served before it is retried."""
FILL_BYTES = 32 * 1024 * 1024
"""Bytes of public packuments parsed and gated at once, at most (`offload.Budget`)."""
DENIED_LOGGED = 50
"""Denied versions named in a `versions_denied` line; the line always carries the count."""
REFUSALS_LOGGED = 5
"""Refused tarball URLs logged one by one per fill; more are logged as a count."""
HISTORIES = 16
"""Names whose documents are kept ready for the baseline walk (`PackumentSource.history`), at
most, and no more of public's bytes than the fills may parse at once (`FILL_BYTES`): each
holds its public answer's bytes, which the lazily read document points into."""
HISTORY_FOR = 30.0
"""Seconds such documents are reused (the walk of the pull that filled them, and of the
pulls of the same name a moment later), at most: they were gated at one moment, as a fill."""


@dataclass(slots=True)
class _Kept:
    """A name's documents as a one-version fill or a walk read them, ready to gate its other
    versions one at a time (`PackumentSource.history`)."""

    answer: JsonAnswer
    generation: int
    at: datetime
    gating: Gating
    history: LazyHistory | None = None
ALERTS_PER_FILL = 10
"""Versions of one packument alerted on per fill (a malware record can cover every version of
a typosquat); `versions_denied` lists them all."""


def _fresh_for(gated: Gated | None, now: datetime, *, degraded: bool) -> float | None:
    """How long an entry may be served before it is filled again, below the cache's TTL: a
    degraded answer briefly, and never past the moment a verdict changes by itself (a version
    comes of age, a quarantine or an exception ends), so that change reaches clients then."""
    fresh_for = DEGRADED_FRESH_FOR if degraded else None
    if gated is not None and gated.regate_at is not None:
        until = max(0.0, (gated.regate_at - now).total_seconds())
        fresh_for = until if fresh_for is None else min(fresh_for, until)
    return fresh_for


def _unusable(error: orjson.JSONDecodeError) -> UpstreamError:
    """A value of a lazily read packument that orjson refuses (`npm.lazydoc`): the document is
    not usable, as a whole parse would have found."""
    return UpstreamError("public", "invalid", f"the document is not usable JSON "
                         f"({str(error)[:120]})")


class FirstPartyOutageError(UpstreamError):
    """The private upstream failed for a first-party name: 503, never public in its place."""

    def __init__(self, name: PackageName, cause: UpstreamError) -> None:
        cause_text = str(cause).removeprefix(f"{cause.label} upstream: ")
        super().__init__(cause.label, cause.kind, f"{cause_text}; {name.full} is first-party, "
                         "so mirrorgate serves it from the private upstream alone and never "
                         "from public in its place", status=cause.status,
                         retry_after=cause.retry_after)

    @property
    def client_status(self) -> int:
        return 503


class PackumentSource:
    def __init__(self, *, private: PrivateRegistry, public: Upstream, rules: Rules | LiveRules,
                 metrics: Metrics, now: Callable[[], datetime],
                 keys: RegistryKeys | None = None,
                 first_party: FirstPartyNames | None = None,
                 withdrawals: WithdrawnVersions | None = None,
                 refused: Callable[[str], RefusedBytes] | None = None) -> None:
        self.private = private
        self.in_flight = Budget(FILL_BYTES)
        self.keys = keys
        self.public = public
        self._rules = live(rules)
        self.metrics = metrics
        self.now = now
        self.first_party = first_party if first_party is not None else FirstPartyNames()
        self.withdrawals = withdrawals if withdrawals is not None else WithdrawnVersions()
        self.refused = refused
        """The versions of a name the release signals refused (`gate.verdicts.judge`)."""
        self.recent: PackumentCache[JsonAnswer] | None = None
        """Public's answers as sent (bytes), kept for the one-version fills of other versions
        of the same name (`Packuments` sets it; None: every such fill asks public)."""
        self.on_gated: Callable[[Gated], None] | None = None
        """Called with every packument gated (`gate.pulls.exposure`: a version denied now that the
        pull log says was served); never awaited."""
        self._histories: OrderedDict[str, _Kept] = OrderedDict()
        self._history_bytes = 0

    @property
    def rules(self) -> Rules:
        """The rules in force now (they change when the rules file does: `rules.live`)."""
        return self._rules.current

    async def _private_document(self, name: PackageName) -> tuple[dict[str, Any] | None,
                                                                   UpstreamError | None]:
        try:
            return await self.private.packument(name), None
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="private", package=name.full,
                        kind=error.kind, detail=str(error))
            return None, error

    async def _public_answer(self, name: PackageName,
                             etag: str | None) -> JsonAnswer | UpstreamError:
        try:
            return await self.public.get_json(name.url_path(), etag=etag, pool=FILLS,
                                              parse=False)
        except UpstreamError as error:
            log.warning("upstream_failed", upstream="public", package=name.full,
                        kind=error.kind, detail=str(error))
            return error

    async def _public_for(self, name: PackageName, etag: str | None, *,
                          keep: bool) -> JsonAnswer | UpstreamError:
        """Public's answer: revalidated with `etag`, else the bytes a one-version fill of the
        name fetched within the TTL (`recent`), else fetched now (and, with `keep`, for a
        one-version fill, kept for the next)."""
        recent = self.recent
        if etag is not None or recent is None:
            return await self._public_answer(name, etag)
        slot = recent.fresh(name.full)
        if slot is not None:
            return slot.value
        if not keep:
            return await self._public_answer(name, None)

        async def load(_previous: Cached[JsonAnswer] | None) -> Loaded[JsonAnswer]:
            answer = await self._public_answer(name, None)
            if isinstance(answer, UpstreamError):
                raise answer
            return Loaded(answer, len(answer.body) + 256, answer.etag)

        try:
            return (await recent.refresh(name.full, load)).value
        except UpstreamError as error:
            return error

    async def load(self, name: PackageName, previous: Cached[PackumentEntry] | None, *,
                   only: str | None = None, policy: str | None = None) -> Loaded[PackumentEntry]:
        """The entry for `name`, or the previous one when a revalidation says it still holds,
        gated by the rules of `policy` (a policy set's name; None: the default rules).
        With `only`, that one version is judged (a tarball's admission), read from the
        public packument lazily (`npm.lazydoc`). Raises UpstreamError when nothing is
        installable because an upstream failed, TooManyVersionsError for a packument too
        large to gate, and UnknownPolicyError for a policy the rules do not define."""
        rules = self.rules.policy(policy)
        with tracing.span("mirrorgate.fill", {"mirrorgate.package": name.full,
                                              "mirrorgate.revalidation": previous is not None}):
            return await self._load(name, previous, only, rules)

    async def history(self, name: PackageName) -> LazyHistory | None:
        """`name`'s releases for the baseline walk, each gated alone under the default rules
        as the walk reaches it (`gate.packuments.lazyhistory`), from public's answer kept for the
        one-version fills (`recent`) and the private document; kept for the walks of the
        next few moments. None where the whole packument's gating is to answer instead: a
        first-party name, an upstream failing, a packument too large to gate."""
        rules = self.rules
        full = name.full
        if rules.private_alone(full) or full in self.first_party:
            return None
        now = self.now()
        recent = self.recent.fresh(full) if self.recent is not None else None
        kept = self._histories.get(full)
        # public's answer kept since is another (a newer) one: gated again from it; one too
        # large for `recent` to keep is not fetched again within the moment
        if (kept is None or (recent is not None and kept.answer is not recent.value)
                or kept.generation != rules.generation
                or (now - kept.at).total_seconds() >= HISTORY_FOR):
            (private, private_error), public, keys = await asyncio.gather(
                self._private_document(name), self._public_for(name, None, keep=True),
                self._keys(rules))
            if private_error is not None or not isinstance(public, JsonAnswer) or (
                    public.status != 200):
                return None
            async with self.in_flight.hold(public.size // 8):
                try:
                    document = await self._document(name, public, lazily=True)
                    gating = await in_thread_if_large(public.size, self._gating, name,
                                                      private, document, now, keys, rules)
                except (UpstreamError, TooManyVersionsError, orjson.JSONDecodeError):
                    return None  # the whole packument's fill says why, as it always has
            kept = self._keep(full, public, rules, now, gating)
        if kept.history is None:
            # every version listed, its time and order: in a thread for a large packument
            kept.history = await in_thread_if_large(kept.answer.size, LazyHistory,
                                                    kept.gating)
        return kept.history

    def _keep(self, full: str, answer: JsonAnswer, rules: Rules, now: datetime,
              gating: Gating) -> _Kept:
        """Keep `full`'s documents for the walks of the next moments, the oldest going past
        `HISTORIES` names or `FILL_BYTES` of public's answers."""
        self.forget_history(full)
        kept = self._histories[full] = _Kept(answer, rules.generation, now, gating)
        self._history_bytes += answer.size
        while len(self._histories) > 1 and (len(self._histories) > HISTORIES
                                            or self._history_bytes > FILL_BYTES):
            _name, gone = self._histories.popitem(last=False)
            self._history_bytes -= gone.answer.size
        return kept

    def forget_history(self, full: str | None = None) -> None:
        """Drop the kept history of the name `full` (None: of every name): a fact it was
        gated without has changed (`Packuments.drop`)."""
        if full is None:
            self._histories.clear()
            self._history_bytes = 0
        elif (gone := self._histories.pop(full, None)) is not None:
            self._history_bytes -= gone.answer.size

    async def _document(self, name: PackageName, answer: JsonAnswer,
                        lazily: bool) -> Mapping[str, Any] | None:
        """The document of a 200, checked to be `name`'s packument: read lazily for a
        one-version fill (`npm.lazydoc`), else (or when it must be) parsed whole."""
        if lazily:
            return await self.public.lazy_packument_of(name, answer)
        return self.public.packument_of(name, await self.public.parsed(answer)).document

    async def _load(self, name: PackageName, previous: Cached[PackumentEntry] | None,
                    only: str | None, rules: Rules) -> Loaded[PackumentEntry]:
        now = self.now()
        full = name.full
        # A name `[private].names` covers, or one remembered as first-party (`firstparty`),
        # that `merge_public` does not cover is never asked of the public upstream: the
        # private answer alone builds it.
        if rules.private_alone(full) or (
                full in self.first_party and not rules.merge_public.covers_name(full)):
            alone = await self._load_private_alone(name, now, rules)
            if alone is not None:
                return alone
        old = previous.value if previous is not None else None
        # a 304 keeps the old gating only while nothing it depended on has moved: no age denial
        # has come of age, and the advisory index is the same one, equally available
        revalidate = (old is not None and old.gated is not None
                      and old.gated.rules_generation == rules.generation
                      and (old.gated.regate_at is None or now < old.gated.regate_at)
                      and old.gated.advisories == state_token(rules.advisories, now))
        etag = previous.validator if revalidate and previous is not None else None
        # Either upstream may fail on its own (logged `upstream_failed`): the packument is built
        # from what answered, held only DEGRADED_FRESH_FOR so the missing half is asked again.
        (private, private_error), public, keys = await asyncio.gather(
            self._private_document(name),
            self._public_for(name, etag, keep=only is not None), self._keys(rules))
        # A first-party name whose private side fails raises (503): the cache serves its stale
        # entry within `stale_if_error`, never a public-only packument. A name never seen
        # first-party is built from public alone meanwhile.
        if private_error is not None and full in self.first_party:
            raise self._outage(name, private_error)  # merge_public: no public-only answer
        private_print = fingerprint(private)
        # a 304 with the private answer unchanged keeps the previous entry as it is, renderings
        # included; otherwise the public packument is fetched again in full and rebuilt
        if isinstance(public, JsonAnswer) and public.status == 304:
            if previous is not None and old is not None and old.fingerprint == private_print:
                return Loaded(old, previous.size, public.etag,
                              fresh_for=_fresh_for(old.gated, now, degraded=False))
            public = await self._public_answer(name, None)
        public_error = public if isinstance(public, UpstreamError) else None
        answer = public if isinstance(public, JsonAnswer) else None
        # The parse and the gate hold their bytes against the fills' budget: a parsed packument
        # is four times its bytes and its gated versions another one and a half, so at most
        # `FILL_BYTES` of packuments are worked on at once (a larger one alone); the others
        # wait with their bytes alone, unparsed. Read lazily for one version, a packument
        # adds a tenth of its bytes or less (where each value lies, one version parsed): a
        # cold install's tarballs do not queue behind one another's 20 MB packuments.
        held = answer.size if answer is not None else 0
        async with self.in_flight.hold(held if only is None else held // 8):
            public_doc: Mapping[str, Any] | None = None
            read: JsonAnswer | None = None  # the answer `public_doc` was read from
            if answer is not None and answer.status == 200:
                try:
                    # in a thread when large; a 200 that is not this name's packument is a
                    # failed answer (stale-if-error), never a withdrawal of what it lacks
                    public_doc = await self._document(name, answer, only is not None)
                    read = answer
                    answer = JsonAnswer(200, None, answer.etag, answer.size)  # the bytes go
                except UpstreamError as error:
                    log.warning("upstream_failed", upstream="public", package=full,
                                kind=error.kind, detail=str(error))
                    answer, public_error = None, error
            failure = public_error or private_error
            if failure is not None and not (self.first_party.known and self.withdrawals.known):
                # what the state store remembers is not loaded yet (/readyz says why): an
                # upstream's silence cannot be filled in from it, so it fails closed
                raise failure
            if private is None and public_doc is None:
                if failure is not None:
                    raise failure
                # both say there is no such package: an entry with no packument (a 404),
                # cached like any other
                self.first_party.forget(full)
                return Loaded(PackumentEntry(None, None), 256)
            size = answer.size if answer is not None else 0
            # in a thread above offload.THREAD_ABOVE bytes: a 10 MB packument does not stall
            # the event loop for every other client
            with tracing.span("mirrorgate.gate", {"mirrorgate.package": full}) as judged:
                gated, gating = await in_thread_if_large(size, self._judged, name, private,
                                                         public_doc, now, keys, rules, only)
            if (only is not None and read is not None and private_error is None
                    and rules.policy_name is None and not gated.first_party
                    and rules.release.compares_early):
                # a first pull that compares walks the name's other versions next
                # (`history`): gated from these documents, not read again. Not kept when no
                # pull compares from its start (the defaults: `new-capability` walks only
                # for a release whose code shows a capability it could have gained, rare):
                # `FILL_BYTES` of public's answers and their gatings held 30 s for walks that
                # never come; the rare walk reads public's answer again (`recent`)
                self._keep(full, read, rules, now, gating)
                judged.set("mirrorgate.versions", len(gated.versions))
                judged.set("mirrorgate.denied", sum(gated.denials.values()))
            etag = answer.etag if answer is not None else None
            del public_doc, answer  # the parse goes with the budget it was held against
        if failure is not None and not gated.survivors:
            raise failure  # nothing installable and an upstream failed: 502, 503 or 504
        if public_error is not None:  # served from private alone: say so for what is missing
            gated = dataclasses.replace(gated, public_failure=public_error)
        if gated.first_party:
            self.first_party.remember(full)
        elif private_error is None:
            self.first_party.forget(full)
        if private is not None:
            private_versions = versions_of(private)
            if only is not None:  # what was judged: the others' memory stands as it is
                private_versions = ({only: private_versions[only]} if only in private_versions
                                    else {})
            self._note_withdrawals(gated, private_versions)
        self._report(gated, rules)
        # gated before the advisory index's first load, or without the keys signatures need:
        # held briefly, like a degraded answer, so either applies within seconds of landing
        before_index = gated.advisories is not None and gated.advisories[0] == 0
        unverified = rules.signatures.verify and keys is None
        entry = PackumentEntry(gated, private_print, private_answered=private_error is None)
        return Loaded(entry, gated.size + 256, etag,
                      fresh_for=_fresh_for(gated, now, degraded=failure is not None
                                           or before_index or unverified))

    async def _keys(self, rules: Rules) -> KeySet | None:
        """The registry's keys when the rules verify signatures (fetched concurrently with the
        packuments, bounded by `keys.FIRST_WAIT`); None otherwise or while unavailable."""
        if not rules.signatures.verify or self.keys is None:
            return None
        return await self.keys.current()

    async def _load_private_alone(self, name: PackageName, now: datetime,
                                  rules: Rules) -> Loaded[PackumentEntry] | None:
        """The entry of a name served from the private side alone; None when the private side
        no longer holds it as first-party (the caller then builds it as a public name)."""
        private, error = await self._private_document(name)
        if error is not None:
            raise self._outage(name, error)
        owned = rules.private_alone(name.full)
        if private is None and not owned:
            # Remembered first-party, and now the private side knows no such package at all.
            # That is how Artifactory and GitHub Packages answer a token that lost its read
            # permission, and how an unmounted storage volume answers: an outage, not a hand-
            # over of the name to public, where an impostor may wait. (To release a name on
            # purpose, the operator deletes the name's fact from the state store,
            # docs/state-store.md.)
            raise self._outage(name, UpstreamError(
                "private", "status", "answered 404 for a name it held first-party versions of",
                status=404))
        gated = (self._gate(name, private, None, now, None, rules) if private is not None
                 else None)
        if not owned and (gated is None or not gated.first_party):
            # only mirrored versions left: a public name again. Asking the
            # private side once more on the way is the price of a rare transition.
            self.first_party.forget(name.full)
            return None
        if gated is None:
            # owned, and the private side lacks it: 404
            return Loaded(PackumentEntry(None, None), 256)
        self.first_party.remember(name.full)
        self._report(gated, rules)
        return Loaded(PackumentEntry(gated, fingerprint(private)), gated.size + 256, None,
                      fresh_for=_fresh_for(gated, now, degraded=False))

    def _outage(self, name: PackageName, error: UpstreamError) -> FirstPartyOutageError:
        self.metrics.refusals.labels("first_party_private_failed").inc()
        log.warning("first_party_private_failed", package=name.full, kind=error.kind,
                    detail=str(error))
        return FirstPartyOutageError(name, error)

    def _gate(self, name: PackageName, private: Mapping[str, Any] | None,
              public: Mapping[str, Any] | None, now: datetime,
              keys: KeySet | None, rules: Rules, only: str | None = None) -> Gated:
        return self._judged(name, private, public, now, keys, rules, only)[0]

    def _judged(self, name: PackageName, private: Mapping[str, Any] | None,
                public: Mapping[str, Any] | None, now: datetime, keys: KeySet | None,
                rules: Rules, only: str | None = None) -> tuple[Gated, Gating]:
        """`_gate`, and what gated it (`_gating`)."""
        try:
            gating = self._gating(name, private, public, now, keys, rules)
            return gating.gate(only), gating
        except orjson.JSONDecodeError as error:
            raise _unusable(error) from None

    def _gating(self, name: PackageName, private: Mapping[str, Any] | None,
                public: Mapping[str, Any] | None, now: datetime, keys: KeySet | None,
                rules: Rules) -> Gating:
        """What gates `name`'s versions (all, one, or one at a time), with what this process
        remembers of it: the withdrawals seen, the release signals' refusals."""
        withdrawn = (self.withdrawals.of(name.full, versions_of(private))
                     if private is not None else None)
        refused = self.refused(name.full) if self.refused is not None else None
        return Gating(name, private, public, rules=rules, now=now, origin=self.public.origin,
                      keys=keys, withdrawn=withdrawn, refused=refused)

    def _note_withdrawals(self, gated: Gated, private_versions: Mapping[str, Any]) -> None:
        """Remember what this fill found withdrawn (and forget what public lists again with
        the mirror's bytes); a withdrawal seen for the first time is a security event."""
        for version in self.withdrawals.record(gated.name.full, private_versions,
                                               gated.withdrawals):
            log.critical("public_withdrawn", security=True, package=gated.name.full,
                         version=version, first_seen=gated.withdrawals[version],
                         consequence="the mirrored copy is no longer served")
            record = gated.versions.get(version)
            reason = (record.denial.reason if record is not None and record.denial is not None
                      else "the public registry no longer lists it")
            self.metrics.events.withdrawn(gated.name.full, version, reason,
                                          first_seen=gated.withdrawals[version])

    def _report(self, gated: Gated, rules: Rules) -> None:
        if gated.alone is None:
            # one version gated alone that is denied is gated again whole (its refusal names
            # the versions to use instead), which counts it: one refused pull, one denial
            for rule, count in gated.denials.items():
                self.metrics.rule_denials.labels(rule, ENFORCE).inc(count)
        self._report_would_deny(gated)
        denied = gated.denied
        if denied:
            # The one trace of a version a client was never shown: pnpm, yarn and bun only
            # say "no matching version", so this line is where a person finds out why.
            by = sorted({record.denial.rule for record in gated.versions.values()
                         if record.denial is not None})
            log.info("versions_denied", package=gated.name.full,
                     versions=denied[:DENIED_LOGGED], count=len(denied), rules=by,
                     **({"policy": rules.policy_name} if rules.policy_name else {}))
        self._remember_denials(gated)
        self._alert(gated)
        if self.on_gated is not None and rules.policy_name is None:
            # a version turned bad is a fact about it (a deny entry, an advisory), told once:
            # a policy set's own deny list says what one team keeps out, not that the version
            # is bad for those who were served it
            self.on_gated(gated)
        for refusal in gated.refused_urls[:REFUSALS_LOGGED]:
            log.warning("tarball_url_refused", package=gated.name.full,
                        version=refusal.version, kind=refusal.kind, reason=refusal.detail)
        if len(gated.refused_urls) > REFUSALS_LOGGED:
            log.warning("tarball_urls_refused", package=gated.name.full,
                        count=len(gated.refused_urls))
        if gated.refused_urls:
            self.metrics.refusals.labels("tarball_url").inc(len(gated.refused_urls))
        if gated.skipped:
            self.metrics.refusals.labels("bad_version_key").inc(gated.skipped)
            log.warning("packument_versions_skipped", package=gated.name.full,
                        count=gated.skipped, reason="version keys that are not plain version "
                        "strings, or manifests that are not objects")
        log.info("packument_filled", package=gated.name.full,
                 versions=len(gated.versions), denied=sum(gated.denials.values()))

    def _report_would_deny(self, gated: Gated) -> None:
        """What rules in report mode would have denied: served all the same, and said so (a
        line per version, the first few; the metric with `mode="report"`; the status page)."""
        if not gated.reported:
            return
        for rule, count in gated.reported.items():
            self.metrics.rule_denials.labels(rule, REPORT).inc(count)
        shown = [record for record in gated.versions.values() if record.reported]
        for record in shown[:DENIED_LOGGED]:
            for would in record.reported:
                log.info("version_would_deny", package=gated.name.full,
                         version=record.version, rule=would.rule, reason=would.reason)
            self.metrics.events.record("would-deny", f"{gated.name.full}@{record.version}",
                                       f"{record.reported[0].rule}: "
                                       f"{record.reported[0].reason}")
        if len(shown) > DENIED_LOGGED:
            log.info("versions_would_deny", package=gated.name.full, count=len(shown),
                     rules=sorted(gated.reported))

    def _alert(self, gated: Gated) -> None:
        """The denials a security team hears of (malware, takeover signals), from the end of the
        packument's list (usually the newest); repeats within the notifier's window are
        counted there, not sent again."""
        if not any(rule in ALERTING_RULES for rule in gated.denials):
            return
        raised = 0
        for record in reversed(gated.versions.values()):
            if record.denial is None or record.denial.rule not in ALERTING_RULES:
                continue
            alert = denial_alert(gated.name.full, record.version, record.denial, "packument")
            if alert is not None:
                self.metrics.events.alert(alert)
                raised += 1
                if raised >= ALERTS_PER_FILL:
                    return

    def _remember_denials(self, gated: Gated) -> None:
        """One status-page event per rule per fill, with one version's reason as the example
        (a deny-list range can deny hundreds of versions at once)."""
        for rule, count in gated.denials.items():
            example = next(r for r in gated.versions.values()
                           if r.denial is not None and r.denial.rule == rule)
            assert example.denial is not None
            more = f" (and {count - 1} more)" if count > 1 else ""
            self.metrics.events.denied(f"{gated.name.full}@{example.version}{more}", rule,
                                       example.denial.reason)
