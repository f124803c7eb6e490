"""What a request is answered by, decided once: a packument's gated document, or a tarball
pull's `Admission` (the version, the digests its bytes must match, how they are read as they
stream, where they come from) or `Refusal`. The gate chooses the reading (one version's gating
or the whole history's), asks the release verdicts and the scan's kept findings and writes the
refusal; an application (`serve.tarballs`) streams what it admits. docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from mirrorgate.gate.alerts import denial_alert
from mirrorgate.gate.cache import Cached
from mirrorgate.gate.kept.facts import UnrecordedError
from mirrorgate.gate.packuments.entry import PackumentEntry
from mirrorgate.gate.packuments.service import Packuments
from mirrorgate.gate.records import Gated, TooManyVersionsError, VersionRecord
from mirrorgate.gate.refusals import (
    Refusal,
    by_rule,
    denied,
    not_found,
    not_mirrored,
    release_refusal,
    release_unchecked,
    unknown_policy,
    unrecorded,
)
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.gate.verdicts.reading import ReleaseCheck
from mirrorgate.integrity import StreamVerifier, Unverifiable
from mirrorgate.metrics import Metrics
from mirrorgate.npm.names import InvalidNameError, PackageName, version_from_filename
from mirrorgate.rules import INSTALL_SCRIPTS
from mirrorgate.rules.license import LICENSE, tarball_license_finding
from mirrorgate.rules.policy import UnknownPolicyError
from mirrorgate.rules.release import ReleaseVerdict
from mirrorgate.rules.wayout import exception_how
from mirrorgate.upstream.client import UpstreamError

__all__ = ["Admission", "Admissions", "LicenseCheck", "ScanFindings", "ScriptsRead"]

log = structlog.get_logger("mirrorgate.serve")


@dataclass(frozen=True, slots=True)
class ScriptsRead:
    """The install-scripts rule reads these bytes: `report`, whether what the scan finds is
    only said (report mode: a would-deny, the bytes served); `manifest`, the registry manifest
    the version was admitted with (a script it declares is no manifest confusion)."""

    report: bool
    manifest: Callable[[], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class LicenseCheck:
    """The license rule reads these bytes: `report`, whether what it finds is only said;
    `finding`, why the tarball's own package.json (as the scan parsed it, and the scan's
    problem) is refused, or None (`rules.license.tarball_license_finding`)."""

    report: bool
    finding: Callable[[Mapping[str, Any] | None, str | None], str | None]


@dataclass(slots=True)
class ScanFindings:
    """Versions (`name@version`) whose tarball a reading refused, and why: scripts that run at
    install, a license other than the manifest's. Written by the relay that read the bytes
    (which bounds them), read at the version's next pull, which is then a 403 saying why
    rather than another download cut without a word to the client."""

    scripts: OrderedDict[str, str] = field(default_factory=OrderedDict)
    licenses: OrderedDict[str, str] = field(default_factory=OrderedDict)


@dataclass(frozen=True, slots=True)
class Admission:
    """A tarball pull admitted: the version's `record` (its digests, its public URL), the
    gating it was read from, how the rules read its bytes as they stream (`scripts`,
    `license`, `release`: the release signals' check), and whether the packument already
    said the private upstream lacks it (`public_only`)."""

    name: PackageName
    record: VersionRecord
    gated: Gated
    policy: str | None
    scripts: ScriptsRead | None
    license: LicenseCheck | None
    release: Callable[[], ReleaseCheck] | None
    """The release signals read these bytes as they stream: a first GET of a public version
    they never judged, or a mirrored copy judged under fewer signals (`ReleaseJudge.at_pull`);
    such a copy is verified first, as the verdict names the bytes the mirror's mark does."""
    public_only: bool

    @property
    def url(self) -> str | None:
        """The version's own `dist.tarball`, on the public upstream's origin (the gate checked:
        one that is not was denied); None for a first-party version."""
        return self.record.upstream_tarball

    @property
    def published(self) -> str | None:
        return self.gated.time.get(self.record.version)

    @property
    def reads(self) -> tuple[str | None, str | None]:
        """How the rules of the asking client's policy set read the bytes (the install-scripts
        scan, the license), in the relay's key: a download's one reading serves or refuses it
        for every reader, so a client whose set reads them otherwise (not at all, or in report
        mode) never shares it: one team's [license] is not skipped because another's read
        none."""
        scripts = ("report" if self.scripts.report else "enforce") if self.scripts else None
        read = self.license
        return scripts, ("report" if read.report else "enforce") if read is not None else None

    def verifier(self) -> StreamVerifier | None:
        """A verifier for the bytes: the strongest admitted digest, no size cap (the relay never
        had one). None only for a version without a digest this process can compute, which
        the gate never admits."""
        try:
            return StreamVerifier(self.record.digests, expected_size=None, limit=None)
        except Unverifiable:
            return None


class Admissions:
    """The gate's answer to each request kind, with the parts it asks: the packuments, the
    release verdicts, the scan's kept findings. `contact` is MIRRORGATE_OPERATOR_CONTACT,
    named in a refusal's way through."""

    def __init__(self, packuments: Packuments, release: ReleaseJudge, metrics: Metrics, *,
                 contact: str | None, findings: ScanFindings) -> None:
        self.packuments = packuments
        self.release = release
        self.metrics = metrics
        self.contact = contact
        self.findings = findings

    async def document(self, name: PackageName,
                       policy: str | None = None) -> Cached[PackumentEntry] | Refusal:
        """The gated entry of `name` under `policy` (the client's policy set), or why none."""
        try:
            return await self.packuments.entry(name, policy)
        except UnknownPolicyError as error:
            return unknown_policy(error)
        except UpstreamError as error:
            return not_mirrored(error, name)
        except TooManyVersionsError as error:
            self.metrics.refusals.labels("too_many_versions").inc()
            log.warning("packument_refused", package=name.full, reason=str(error))
            return Refusal(502, str(error), reason="too many versions")
        except UnrecordedError as error:
            return self._unrecorded(name, error)

    async def packument(self, name: PackageName,
                        policy: str | None = None) -> Cached[PackumentEntry] | Refusal:
        """A packument request: the gated entry to render, or why there is none to render (no
        upstream has the name, it has no versions, every version is denied)."""
        found = await self.document(name, policy)
        if isinstance(found, Refusal):
            return found
        gated = found.value.gated
        if gated is None:
            return not_found(f"{name.full} is not on the private or the public upstream")
        if not gated.survivors and gated.policy_message is None:
            # nothing was denied, so there was nothing to gate: unpublished, or only
            # version keys that were skipped as unreadable
            return Refusal(404, f"{name.full} has no versions on the private or the public "
                           "upstream", reason="no versions", fields={"package": name.full})
        if not gated.survivors:
            return Refusal(403, f"every version of {name.full} was denied by mirrorgate's "
                           f"admission rules: {gated.policy_message}\n"
                           f"{exception_how(name.full, None, self.contact)}",
                           reason=gated.policy_message, fields={"package": name.full})
        return found

    async def version(self, name: PackageName, wanted: str,
                      policy: str | None = None) -> VersionRecord | Refusal:
        """A version document's request (`wanted`: a version or a dist-tag): the admitted
        version's record, or why not."""
        gated = await self.gated(name, policy)
        if isinstance(gated, Refusal):
            return gated
        if gated is None:
            return not_found(f"{name.full} is not on the private or the public upstream")
        version = gated.resolve(wanted)
        record = gated.versions.get(version) if version is not None else None
        if record is None and isinstance(gated.public_failure, UpstreamError):
            return not_mirrored(gated.public_failure, name, wanted)
        if record is None:
            return Refusal(404, f"{name.full} has no version or dist-tag {wanted!r}",
                           reason="version not found")
        if record.denial is not None:
            return denied(name, record, gated.survivors, self.contact)
        return record

    async def mirrored(self, name: PackageName, version: str) -> bool:
        """Whether the default rules admit `name@version`: a version pulled under a policy set
        is mirrored only then, as the worker re-gates every job with the default rules."""
        gated = await self.packuments.for_tarball(name, version)
        record = gated.versions.get(version) if gated is not None else None
        return record is not None and record.denial is None

    async def gated(self, name: PackageName, policy: str | None = None) -> Gated | Refusal | None:
        found = await self.document(name, policy)
        return found if isinstance(found, Refusal) else found.value.gated

    async def one_version(self, name: PackageName, version: str,
                          policy: str | None = None) -> Gated | Refusal | None:
        """`name@version` judged alone when its packument is not at hand
        (`Packuments.for_tarball`), its failures answered by the whole fill, whose stale
        copy, 503 for an owned name or refusal is the answer."""
        try:
            return await self.packuments.for_tarball(name, version, policy)
        except UnrecordedError as error:
            return self._unrecorded(name, error)
        except (UpstreamError, TooManyVersionsError, UnknownPolicyError):
            return await self.gated(name, policy)

    def _unrecorded(self, name: PackageName, error: UnrecordedError) -> Refusal:
        self.metrics.refusals.labels("state_store_full").inc()
        return unrecorded(name, error)

    async def tarball(self, name: PackageName, filename: str, policy: str | None,
                      reading: bool) -> Admission | Refusal:
        """A pull of `filename` by a client of `policy`: admitted, or refused with why and the
        way through. `reading`: a GET, whose bytes the release signals may read."""
        try:
            # the file name must be `<bare name>-<version>.tgz` for this package, else 400
            version = version_from_filename(name, filename)
        except InvalidNameError as error:
            self.metrics.refusals.labels("bad_tarball_filename").inc()
            return Refusal(400, f"refused tarball path: {error}", reason=str(error))
        # The gated packument (cached) is read first, so the rules reach every version: a denied
        # one is a 403 wherever its bytes are, mirrored and first-party versions included, and a
        # version no upstream lists is a 404 before any tarball is asked for.
        # Its own version judged alone suffices: the release signals read the package's first
        # publish, which one version's gating carries, and a first pull that compares with an
        # earlier release walks the releases before it, each gated alone as the walk reaches
        # it (`gate.packuments.lazyhistory`), never the whole packument's thousands.
        # By the client's policy set (`policy:NAME` on its tokens-file line), as its packument.
        gated = await self.one_version(name, version, policy)
        if isinstance(gated, Refusal):
            return gated
        record = gated.versions.get(version) if gated is not None else None
        if gated is not None and record is None and isinstance(gated.public_failure,
                                                                UpstreamError):
            return not_mirrored(gated.public_failure, name, version)
        if gated is None or record is None:
            return not_found(f"{name.full}@{version} is not on the private or the public "
                             "upstream")
        # the release verdicts, asked once: a verdict in force is a 403 with its evidence (a
        # mirrored copy's too, flagged in report mode and enforced since), else perhaps the
        # check that reads these bytes as they stream
        ruling = self.release.at_pull(name, gated, record, reading)
        refusal = (self._release_refusal(name, version, ruling.refused)
                   if ruling.refused is not None
                   else await self._refused(name, gated, record, policy))
        if refusal is not None:
            return dataclasses.replace(refusal, record=record)
        return Admission(name, record, gated, policy, _scripts_read(record),
                         _license_check(record), ruling.check, public_only=(
                             not record.private
                             and self.packuments.private_answered(name, version, policy)))

    async def _refused(self, name: PackageName, gated: Gated, record: VersionRecord,
                       policy: str | None) -> Refusal | None:
        """The version's denial by the packument's rules, or by what reading its bytes found
        at an earlier pull; None: neither refuses it."""
        version, label = record.version, f"{name.full}@{record.version}"
        denial = record.denial
        if denial is not None:
            log.info("tarball_denied", package=name.full, version=version, rule=denial.rule,
                     reason=denial.reason)
            self.metrics.events.denied(label, denial.rule, denial.reason)
            alert = denial_alert(name.full, version, denial, "tarball")
            survivors = await self._survivors(name, gated, policy)
            if isinstance(survivors, Refusal):  # the alert is raised all the same
                return dataclasses.replace(survivors, alert=alert)
            return denied(name, record, survivors, self.contact, alert)
        # bytes a reading refused at an earlier pull (report mode serves them, and said so)
        if record.scan_scripts and not record.scan_reports \
                and (found := self.findings.scripts.get(label)) is not None:
            return await self._found(name, gated, policy, version, INSTALL_SCRIPTS, found)
        read = record.license_read
        if read is not None and not read.report \
                and (found := self.findings.licenses.get(label)) is not None:
            return await self._found(name, gated, policy, version, LICENSE, found)
        return None

    async def _found(self, name: PackageName, gated: Gated, policy: str | None, version: str,
                     rule: str, reason: str) -> Refusal:
        log.info("tarball_denied", package=name.full, version=version, rule=rule,
                 reason=reason)
        survivors = await self._survivors(name, gated, policy)
        if isinstance(survivors, Refusal):
            return survivors
        return by_rule(name, version, rule, reason, survivors, self.contact)

    async def bytes_refused(self, admission: Admission, rule: str | None, reason: str,
                            source: str) -> Refusal:
        """The 403 for bytes a reading refused before any was sent (the relay withheld them),
        at the first pull: by `rule` (install-scripts, license) with the versions to use
        instead (from public: a mirrored copy names none), or by the release signals (`rule`
        None): the verdict's evidence, or `release-unchecked` when no verdict was kept."""
        name, record = admission.name, admission.record
        if rule in (INSTALL_SCRIPTS, LICENSE):
            instead = (await self._survivors(name, admission.gated, admission.policy)
                       if source == "public" else ())
            refusal = (instead if isinstance(instead, Refusal)
                       else by_rule(name, record.version, rule, reason, instead, self.contact))
        else:
            kept = self.release.remembered(name.full, record.version, record.integrity())
            refusal = (self._release_refusal(name, record.version, kept)
                       if kept is not None and kept.in_force(self.release.now())
                       else release_unchecked(name, record.version, reason))
        return dataclasses.replace(refusal, record=record)

    def installed(self, admission: Admission) -> None:
        """A GET served whole: the release signals count the name as installed."""
        self.release.installed(admission.name.full)

    async def _survivors(self, name: PackageName, gated: Gated,
                         policy: str | None) -> list[str] | Refusal:
        """The versions a refusal names as installable instead: the whole packument's, read
        where one version's gating (`Gated.alone`) was not enough; a read that fails is the
        answer instead."""
        if gated.alone is None:
            return gated.survivors
        whole = await self.gated(name, policy)
        if isinstance(whole, Refusal):
            return whole
        return (whole if whole is not None else gated).survivors

    def _release_refusal(self, name: PackageName, version: str,
                         verdict: ReleaseVerdict) -> Refusal:
        """The 403 with the evidence for a version a release signal refuses, logged."""
        assert verdict.rule is not None
        assert verdict.reason is not None
        log.info("tarball_denied", package=name.full, version=version, rule=verdict.rule,
                 reason=verdict.reason)
        self.metrics.events.denied(f"{name.full}@{version}", verdict.rule, verdict.reason)
        return release_refusal(name, version, verdict, self.contact)


def _scripts_read(record: VersionRecord) -> ScriptsRead | None:
    """How the install-scripts rule reads this version's bytes (None: it does not)."""
    if not record.scan_scripts:
        return None
    return ScriptsRead(record.scan_reports, record.manifest)


def _license_check(record: VersionRecord) -> LicenseCheck | None:
    """How the license rule reads this version's bytes: the tarball's own package.json
    against the license its registry manifest declared (None: the rule does not read them)."""
    read = record.license_read
    if read is None:
        return None
    return LicenseCheck(read.report, functools.partial(tarball_license_finding, read.rule,
                                                       record.license))
