"""The gate itself: private and public packuments merged, every version judged by the rules.

`gate` runs once per cache fill, in steps: who owns the name, the public versions (the origin
lock, then the rules), the private versions (mirrored ones by every rule, first-party ones by
the deny list), then tags, times and the head. Pure (no I/O, no clock of its own), so the fill
can run it in a thread and tests can call it directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from mirrorgate.gate.packuments.times import first_publish_of
from mirrorgate.gate.records import (
    MAX_VERSIONS,
    RECORD_BYTES,
    Denial,
    Gated,
    RefusedBytes,
    TooManyVersionsError,
    UrlRefusal,
    VersionRecord,
    policy_message,
)
from mirrorgate.integrity import Digest, digests_from_dist, parse_integrity, strongest_sri
from mirrorgate.moments import iso_now, moment, time_text
from mirrorgate.npm.lazydoc import reduced
from mirrorgate.npm.licenses import declared_license
from mirrorgate.npm.mirrormark import MARK_FIELD, without_mark
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.origins import Origin, OriginRefusal, check_on_origin
from mirrorgate.npm.ownership import first_party_versions, mirrored_mark
from mirrorgate.npm.packument import (
    merge_head,
    merge_tags,
    serialise,
    times_of,
    versions_of,
)
from mirrorgate.npm.versions import Key, is_version_string, parse_version
from mirrorgate.rules import (
    REPORT,
    Context,
    KeySet,
    Rules,
    Verdict,
    deny_listed,
    evaluate,
    needs_history,
    scripts_blocked,
    scripts_reported,
    state_token,
)
from mirrorgate.rules.license import LicenseRead
from mirrorgate.rules.takeover import HISTORY_FIELDS

__all__ = ["PUBLIC_WITHDRAWN", "TARBALL_ORIGIN", "Gating", "Withdrawn", "gate"]

TARBALL_ORIGIN = "tarball-origin"
"""The rule name for a version whose tarball URL is off the public upstream's origin."""
PUBLIC_WITHDRAWN = "public-withdrawn"
"""The rule name for a mirrored version the public registry no longer lists (a takedown)."""

Withdrawn = Mapping[str, str]
"""Mirrored versions of one package the public registry withdrew: version -> the moment the
withdrawal was first seen (ISO 8601)."""

PublicGate = tuple[str | None, tuple[Digest, ...]]
"""What the gate kept of a public version: its tarball URL when admitted, and its digests."""


