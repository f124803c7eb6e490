"""What the gate hands back: a packument merged and judged, version by version.

A `Gated` is built once per cache fill (`gate.packuments.merge`) and read by every user of the gate:
the serve path renders it, the worker's re-gate and the operator commands read its verdicts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.integrity import Digest, digests_from_dist, parse_integrity, strongest_sri
from mirrorgate.npm.names import PackageName
from mirrorgate.npm.ownership import mirrored_mark
from mirrorgate.npm.packument import manifest_on, on_base, render
from mirrorgate.npm.versions import is_prerelease, newest_first
from mirrorgate.rules.license import LicenseRead
from mirrorgate.rules.policy import plural
from mirrorgate.rules.wayout import SHOWN, installable_from, instead

__all__ = ["MAX_VERSIONS", "RECORD_BYTES", "Denial", "Gated", "RefusedBytes",
           "TooManyVersionsError", "UrlRefusal", "VersionRecord", "policy_message", "readable"]

RECORD_BYTES = 600
"""What one version's record holds beyond its two serialised forms (the record, its digests,
the bytes objects' headers, its place in the versions dict), as measured with tracemalloc on
gated packuments of 100 to 2,000 versions (580 to 620 bytes): counted in `Gated.size`, so the
cache's byte budget is what its entries hold."""
MAX_VERSIONS = 50_000
"""More versions than this in one packument is refused (502): gating, rendering and holding
such a document would stall the process for every other client. The largest real packuments
hold a few thousand."""


def policy_message(name: PackageName, denied: dict[str, Denial],
                   admitted: Iterable[str] = ()) -> str:
    """npm's `policyRestrictions.message`, which npm prints under "Could not download
    NAME@WANTED due to policy violations:": the newest denied versions one a line with the
    rule, the reason and, for a timed denial, when it ends; how many more; the newest admitted
    version to use instead. The exception line is the proxy's (`Gated.render`'s `footer`)."""
    order = newest_first(denied)
    lines = [f"mirrorgate's admission rules withhold {plural(len(order), 'version')} of "
             f"{name.full}:"]
    for version in order[:SHOWN]:
        denial = denied[version]
        until = installable_from(denial.until)
        lines.append(f"- {version} ({denial.rule}): {denial.reason}"
                     + (f"; {until}" if until else ""))
    rest = order[SHOWN:]
    if rest:
        rules = Counter(denied[v].rule for v in rest)
        lines.append(f"- and {len(rest)} more ("
                     + ", ".join(f"{rule} {count}" for rule, count in rules.most_common())
                     + ")")
    use = instead(None, admitted)
    lines.append(f"newest admitted: {use}" if use is not None else "no version is admitted")
    return "\n".join(lines)


class TooManyVersionsError(MirrorgateError):
    """A packument with more versions than mirrorgate will gate; the text says how many."""


@dataclass(frozen=True, slots=True)
class Denial:
    """Why a version is not served: the rule's stable name and a sentence a person can act on."""

    rule: str
    reason: str
    until: datetime | None = field(default=None, compare=False)
    """When a timed denial ends by itself (a takeover signal's quarantine), else None."""
    since: str | None = None
    """When it began, where the rule knows (a withdrawal: when it was first seen, ISO 8601)."""

    def data(self) -> dict[str, str]:
        found = {"rule": self.rule, "reason": self.reason}
        if self.since is not None:
            found["since"] = self.since
        return found


RefusedBytes = Mapping[str, Mapping[str, Denial]]
"""What the release signals refuse of one package (`gate.verdicts.judge`): version -> the bytes
refused (`VersionRecord.integrity`) -> the denial. Other bytes of the same version are not
refused by it: they were never read, and are judged at their own pull."""


