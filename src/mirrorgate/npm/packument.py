"""The packument mirrorgate serves: private and public merged, public versions gated, rendered.

A packument is gated once per cache fill and rendered once per (form, base URL); requests only
copy bytes. Everything here is pure (no I/O, no clock of its own), so the serve path can run it
in a thread and tests can call it directly.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cmp_to_key
from typing import Any

import nodesemver
import orjson

from mirrorgate.integrity import Digest, digests_from_dist
from mirrorgate.npm.mirrormark import MARK_FIELD, without_mark
from mirrorgate.npm.names import PackageName, tarball_filename
from mirrorgate.npm.ownership import first_party_versions, mirrored_mark
from mirrorgate.npm.versions import highest, is_version_string
from mirrorgate.rules import (
    INSTALL_SCRIPT_KEYS,
    MINIMUM_AGE,
    Context,
    KeySet,
    Rules,
    Verdict,
    deny_listed,
    evaluate,
    needs_history,
    scripts_blocked,
    state_token,
)
from mirrorgate.upstream.origins import Origin, OriginRefusal, check_on_origin

__all__ = [
    "ABBREVIATED",
    "ABBREVIATED_FIELDS",
    "FULL",
    "MAX_VERSIONS",
    "TARBALL_ORIGIN",
    "Denial",
    "Gated",
    "TooManyVersionsError",
    "UrlRefusal",
    "VersionRecord",
    "gate",
    "render",
    "semver_desc",
    "version_document",
]

ABBREVIATED = "application/vnd.npm.install-v1+json"
FULL = "application/json"

ABBREVIATED_FIELDS: tuple[str, ...] = (
    "name", "version", "deprecated", "dependencies", "optionalDependencies",
    "devDependencies", "bundleDependencies", "peerDependencies", "peerDependenciesMeta",
    "acceptDependencies", "bin", "directories", "dist", "engines", "os", "cpu", "libc",
    "_hasShrinkwrap", "hasInstallScript", "funding",
)
"""What npm's registry keeps in an abbreviated ("corgi") version document: what an install
reads. `hasInstallScript` is derived from `scripts` when the upstream did not set it."""

TARBALL_ORIGIN = "tarball-origin"
"""The rule name for a version whose tarball URL is off the public upstream's origin."""

MAX_VERSIONS = 50_000
"""More versions than this in one packument is refused (502): gating, rendering and holding
such a document would stall the process for every other client. The largest real packuments
hold a few thousand."""

MAX_DIST_TAGS = 1_000
PLACEHOLDER = f"mirrorgate-base-{secrets.token_hex(12)}:"
"""Stands for the proxy's base URL in serialised versions; random per process, so no upstream
string can contain it. Each version is serialised once on it and `render` swaps in the base, so
a packument seen through several host names costs one gating."""
_PLACEHOLDER_BYTES = PLACEHOLDER.encode()
_POLICY_DETAILED = 20
_DROPPED_HEAD = frozenset({"versions", "dist-tags", "time", "policyRestrictions",
                           "_attachments", "_rev", "_id", "name"})


class TooManyVersionsError(Exception):
    """A packument with more versions than mirrorgate will gate; the text says how many."""


@dataclass(frozen=True, slots=True)
class Denial:
    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class UrlRefusal:
    """A public version whose tarball URL was not followed, for the log line."""

    version: str
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One version as served: its serialised forms and, for public ones, the gate's verdict.

    `full` and `abbreviated` are JSON with the tarball URL on `PLACEHOLDER`. `upstream_tarball`
    and `digests` are the public upstream's (set when public has the version and admitted it,
    also when a private copy shadows it), for streaming and for the mirror job.
    """

    version: str
    private: bool
    full: bytes
    abbreviated: bytes
    denial: Denial | None = None
    weak: bool = False
    upstream_tarball: str | None = None
    digests: tuple[Digest, ...] = ()
    scan_scripts: bool = False
    """The install-scripts rule applies: the tarball's own package.json is read as it streams,
    since the manifest the rule judged is not necessarily the one inside (`npm.tarscripts`)."""

    @property
    def admitted(self) -> bool:
        return self.denial is None

    def manifest(self, base: str | None = None) -> dict[str, Any]:
        """The full version manifest; its tarball URL on `base` or, when None, upstream's."""
        if base is None:
            document: dict[str, Any] = orjson.loads(self.full)
            dist = document.get("dist")
            if isinstance(dist, dict) and self.upstream_tarball is not None:
                dist["tarball"] = self.upstream_tarball
            return document
        rendered: dict[str, Any] = orjson.loads(self.full.replace(_PLACEHOLDER_BYTES,
                                                                  _json_text(base)))
        return rendered