@dataclass
class _Judging:
    """What one gating gathers while it walks the versions."""

    name: PackageName
    rules: Rules
    now: datetime
    context: Context
    records: dict[str, VersionRecord] = field(default_factory=dict)
    denied: dict[str, Denial] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    refused: list[UrlRefusal] = field(default_factory=list)
    reported: dict[str, int] = field(default_factory=dict)
    withdrawals: dict[str, str] = field(default_factory=dict)
    skipped: int = 0
    regate_at: datetime | None = None
    license_read: LicenseRead | None = None
    """How the license rule reads a public tarball: one for the whole gating."""

    def __post_init__(self) -> None:
        if self.rules.license.on:
            self.license_read = LicenseRead(self.rules.license,
                                            self.rules.mode_of("license") == REPORT)

    def deny(self, version: str, denial: Denial) -> None:
        self.denied[version] = denial
        self.counts[denial.rule] = self.counts.get(denial.rule, 0) + 1

    def regate_by(self, moment_: datetime | None) -> None:
        if moment_ is not None and (self.regate_at is None or moment_ < self.regate_at):
            self.regate_at = moment_

    def denial_of(self, verdict: Verdict) -> Denial | None:
        """The verdict as a denial (None when admitted), noting when it changes by itself
        and what report-mode rules would have denied."""
        self.regate_by(verdict.until)
        for rule, _reason in verdict.reported:
            self.reported[rule] = self.reported.get(rule, 0) + 1
        if verdict.admitted:
            return None
        return Denial(verdict.rule or "unknown", verdict.reason or "denied",
                      until=verdict.until)

    def scans(self, tarball: str | None, version: str,
              manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Whether the tarball scan reads this version's bytes, and whether what it finds is
        only reported (the install-scripts rule in report mode); the license it declares,
        whether the license rule reads the tarball's own, its shasum: VersionRecord's fields."""
        scan = tarball is not None and scripts_blocked(self.rules, self.name.full, version)
        dist = manifest.get("dist")
        shasum = dist.get("shasum") if isinstance(dist, Mapping) else None
        return {"scan_scripts": scan, "scan_reports": scan and scripts_reported(self.rules),
                "license": declared_license(manifest),
                "license_read": self.license_read if tarball is not None else None,
                "sha1": shasum if isinstance(shasum, str) and len(shasum) == 40 else None}


def _origin_denial(judging: _Judging, version: str, url: object,
                   origin: Origin) -> Denial | None:
    """The origin lock: a tarball URL off the public upstream's origin denies the version."""
    try:
        if not isinstance(url, str):
            raise OriginRefusal("missing", "the version's dist.tarball is missing")
        check_on_origin(url, origin)
    except OriginRefusal as refusal:
        judging.refused.append(UrlRefusal(version, refusal.kind, str(refusal)))
        return Denial(TARBALL_ORIGIN, f"{judging.name.full}@{version}'s tarball URL is not "
                      f"followed: {refusal}")
    return None


def _readable(judging: _Judging, version: str, manifest: object) -> bool:
    # version keys become tarball file names in URLs the proxy serves
    if is_version_string(version) and isinstance(manifest, Mapping):
        return True
    judging.skipped += 1
    return False


def _chosen(versions: Mapping[str, Any], only: str | None) -> Iterable[tuple[str, Any]]:
    """The versions to judge: all of them, or the one named (when listed)."""
    if only is None:
        return versions.items()
    return [(only, versions[only])] if only in versions else []


def _gate_public(judging: _Judging, public: Mapping[str, Any] | None,
                 private_versions: Mapping[str, Any], origin: Origin,
                 only: str | None, refused: RefusedBytes) -> dict[str, PublicGate]:
    """Judge every public version; record those the private side does not shadow. Returns
    what was kept of each, for a mirrored private copy to fall back on."""
    times = times_of(public)
    kept: dict[str, PublicGate] = {}
    shadows = _shadowing(private_versions)
    for version, manifest in _chosen(versions_of(public), only):
        if not _readable(judging, version, manifest):
            continue
        if MARK_FIELD in manifest:
            manifest = without_mark(manifest)  # only the worker marks what it mirrored
        dist = manifest.get("dist")
        url = dist.get("tarball") if isinstance(dist, Mapping) else None
        digests = digests_from_dist(dist) if isinstance(dist, Mapping) else ()
        denial = _origin_denial(judging, version, url, origin)
        verdict = None
        if denial is None:
            verdict = evaluate(judging.rules, judging.name.full, version, manifest,
                               times.get(version), judging.now, context=judging.context,
                               digests=digests)
            denial = judging.denial_of(verdict)
        if denial is None and (denial := _refused(refused, version, digests)) is not None:
            # a release signal read these bytes at a pull and refused them: out of the
            # packument too, so a range resolves to the version before it
            judging.regate_by(denial.until)
        tarball = url if denial is None and isinstance(url, str) else None
        kept[version] = (tarball, digests)
        if isinstance(private_versions.get(version), Mapping) or (
                shadows and (parsed := parse_version(version)) is not None
                and parsed.key in shadows):
            continue  # on a version present in both, the private copy wins
        if denial is not None:
            judging.deny(version, denial)
        full, abbreviated = serialise(judging.name, version, manifest)
        judging.records[version] = VersionRecord(
            version, False, full, abbreviated, denial, verdict is not None and verdict.weak,
            tarball, digests, **judging.scans(tarball, version, manifest), **_asides(verdict))
    return kept


def _refused(refused: RefusedBytes, version: str,
             digests: tuple[Digest, ...]) -> Denial | None:
    """The release signals' refusal of these bytes of `version` (by their strongest digest):
    a refusal of other bytes listed before under the same version is not theirs."""
    of_version = refused.get(version)
    return of_version.get(strongest_sri(digests)) if of_version else None


def _asides(verdict: Verdict | None) -> dict[str, Any]:
    """What a record keeps of an admitted verdict besides "admitted": the report-mode rules
    that would have denied it, the exceptions that let it through."""
    if verdict is None or not (verdict.reported or verdict.excepted):
        return {}
    return {"reported": tuple(Denial(rule, reason) for rule, reason in verdict.reported),
            "excepted": verdict.excepted}


def _shadowing(private_versions: Mapping[str, Any]) -> set[Key]:
    """The semver keys of the private versions: a public version equal to one of them (as
    semver ranks it: `1.1.0` and `1.1.0+shadow` are one version) is the private copy's."""
    return {parsed.key for version in private_versions
            if (parsed := parse_version(version)) is not None}


def _private_verdict(judging: _Judging, version: str,
                     manifest: Mapping[str, Any]) -> tuple[Verdict | None, bool, str | None]:
    """The verdict on a private version, whether it was mirrored, and the publish time it was
    judged with: a mirrored one by every rule, with the public time its mark carries; a
    first-party one by the deny list alone (None when nothing denies it)."""
    mark = mirrored_mark(manifest)
    if mark is None:
        dist = manifest.get("dist")
        own = strongest_sri(digests_from_dist(dist) if isinstance(dist, Mapping) else ())
        return (deny_listed(judging.rules, judging.name.full, version, judging.now, own),
                False, None)
    # the same context as public versions: the registry's keys for its signatures (kept in
    # what the worker published), the public history for the takeover signals; a waiver
    # names the bytes as the mark does (`VersionRecord.integrity`)
    return (evaluate(judging.rules, judging.name.full, version, without_mark(manifest),
                     mark.published, judging.now, context=judging.context,
                     integrity=strongest_sri(parse_integrity(mark.integrity))), True,
            mark.published)


def _withdrawn(judging: _Judging, version: str, manifest: Mapping[str, Any],
               public: Mapping[str, Any] | None, remembered: Withdrawn) -> Denial | None:
    """A mirrored version the public registry withdrew: public answered for the name and no
    longer lists it (a placeholder such as `0.0.1-security`, or npm's unpublished tombstone,
    lists none of the mirrored ones), or it did before and has not answered since. Listed
    again with the bytes the mirror holds, it is served again; with other bytes it stays
    withdrawn."""
    if public is None and version not in remembered:
        return None  # silence (public failing, a 404, a first-party name) is no withdrawal
    if public is not None:
        listed = versions_of(public).get(version)
        mark = mirrored_mark(manifest)
        if (isinstance(listed, Mapping) and mark is not None
                and _same_bytes(listed, mark.integrity)):
            return None  # listed (again) with the bytes the mirror holds
        if isinstance(listed, Mapping) and version not in remembered:
            return None  # other bytes under a version public lists: the rules judge that
    seen = remembered.get(version) or iso_now(judging.now)
    judging.withdrawals[version] = seen
    return Denial(PUBLIC_WITHDRAWN, f"{judging.name.full}@{version} was withdrawn from the "
                  f"public registry (first seen {seen}); the mirror no longer serves its copy",
                  since=seen)


def _same_bytes(listed: Mapping[str, Any], integrity: str) -> bool:
    dist = listed.get("dist")
    return isinstance(dist, Mapping) and any(
        digest in digests_from_dist(dist) for digest in parse_integrity(integrity))


def _gate_private(judging: _Judging, private_versions: Mapping[str, Any],
                  public_kept: Mapping[str, PublicGate], public: Mapping[str, Any] | None,
                  remembered: Withdrawn, only: str | None,
                  refused: RefusedBytes) -> None:
    for version, manifest in _chosen(private_versions, only):
        if not _readable(judging, version, manifest):
            continue
        judged, mirrored, _published = _private_verdict(judging, version, manifest)
        # A takedown outranks every rule's word on a copy, an exception's and report mode's
        # included: the registry that published the version has withdrawn it. It is checked
        # whatever the rules say, so that the memory of it is complete.
        withdrawn = (_withdrawn(judging, version, manifest, public, remembered) if mirrored
                     else None)
        denial = withdrawn or (judging.denial_of(judged) if judged is not None else None)
        mark = mirrored_mark(manifest) if mirrored and version in refused else None
        if denial is None and mark is not None and (denial := _refused(
                refused, version, parse_integrity(mark.integrity))) is not None:
            # a copy of bytes a release signal refuses under today's rules (flagged in report
            # mode and mirrored, then enforced): refused from the mirror as a withdrawal is
            judging.regate_by(denial.until)
        if denial is not None:
            judging.deny(version, denial)
        # Public's copy of a mirrored version is the fallback when the private tarball
        # fails; a first-party version never falls back to bytes published by someone else.
        tarball, digests = public_kept.get(version, (None, ()))
        if denial is not None or not mirrored or tarball is None:
            tarball, digests = None, ()
        full, abbreviated = serialise(judging.name, version, manifest)
        judging.records[version] = VersionRecord(
            version, True, full, abbreviated, denial,
            judged.weak if judged is not None else False, tarball, digests,
            # public's bytes stand in when the private copy fails: read like any public relay
            **judging.scans(tarball, version, manifest),
            **(_asides(judged) if withdrawn is None else {}))


def _mirrored_time(manifest: object) -> str | None:
    """The public publish time a mirrored version's mark carries (None for a first-party
    version, or a mark without a usable time): the registry's own `time` for it is the moment
    of mirroring, which would make every age gate see a copy as a brand-new release."""
    if not isinstance(manifest, Mapping):
        return None
    mark = mirrored_mark(manifest)
    if mark is None or moment(mark.published) is None:
        return None
    return mark.published


def _merge_time(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
                records: Mapping[str, VersionRecord]) -> dict[str, str]:
    """`created`, `modified` and the survivors' times; a mirrored version's is the public time
    its mark carries (`_mirrored_time`). Only times `moments` reads are passed on: npm
    refuses a version whose time it cannot parse (`Date.parse` is NaN: "No matching version
    found") and an unreadable one says nothing; a version without one is installed."""
    private_times, public_times = times_of(private), times_of(public)
    merged: dict[str, str] = {}
    for key, pick in (("created", min), ("modified", max)):
        found = [(when, t[key]) for t in (public_times, private_times)
                 if (when := moment(t.get(key))) is not None]
        if found:
            merged[key] = pick(found)[1]
    private_versions = versions_of(private)
    for version, record in records.items():
        if record.denial is not None:
            continue
        stamp = _version_time(version, record.private, private_versions, private_times,
                              public_times)
        if stamp is not None:
            merged[version] = stamp
    return merged


def _version_time(version: str, private: bool, private_versions: Mapping[str, Any],
                  private_times: Mapping[str, Any], public_times: Mapping[str, Any]) -> str | None:
    """An admitted version's time in the merged `time` (`_merge_time`): a mirrored copy's
    mark, else its own side's, else the other side's; None when none can be read."""
    if private and (marked := _mirrored_time(private_versions.get(version))):
        return marked
    stamp = time_text((private_times if private else public_times).get(version))
    if stamp is None:
        stamp = time_text((public_times if private else private_times).get(version))
    return stamp


def _check_sizes(name: PackageName, private: Mapping[str, Any],
                 public: Mapping[str, Any]) -> None:
    for label, versions in (("private", private), ("public", public)):
        if len(versions) > MAX_VERSIONS:
            raise TooManyVersionsError(
                f"the {label} packument of {name.full} lists {len(versions)} versions; "
                f"mirrorgate gates at most {MAX_VERSIONS}")


def gate(
    name: PackageName,
    private: Mapping[str, Any] | None,
    public: Mapping[str, Any] | None,
    *,
    rules: Rules,
    now: datetime,
    origin: Origin,
    keys: KeySet | None = None,
    withdrawn: Withdrawn | None = None,
    only: str | None = None,
    refused: RefusedBytes | None = None,
) -> Gated:
    """Merge the private and public packuments (either may be None) and gate the versions.
    `keys` are the public registry's signing keys, for the signature rule (None: unavailable);
    `withdrawn`, the mirrored versions of this package the public registry was seen to
    withdraw before (`public` None means it did not answer, or has no such package: neither
    withdraws anything); `refused`, the public versions a release signal refused at a pull
    (`gate.verdicts.judge`), denied as they say. `only` judges that one version alone (the worker's
    re-gate reads one record): ownership, the size bound and the history the rules read still
    come from the whole documents, but no other version is judged or serialised, so the tags,
    times and size describe it alone, and the head (readme, description...) is left empty.

    Raises TooManyVersionsError when either document lists more than `MAX_VERSIONS` versions.
    """
    return Gating(name, private, public, rules=rules, now=now, origin=origin, keys=keys,
                  withdrawn=withdrawn, refused=refused).gate(only)


class Gating:
    """What `gate` reads of the whole documents before it judges a version (ownership, the
    size bound, the history the rules read, the first publish), read once: the baseline walk
    judges the versions it reaches one at a time (`gate.packuments.lazyhistory`), each as
    `gate(only=)` would. Raises TooManyVersionsError as `gate` does."""

    def __init__(self, name: PackageName, private: Mapping[str, Any] | None,
                 public: Mapping[str, Any] | None, *, rules: Rules, now: datetime,
                 origin: Origin, keys: KeySet | None = None,
                 withdrawn: Withdrawn | None = None,
                 refused: RefusedBytes | None = None) -> None:
        # Ownership first: a name the private upstream holds an unmarked version of, or that
        # `[private].names` covers, is served from the private side alone unless
        # `merge_public`.
        first_party = rules.owned.covers_name(name.full) or bool(first_party_versions(private))
        if first_party and not rules.merge_public.covers_name(name.full):
            public = None  # the name is the organisation's: no public version, tag or field
        self.name, self.private, self.public = name, private, public
        self.rules, self.now, self.origin, self.keys = rules, now, origin, keys
        self.withdrawn, self.refused = withdrawn or {}, refused or {}
        self.first_party = first_party
        self.private_versions, self.public_versions = versions_of(private), versions_of(public)
        _check_sizes(name, self.private_versions, self.public_versions)
        # read before gating: an index swapped mid-way makes the next fill rebuild, not reuse
        self.advisories = state_token(rules.advisories, now)
        # The history the takeover rules read is built once here, not once per version.
        # Read lazily (a tarball's one-version fill), the history parses the fields it reads
        # alone.
        history = needs_history(rules)
        self.context = Context.of(
            reduced(self.public_versions, HISTORY_FIELDS) if history else {},
            times_of(public), needs_history=history, keys=keys)
        self.first = first_publish_of(private, public)

    def gate(self, only: str | None = None) -> Gated:
        """Every version judged, or `only` that one (`gate`)."""
        name, private, public, rules = self.name, self.private, self.public, self.rules
        judging = _Judging(name, rules, self.now, self.context)
        if rules.signatures.verify and self.keys is None and self.public_versions:
            # gated without the keys it should have had: gated again at its next fill (now),
            # so a revalidation cannot keep it once the keys are back
            judging.regate_by(self.now)
        public_kept = _gate_public(judging, public, self.private_versions, self.origin, only,
                                   self.refused)
        _gate_private(judging, self.private_versions, public_kept, public, self.withdrawn,
                      only, self.refused)

        records = judging.records
        survivors = [v for v, record in records.items() if record.denial is None]
        # one version judged alone is read for its record, never rendered: no readme to keep
        head = merge_head(private, public, self.first_party) if only is None else {}
        size = len(orjson.dumps(head)) + sum(
            len(r.full) + len(r.abbreviated) + RECORD_BYTES for r in records.values())
        return Gated(
            name=name,
            head=head,
            dist_tags=merge_tags(private, public, survivors, self.first_party),
            time=_merge_time(private, public, records),
            versions=records,
            policy_message=(policy_message(name, judging.denied, survivors) if judging.denied
                            else None),
            denials=judging.counts,
            reported=judging.reported,
            refused_urls=tuple(judging.refused),
            skipped=judging.skipped,
            regate_at=judging.regate_at,
            size=size,
            advisories=self.advisories,
            first_party=self.first_party,
            rules_generation=rules.generation,
            withdrawals=judging.withdrawals,
            alone=only,
            first_published=self.first.when,
            time_doubts=self.first.doubts,
        )

    def listed(self) -> dict[str, str | None]:
        """Every version a record could be gated for, in the order `gate` records them (the
        public side's not shadowed by a private one, then the private side's), each with the
        time `gate` gives it when it is admitted (`_version_time`; a denied one has none):
        what orders the versions before any is judged."""
        private_versions, public_versions = self.private_versions, self.public_versions
        private_times, public_times = times_of(self.private), times_of(self.public)
        shadows = _shadowing(private_versions)
        found: dict[str, str | None] = {}
        for version in public_versions:
            if isinstance(private_versions.get(version), Mapping) or (
                    shadows and (parsed := parse_version(version)) is not None
                    and parsed.key in shadows):
                continue  # the private copy's record, if any (`_gate_public`)
            found[version] = _version_time(version, False, private_versions, private_times,
                                           public_times)
        for version, manifest in private_versions.items():
            found[version] = _version_time(version, isinstance(manifest, Mapping),
                                           private_versions, private_times, public_times)
        return found