@dataclass(frozen=True, slots=True)
class UrlRefusal:
    """A public version whose tarball URL was not followed, for the log line."""

    version: str
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One version as served: its serialised forms and, for public ones, the gate's verdict.

    `full` and `abbreviated` are JSON with the tarball URL on the placeholder
    (`npm.packument`). `upstream_tarball` and `digests` are the public upstream's (set when
    public has the version and admitted it, also when a private copy shadows it), for
    streaming and for the mirror job.
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
    scan_reports: bool = False
    """The install-scripts rule is in report mode: what the scan finds is said (a would-deny)
    and the bytes are served."""
    reported: tuple[Denial, ...] = ()
    """What rules in report mode would have denied (the version is served all the same)."""
    excepted: tuple[str, ...] = ()
    """The exceptions that admitted it past a rule, each described."""
    license: str | None = None
    """The license its manifest declares, as npm reads it (`npm.licenses`): the status page
    shows it, the pull log keeps it for `mirrorgate sbom`."""
    license_read: LicenseRead | None = None
    """The license rule reads the tarball's own package.json as it streams (`[license]`)."""
    sha1: str | None = None
    """Its `dist.shasum` (hex), as the manifest served gives it: the pull log keeps it."""

    @property
    def admitted(self) -> bool:
        return self.denial is None

    def manifest(self, base: str | None = None) -> dict[str, Any]:
        """The full version manifest; its tarball URL on `base` or, when None, upstream's."""
        if base is not None:
            return manifest_on(self.full, base)
        document: dict[str, Any] = orjson.loads(self.full)
        dist = document.get("dist")
        if isinstance(dist, dict) and self.upstream_tarball is not None:
            dist["tarball"] = self.upstream_tarball
        return document

    def integrity(self) -> str:
        """The bytes this record stands for, by their strongest digest (`strongest_sri`, ""
        when it names none): what a release verdict and a waiver are bound to. Public's for a
        public version; a mirrored copy's by its mark (the digest the worker verified it
        against, which the verdict it was mirrored under is kept by), a first-party one's by
        its own `dist`."""
        if not self.private:
            return strongest_sri(self.digests)
        manifest = orjson.loads(self.full)
        mark = mirrored_mark(manifest)
        if mark is not None:
            return strongest_sri(parse_integrity(mark.integrity))
        dist = manifest.get("dist")
        return strongest_sri(digests_from_dist(dist) if isinstance(dist, dict) else ())

    def document(self, base: str) -> bytes:
        """The full manifest's bytes (`GET /npm/<name>/<version>`), tarball URL on `base`."""
        return on_base(self.full, base)


@dataclass(frozen=True)
class Gated:
    """A merged, gated packument, ready to render. `denials` counts denied versions by rule."""

    name: PackageName
    head: dict[str, Any]
    dist_tags: dict[str, str]
    time: dict[str, str]
    versions: dict[str, VersionRecord]
    policy_message: str | None = None
    """npm's `policyRestrictions.message` (`policy_message`); None when nothing is denied."""
    denials: dict[str, int] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)
    """Versions a report-mode rule would have denied, by rule."""
    refused_urls: tuple[UrlRefusal, ...] = ()
    skipped: int = 0
    regate_at: datetime | None = None
    """When a verdict changes by itself (an age denial comes of age, a quarantine ends): the
    entry is gated again then, whatever the upstream's ETag says."""
    size: int = 0
    advisories: tuple[int, bool] | None = None
    """The advisory index generation and availability this gating saw (`state_token`)."""
    first_party: bool = False
    """The organisation owns the name; public versions are merged only for `merge_public`."""
    rules_generation: int = 0
    """The generation of the rules it was gated with (`Rules.generation`)."""
    withdrawals: dict[str, str] = field(default_factory=dict)
    """Mirrored versions the public registry withdrew, and when that was first seen: the fill
    remembers them, so that a public outage or a restart does not bring one back."""
    alone: str | None = None
    """The one version judged (`gate(only=...)`): a tarball's admission, or the worker's
    re-gate; the tags, times, survivors and size then describe it alone."""
    public_failure: MirrorgateError | None = field(default=None, compare=False)
    """The public upstream failed at this fill (its `UpstreamError`): a version missing here
    may exist there, and is then "not mirrored" rather than not found."""
    first_published: datetime | None = None
    """The package's first publish as the times of the versions it lists establish it
    (`gate.packuments.times`), the whole packument's also when one version is judged alone; None
    when they cannot, and the release signals treat the package as young."""
    time_doubts: tuple[str, ...] = ()
    """What in its times was not believed, each a sentence (named in a release verdict's
    evidence)."""

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

    def render(self, abbreviated: bool, base: str | None, footer: str | None = None) -> bytes:
        """The packument's bytes in one form, tarball URLs on `base` (None: on the placeholder,
        `npm.packument.on_base`); denied versions go to npm's `policyRestrictions`, each with
        its rule and reason as data, the message ending with `footer` (how to get an
        exception: the proxy's setting, not the gate's)."""
        def form(record: VersionRecord) -> bytes:
            return record.abbreviated if abbreviated else record.full

        survivors = {v: form(r) for v, r in self.versions.items() if r.denial is None}
        message = self.policy_message
        if message is not None and footer:
            message = f"{message}\n{footer}"
        restricted = None
        if message is not None:
            withheld = {v: r for v, r in self.versions.items() if r.denial is not None}
            restricted = (message, {v: form(r) for v, r in withheld.items()},
                          {v: r.denial.data() for v, r in withheld.items()
                           if r.denial is not None})
        return render(self.name, self.head, self.dist_tags, self.time, survivors, abbreviated,
                      base, restricted)


# Here rather than beside the baseline walk (`gate.verdicts.baseline`) because the lazy history
# of the packuments (`gate.packuments.lazyhistory`) asks it too, and the packuments never read
# the verdicts.
def readable(record: VersionRecord, version: str) -> bool:
    """Whether `record` is a release `version` may be compared with: another version, whose
    bytes mirrorgate can read from public, verified; a prerelease only for a prerelease."""
    text = record.version
    return (text != version and record.upstream_tarball is not None and bool(record.digests)
            and (is_prerelease(version) or not is_prerelease(text)))