@dataclass(frozen=True)
class Gated:
    """A merged, gated packument, ready to render. `denials` counts denied versions by rule."""

    name: PackageName
    head: dict[str, Any]
    dist_tags: dict[str, str]
    time: dict[str, str]
    versions: dict[str, VersionRecord]
    policy_message: str | None
    denials: dict[str, int] = field(default_factory=dict)
    refused_urls: tuple[UrlRefusal, ...] = ()
    skipped: int = 0
    regate_at: datetime | None = None
    size: int = 0
    advisories: tuple[int, bool] | None = None
    """The advisory index generation and availability this gating saw (`state_token`)."""
    first_party: bool = False
    """The organisation owns the name; public versions are merged only for `merge_public`."""

    @property
    def survivors(self) -> list[str]:
        return [v for v, record in self.versions.items() if record.denial is None]

    @property
    def denied(self) -> list[str]:
        return [v for v, record in self.versions.items() if record.denial is not None]

    def resolve(self, wanted: str) -> str | None:
        """A version or dist-tag to a version this packument holds (denied ones included)."""
        if wanted in self.versions:
            return wanted
        return self.dist_tags.get(wanted)


def _json_text(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def _has_install_script(manifest: Mapping[str, Any]) -> bool:
    scripts = manifest.get("scripts")
    return isinstance(scripts, Mapping) and any(
        scripts.get(key) not in (None, "") for key in INSTALL_SCRIPT_KEYS)


def _serialise(name: PackageName, version: str, manifest: Mapping[str, Any]) -> tuple[bytes,
                                                                                      bytes]:
    """The full and abbreviated JSON of one version, its tarball URL on the placeholder."""
    url = f"{PLACEHOLDER}npm/{name.tarball_path(tarball_filename(name, version))}"
    dist = manifest.get("dist")
    served_dist = {**dist, "tarball": url} if isinstance(dist, Mapping) else {"tarball": url}
    full = {**manifest, "dist": served_dist}
    abbreviated = {key: full[key] for key in ABBREVIATED_FIELDS if key in full}
    if "hasInstallScript" not in abbreviated and _has_install_script(manifest):
        abbreviated["hasInstallScript"] = True
    return _compact(orjson.dumps(full)), _compact(orjson.dumps(abbreviated))


def _compact(serialised: bytes) -> bytes:
    """A copy sized to its content. orjson hands back its output with room to spare (about
    4 KiB held for a 300-byte version, ten times the text for larger ones), and the cache keeps
    two of these per version for as long as the packument is cached: uncompacted, a cache
    counting 500 MiB of versions would hold several GiB."""
    return bytes(memoryview(serialised))


def _published(text: object) -> datetime | None:
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _versions_of(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if document is None:
        return {}
    versions = document.get("versions")
    return versions if isinstance(versions, Mapping) else {}


def _times_of(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if document is None:
        return {}
    times = document.get("time")
    return times if isinstance(times, Mapping) else {}


def _tags_of(document: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    if document is None:
        return []
    tags = document.get("dist-tags")
    if not isinstance(tags, Mapping):
        return []
    return [(tag, version) for tag, version in list(tags.items())[:MAX_DIST_TAGS]
            if isinstance(version, str)]


def semver_desc(versions: list[str]) -> list[str]:
    parsed: list[tuple[str, nodesemver.SemVer | None]] = []
    for version in versions:
        try:
            parsed.append((version, nodesemver.make_semver(version, loose=True)))
        except (ValueError, TypeError):
            parsed.append((version, None))

    def compare(a: tuple[str, nodesemver.SemVer | None],
                b: tuple[str, nodesemver.SemVer | None]) -> int:
        if a[1] is None or b[1] is None:
            return (a[1] is None) - (b[1] is None)
        return -int(a[1].compare(b[1]))

    return [version for version, _ in sorted(parsed, key=cmp_to_key(compare))]


def _policy_message(name: PackageName, denied: dict[str, Denial]) -> str:
    """One line naming each denied version and its rule, the first few with the reason."""
    order = semver_desc(list(denied))
    detailed = [f"{v} denied by {denied[v].rule} ({denied[v].reason})"
                for v in order[:_POLICY_DETAILED]]
    rest = [f"{v} ({denied[v].rule})" for v in order[_POLICY_DETAILED:]]
    text = f"mirrorgate admission rules for {name.full}: " + "; ".join(detailed)
    if rest:
        text += f"; also denied: {', '.join(rest)}"
    return text


def _merge_tags(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
                survivors: list[str], private_first: bool) -> dict[str, str]:
    """The first upstream naming a tag decides it (public, then private; private first for a
    first-party name); a tag on a version that did not survive is dropped, and a missing
    `latest` goes to the highest surviving stable version (else the highest prerelease)."""
    alive = set(survivors)
    decided: set[str] = set()
    tags: dict[str, str] = {}
    for source in ((private, public) if private_first else (public, private)):
        for tag, version in _tags_of(source):
            if tag in decided:
                continue
            decided.add(tag)
            if version in alive:
                tags[tag] = version
    if "latest" not in tags:
        best = highest(survivors)
        if best is not None:
            tags["latest"] = best
    return tags


def _mirrored_time(manifest: object) -> str | None:
    """The public publish time a mirrored version's mark carries (None for a first-party
    version, or a mark without a usable time): the registry's own `time` for it is the moment
    of mirroring, which would make every age gate see a copy as a brand-new release."""
    if not isinstance(manifest, Mapping):
        return None
    mark = mirrored_mark(manifest)
    if mark is None or _published(mark.published) is None:
        return None
    return mark.published


def _merge_time(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
                records: Mapping[str, VersionRecord]) -> dict[str, str]:
    """`created`, `modified` and the survivors' times; a mirrored version's is the public time
    its mark carries (`_mirrored_time`)."""
    private_times, public_times = _times_of(private), _times_of(public)
    merged: dict[str, str] = {}
    for key, pick in (("created", min), ("modified", max)):
        found = [t[key] for t in (public_times, private_times) if isinstance(t.get(key), str)]
        if found:
            merged[key] = pick(found)
    private_versions = _versions_of(private)
    for version, record in records.items():
        if record.denial is not None:
            continue
        if record.private and (marked := _mirrored_time(private_versions.get(version))):
            merged[version] = marked
            continue
        stamp = (private_times if record.private else public_times).get(version)
        if not isinstance(stamp, str):
            stamp = (public_times if record.private else private_times).get(version)
        if isinstance(stamp, str):
            merged[version] = stamp
    return merged


def _head(private: Mapping[str, Any] | None, public: Mapping[str, Any] | None,
          private_first: bool) -> dict[str, Any]:
    if private_first:
        # a first-party name's readme, description, maintainers... are its own, also with
        # merge_public: what the private document leaves out is left out, never the public
        # side's words (an impostor's readme and maintainers on the organisation's package)
        return {key: value for key, value in (private or {}).items()
                if key not in _DROPPED_HEAD}
    source = public if _versions_of(public) else private
    if source is None:
        source = public or {}
    return {key: value for key, value in source.items() if key not in _DROPPED_HEAD}


def _age_flip(rules: Rules, verdict: Verdict, published: object) -> datetime | None:
    """When a denial ends by itself (the entry is gated again then): a version the age rule
    denies comes of age, a quarantine runs out."""
    flips = verdict.until  # a quarantine's end
    if verdict.rule == MINIMUM_AGE and (when := _published(published)) is not None:
        aged = when + rules.minimum_age
        flips = aged if flips is None else min(flips, aged)
    return flips


def _private_verdict(rules: Rules, name: PackageName, version: str,
                     manifest: Mapping[str, Any], now: datetime,
                     context: Context) -> tuple[Verdict | None, bool, str | None]:
    """The verdict on a private version, whether it was mirrored, and the publish time it was
    judged with: a mirrored one by every rule, with the public time its mark carries; a
    first-party one by the deny list alone (None when nothing denies it)."""
    mark = mirrored_mark(manifest)
    if mark is None:
        return deny_listed(rules, name.full, version), False, None
    # the same context as public versions: the registry's keys for its signatures (kept in
    # what the worker published), the public history for the takeover signals
    return (evaluate(rules, name.full, version, without_mark(manifest), mark.published, now,
                     context=context), True, mark.published)


def gate(
    name: PackageName,
    private: Mapping[str, Any] | None,
    public: Mapping[str, Any] | None,
    *,
    rules: Rules,
    now: datetime,
    origin: Origin,
    keys: KeySet | None = None,
) -> Gated:
    """Merge the private and public packuments (either may be None) and gate the versions.
    `keys` are the public registry's signing keys, for the signature rule (None: unavailable).

    Raises TooManyVersionsError when either document lists more than `MAX_VERSIONS` versions.
    """
    # Ownership first: a name the private upstream holds an unmarked version of, or that
    # `[private].names` covers, is served from the private side alone unless `merge_public`.
    first_party = (rules.owned.covers_name(name.full)
                   or bool(first_party_versions(private)))
    private_first = first_party
    if first_party and not rules.merge_public.covers_name(name.full):
        public = None  # the name is the organisation's: no public version, tag or field
    private_versions, public_versions = _versions_of(private), _versions_of(public)
    for label, versions in (("private", private_versions), ("public", public_versions)):
        if len(versions) > MAX_VERSIONS:
            raise TooManyVersionsError(
                f"the {label} packument of {name.full} lists {len(versions)} versions; "
                f"mirrorgate gates at most {MAX_VERSIONS}")
    public_times = _times_of(public)
    records: dict[str, VersionRecord] = {}
    denied: dict[str, Denial] = {}
    counts: dict[str, int] = {}
    refused: list[UrlRefusal] = []
    skipped = 0
    regate_at: datetime | None = None
    public_gates: dict[str, tuple[str | None, tuple[Digest, ...]]] = {}
    # read before gating: an index swapped mid-way makes the next fill rebuild, not reuse this
    advisories = state_token(rules.advisories, now)
    # The history the takeover rules read is built once here, not once per version. Gated
    # without the keys it should have had, the entry is re-gated at its next fill (now), so
    # a revalidation cannot keep it once the keys are back.
    if rules.signatures.verify and keys is None and public_versions:
        regate_at = now
    context = Context.of(public_versions, public_times, needs_history=needs_history(rules),
                         keys=keys)

    for version, manifest in public_versions.items():
        # version keys become tarball file names in URLs the proxy serves
        if not is_version_string(version) or not isinstance(manifest, Mapping):
            skipped += 1
            continue
        if MARK_FIELD in manifest:
            manifest = without_mark(manifest)  # only the worker marks what it mirrored
        label = f"{name.full}@{version}"
        denial: Denial | None = None
        weak = False
        dist = manifest.get("dist")
        url = dist.get("tarball") if isinstance(dist, Mapping) else None
        # the origin lock: a tarball URL off the public upstream's origin denies the version
        try:
            if not isinstance(url, str):
                raise OriginRefusal("missing", "the version's dist.tarball is missing")
            check_on_origin(url, origin)
        except OriginRefusal as refusal:
            refused.append(UrlRefusal(version, refusal.kind, str(refusal)))
            denial = Denial(TARBALL_ORIGIN, f"{label}'s tarball URL is not followed: {refusal}")
        if denial is None:
            verdict = evaluate(rules, name.full, version, manifest,
                               public_times.get(version), now, context=context)
            if not verdict.admitted:
                denial = Denial(verdict.rule or "unknown", verdict.reason or "denied")
                flips = _age_flip(rules, verdict, public_times.get(version))
                if flips is not None:
                    regate_at = flips if regate_at is None else min(regate_at, flips)
            weak = verdict.weak
        tarball = url if denial is None and isinstance(url, str) else None
        digests = digests_from_dist(dist) if isinstance(dist, Mapping) else ()
        public_gates[version] = (tarball, digests)
        # on a version present in both, the private copy wins
        if version in private_versions and isinstance(private_versions[version], Mapping):
            continue
        if denial is not None:
            denied[version] = denial
            counts[denial.rule] = counts.get(denial.rule, 0) + 1
        full, abbreviated = _serialise(name, version, manifest)
        records[version] = VersionRecord(
            version, False, full, abbreviated, denial, weak, tarball, digests,
            scan_scripts=tarball is not None and scripts_blocked(rules, name.full, version))

    for version, manifest in private_versions.items():
        if not is_version_string(version) or not isinstance(manifest, Mapping):
            skipped += 1
            continue
        full, abbreviated = _serialise(name, version, manifest)
        judged, mirrored, published = _private_verdict(rules, name, version, manifest, now,
                                                       context)
        private_denial: Denial | None = None
        if judged is not None and not judged.admitted:
            private_denial = Denial(judged.rule or "unknown", judged.reason or "denied")
            denied[version] = private_denial
            counts[private_denial.rule] = counts.get(private_denial.rule, 0) + 1
            flips = _age_flip(rules, judged, published)
            if flips is not None:
                regate_at = flips if regate_at is None else min(regate_at, flips)
        # Public's copy of a mirrored version is the fallback when the private tarball
        # fails; a first-party version never falls back to bytes published by someone else.
        tarball, digests = public_gates.get(version, (None, ()))
        if private_denial is not None or not mirrored:
            tarball = None
        records[version] = VersionRecord(
            version, True, full, abbreviated, private_denial,
            judged.weak if judged is not None else False, tarball, digests if tarball else (),
            # public's bytes stand in when the private copy fails: read like any public relay
            scan_scripts=tarball is not None and scripts_blocked(rules, name.full, version))

    survivors = [v for v, record in records.items() if record.denial is None]
    head = _head(private, public, private_first)
    size = len(orjson.dumps(head)) + sum(
        len(r.full) + len(r.abbreviated) + 64 for r in records.values())
    return Gated(
        name=name,
        head=head,
        dist_tags=_merge_tags(private, public, survivors, private_first),
        time=_merge_time(private, public, records),
        versions=records,
        policy_message=_policy_message(name, denied) if denied else None,
        denials=counts,
        refused_urls=tuple(refused),
        skipped=skipped,
        regate_at=regate_at,
        size=size,
        advisories=advisories,
        first_party=first_party,
    )


def render(gated: Gated, abbreviated: bool, base: str) -> bytes:
    """The packument's bytes in one form, tarball URLs on `base` (the proxy's base URL, ending
    in `/`)."""
    survivors = {v: orjson.Fragment(r.abbreviated if abbreviated else r.full)
                 for v, r in gated.versions.items() if r.denial is None}
    document: dict[str, Any]
    if abbreviated:
        document = {"name": gated.name.full}
        modified = gated.time.get("modified")
        if modified is not None:
            document["modified"] = modified
        document["dist-tags"] = gated.dist_tags
        document["versions"] = survivors
    else:
        document = {"_id": gated.name.full, "name": gated.name.full, **gated.head,
                    "dist-tags": gated.dist_tags, "versions": survivors, "time": gated.time}
    # denied versions go to npm's `policyRestrictions`, in both forms, so that
    # `npm install pkg@denied` fails with E403 and the reason
    if gated.policy_message is not None:
        document["policyRestrictions"] = {
            "message": gated.policy_message,
            "versions": {v: orjson.Fragment(r.abbreviated if abbreviated else r.full)
                         for v, r in gated.versions.items() if r.denial is not None},
        }
    return orjson.dumps(document).replace(_PLACEHOLDER_BYTES, _json_text(base))


def version_document(record: VersionRecord, base: str) -> bytes:
    """One version's full manifest (`GET /npm/<name>/<version>`), tarball URL on `base`."""
    return record.full.replace(_PLACEHOLDER_BYTES, _json_text(base))
