"""Re-gating a mirror job at ingest: the worker believes the public upstream, never the queue.

Anyone who can write to the queue can write a well-formed job, so a job is only a request to
mirror `name@version`: it is carried out only if it describes exactly what the gate admits now,
and what gets published is public's own description of the version, never the job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mirrorgate.errors import MirrorgateError
from mirrorgate.gate import Gated, VersionRecord, gate
from mirrorgate.integrity import Digest, same_digest, strongest
from mirrorgate.logs import loggable_url
from mirrorgate.mirror import MirrorArtifact, MirrorJob
from mirrorgate.moments import stamp, time_text
from mirrorgate.npm.names import PackageName, tarball_filename
from mirrorgate.offload import in_thread_if_large
from mirrorgate.rules import ALGORITHMS, DIGEST_FLOOR, KeySet, Rules
from mirrorgate.upstream.client import Upstream

__all__ = ["JobRefused", "check_digest_floor", "regate", "regate_record"]

_IGNORED = frozenset({"readme", "deprecated"})
"""Manifest fields not compared with public's: a job never carries `readme`, and npm's
`deprecate` rewrites `deprecated` in place on a published version (it changes no byte, script
or dependency), so a job enqueued before a deprecation is still the version public lists."""


_NAMED_FIELDS = 20
"""At most this many differing manifest fields (or job digests) are named in a refusal."""


class JobRefused(MirrorgateError):  # noqa: N818 - an outcome the worker retires, not a bug
    """The job is not what the public upstream and the rules admit. `reason` is a stable
    label (the metric label); `fields` say what did not match (the job's value and public's)."""

    def __init__(self, reason: str, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.reason = reason
        self.fields = fields


def check_digest_floor(job: MirrorJob, rules: Rules) -> None:
    """Refuse a job whose strongest digest is weaker than the rules' floor, before any request
    leaves for it (the serve path never enqueues one, so such a job was written by hand)."""
    best = strongest(job.artifact.digests)
    floor = rules.integrity_minimum
    if best is not None and ALGORITHMS.index(best.algorithm) < ALGORITHMS.index(floor):
        raise JobRefused(DIGEST_FLOOR, f"the job's strongest digest is {best.algorithm}; the "
                         f"rules require {floor} or stronger", job=best.algorithm, floor=floor)


async def regate(job: MirrorJob, name: PackageName, document: Mapping[str, Any] | None,
                 size: int, *, public: Upstream, rules: Rules, now: datetime,
                 keys: KeySet | None = None) -> tuple[MirrorJob, Gated]:
    """The job to carry out, and the gating that admits it: `name@version` as the public
    packument `document` (read before any tarball is fetched, through the serve path's cache
    and bounds, `packuments`; None when public has no such package; `size` its bytes)
    describes it and the current rules admit it (`keys`: the public registry's signing keys,
    for the signature rule), through the same `packument.gate` the serve path runs. The
    gating (of that version alone) is what the release signals read the version by
    (`ReleaseJudge.verdict_for`): public's packument is not filled a second time for them.

    Raises `JobRefused` when the version is not there, is denied, or the job's tarball URL,
    digests or manifest differ from public's.
    """
    if document is None:
        raise JobRefused("public-missing", f"the public upstream has no package {name.full}")
    gated = await in_thread_if_large(size, _gate, name, document, job.version, rules, now,
                                     public, keys)
    return regate_record(job, name, gated.versions.get(job.version),
                         gated.time.get(job.version)), gated


def regate_record(job: MirrorJob, name: PackageName, record: VersionRecord | None,
                  published: str | None) -> MirrorJob:
    """The job to carry out, judged by the gate's `record` of public's `name@version` (None:
    public does not list it) and its publish time: what `regate` does once it has gated
    public's packument, and what the worker beside the proxy does with the proxy's own
    verdict (`gate.packuments.public.PublicVerdict`). Raises `JobRefused`."""
    if record is None:
        raise JobRefused("public-missing", f"the public packument of {name.full} does not list "
                         f"{job.version}")
    if record.denial is not None:
        timed = {"until": stamp(record.denial.until)} if record.denial.until else {}
        raise JobRefused("denied", f"the rules deny it: {record.denial.reason}",
                         rule=record.denial.rule, **timed)
    url = record.upstream_tarball
    if url is None or url != job.artifact.tarball_url:
        raise JobRefused("tarball-mismatch", "the job's tarball URL is not the version's "
                         "dist.tarball", job=loggable_url(job.artifact.tarball_url),
                         public=loggable_url(url) if url is not None else None)
    _check_digests(job.artifact.digests, record.digests)
    manifest = record.manifest(None)
    if _compared(job.manifest) != _compared(manifest):
        differ = sorted(key[:64] for key in set(job.manifest) | set(manifest)
                        if key not in _IGNORED and job.manifest.get(key) != manifest.get(key))
        differ = differ[:_NAMED_FIELDS]  # the job's keys are anyone's: bound the log line
        raise JobRefused("manifest-mismatch", "the job's manifest is not the version's "
                         f"manifest on the public upstream (differs in {', '.join(differ)})",
                         fields=differ)
    artifact = MirrorArtifact(url, tarball_filename(name, record.version), job.artifact.size,
                              record.digests)
    # the publish time, too, is public's own (for the mirror mark), never the job's
    return MirrorJob(name.full, record.version, artifact, manifest,
                     published=time_text(published))


def _gate(name: PackageName, document: Mapping[str, Any], version: str, rules: Rules,
          now: datetime, public: Upstream, keys: KeySet | None) -> Gated:
    # Only the public side: what matters here is public's verdict on a public version. The
    # private side's say (ownership) flows in through the same gate and rules. Only the job's
    # version is judged: the one record read here, not thousands of a large packument's.
    return gate(name, None, document, rules=rules, now=now, origin=public.origin, keys=keys,
                only=version)


def _check_digests(carried: tuple[Digest, ...], published: tuple[Digest, ...]) -> None:
    """Every digest the job carries is one public publishes for the version, and the job
    carries public's strongest: verification is never weaker than public's metadata allows."""
    for digest in carried:
        if not any(same_digest(digest, theirs) for theirs in published):
            raise JobRefused("digest-mismatch", f"the job carries a {digest.algorithm} digest "
                             "the public metadata does not publish for this version",
                             job=digest.sri(), public=[d.sri() for d in published])
    best = strongest(published)
    if best is not None and not any(same_digest(best, mine) for mine in carried):
        raise JobRefused("digest-mismatch", f"the job lacks the {best.algorithm} digest the "
                         "public metadata publishes (a weaker one is never enough)",
                         job=[d.sri() for d in carried[:_NAMED_FIELDS]], public=best.sri())


def _compared(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in manifest.items() if key not in _IGNORED}
