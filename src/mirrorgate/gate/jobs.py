"""The mirror job for an admitted public version, built from the gate's record of it.

The one place a job is made: the serve path enqueues it once a client has the verified bytes,
and `mirrorgate prewarm` enqueues it before anyone installs.
"""

from __future__ import annotations

from mirrorgate.gate.records import VersionRecord
from mirrorgate.mirror import MirrorArtifact, MirrorJob
from mirrorgate.moments import time_text
from mirrorgate.npm.names import PackageName, tarball_filename
from mirrorgate.npm.versions import unstorable

__all__ = ["mirror_job"]


def mirror_job(name: PackageName, record: VersionRecord, url: str, size: int | None,
               published: str | None) -> MirrorJob:
    """The job for an admitted public version: name, version, every digest of its `dist`,
    the upstream tarball URL and file name, the size when known, the manifest without
    `readme`, the public publish time (kept only when it is one). Raises ValueError for a
    version without a digest (which the gate never admits) and for one no registry can
    store (`versions.unstorable`: such a version is served from public, never mirrored)."""
    if (why := unstorable(record.version)) is not None:
        raise ValueError(why)
    return MirrorJob(
        name=name.full,
        version=record.version,
        artifact=MirrorArtifact(url, tarball_filename(name, record.version), size,
                                record.digests),
        manifest=record.manifest(None),
        published=time_text(published),  # the public time, for the mirror's mark
    )
