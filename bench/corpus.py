"""The side-by-side bench's corpus (`bench.side_by_side`): each case is a package's history as a
registry would serve it the day after the release judged, and what is known of that release.

A case is a real update, a rebuilt incident shape or a real malicious sample; its versions
carry their real registry manifests and tarball bytes (held on disk, not in memory); the
release judged is served as published two days ago, past the default cooldown, as a first
pull the day after a release finds it (`in_order`), the versions before it at their times.
Pure, apart from reading the tarballs' files: the unit tests build cases from tarballs made
in the test.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.servers.packages import build_tarball

__all__ = [
    "COMPROMISED",
    "KINDS",
    "MALICIOUS_KINDS",
    "NEW_PACKAGE",
    "PUBLISHED_AGO",
    "SABOTAGE",
    "SHAPE",
    "UPDATE",
    "Case",
    "Dependency",
    "Published",
    "files_of",
    "in_order",
    "manifest_of",
    "pack",
    "pack_directory",
    "stored",
]

PUBLISHED_AGO = timedelta(days=2)
"""How long before the bench's run the release judged was published: past the default
cooldown (1 day), as a first pull the day after a release would find it."""

COMPROMISED = "compromised release"
NEW_PACKAGE = "malicious new package"
SABOTAGE = "sabotage"
SHAPE = "rebuilt incident shape"
UPDATE = "real update"
MALICIOUS_KINDS = (COMPROMISED, NEW_PACKAGE, SABOTAGE)
KINDS = (*MALICIOUS_KINDS, SHAPE, UPDATE)
"""The rows of the bench's table: the real samples by kind, the shapes, the good updates."""

_DROPPED = ("dist", "_id", "_resolved", "_integrity", "_from", "_shasum")
"""Registry fields of a version manifest the registry serving the corpus computes itself."""


@dataclass(frozen=True)
class Published:
    """One version as the registry served it: its manifest (without `dist`), its tarball's
    file in the bench's store, and when it was published."""

    version: str
    manifest: Mapping[str, Any]
    tarball: Path
    published: datetime
    dist: Mapping[str, Any] = field(default_factory=dict)
    """`dist` fields the registry adds beside the digests it computes: `attestations`."""


@dataclass(frozen=True)
class Dependency:
    """A package a judged release adds, as the registry knows it: its newest versions'
    manifests (their publishers, their provenance) and its first publish; no tarballs."""

    name: str
    manifests: tuple[Mapping[str, Any], ...]
    times: Mapping[str, datetime]
    """Each version's publication and `created` (the package's first publish)."""


@dataclass(frozen=True)
class Case:
    """A release to judge, with the history the gate compares it with.

    `versions` are oldest first and all served; `judged` are the versions a pull asks for
    (an incident can take two: event-stream and flatmap-stream), the case refused when any
    is. `created` is the package's first publish. `malicious` says which way a verdict is
    right."""

    kind: str
    label: str
    name: str
    versions: tuple[Published, ...]
    judged: tuple[str, ...]
    created: datetime
    malicious: bool
    source: str = ""
    """Where it came from: a sample's repository and path, an incident's write-ups."""
    maintainers: tuple[Mapping[str, Any], ...] = ()
    dependencies: tuple[Dependency, ...] = ()
    also: tuple[Case, ...] = ()
    """Other packages of the same incident, each a case of its own served beside this one
    (flatmap-stream beside event-stream); their judged versions count for this case."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}: one of {', '.join(KINDS)}")
        known = {published.version for published in self.versions}
        if not self.judged or not set(self.judged) <= known:
            raise ValueError(f"{self.label}: judged {self.judged} not among {sorted(known)}")

    def published(self, version: str) -> Published:
        return next(p for p in self.versions if p.version == version)

    @property
    def names(self) -> frozenset[str]:
        """Every package name the case serves: its own, its incident's, its new dependencies'."""
        found = {self.name, *(dep.name for dep in self.dependencies)}
        for other in self.also:
            found |= other.names
        return frozenset(found)

    def judged_tarballs(self) -> list[tuple[str, str, Path]]:
        """(name, version, tarball) of every release a pull of the case asks for."""
        mine = [(self.name, version, self.published(version).tarball)
                for version in self.judged]
        return mine + [item for other in self.also for item in other.judged_tarballs()]


def manifest_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """A registry version document as the corpus keeps it: what the publisher sent."""
    return {key: value for key, value in document.items() if key not in _DROPPED}


def in_order(previous: datetime, now: datetime,
             first: datetime | None = None) -> tuple[datetime, datetime]:
    """The times a release and its predecessor are served with: the release published
    `PUBLISHED_AGO` before `now` (past the cooldown; a quarantine a signal earns still in
    force, as at a first pull the day after), the predecessor before it, at the package's
    `first` publish when that is earlier (only the two are served, and a gate may date the
    package by its listed versions alone). The registry this machine reaches rewrote old times
    to when it copied each version, often the predecessor after the release: served so, the
    gate would find no earlier release and judge a first version."""
    published = now - PUBLISHED_AGO
    earliest = min(previous, first) if first is not None else previous
    return published, min(earliest, published - timedelta(minutes=1))


def stored(store: Path, tarball: bytes) -> Path:
    """The tarball kept in the bench's store under its sha256 (GuardDog reads these files)."""
    store.mkdir(parents=True, exist_ok=True)
    path = store / f"{hashlib.sha256(tarball).hexdigest()}.tgz"
    if not path.exists():
        partial = path.with_suffix(".part")
        partial.write_bytes(tarball)
        partial.replace(path)
    return path


def files_of(tarball: bytes) -> dict[str, bytes]:
    """A tarball's regular files by their path inside the package (the first component
    stripped, as npm unpacks it: `package/`, or an old packer's folder name)."""
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            parts = member.name.lstrip("./").split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            data = archive.extractfile(member)
            if data is not None:
                found[parts[1]] = data.read()
    return found


def pack(files: Mapping[str, bytes]) -> bytes:
    """Files packed as `npm pack` packs them (`package/` before each sorted path, npm's fixed
    mtime, 0644, gzip), in pax so that a real package's long paths fit."""
    return build_tarball(files, tarfile.PAX_FORMAT)


def pack_directory(folder: Path) -> bytes:
    """A sample kept as a folder of sources (its `package.json` at the top), packed as npm
    would pack it."""
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[path.relative_to(folder).as_posix()] = path.read_bytes()
    if "package.json" not in files:
        raise ValueError(f"{folder} has no package.json at its top")
    return pack(files)
