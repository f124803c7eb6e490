"""Builders with overrides, so each test states only what it is about."""

from __future__ import annotations

from typing import Any

from mirrorgate.integrity import Digest
from mirrorgate.mirror import MirrorArtifact, MirrorJob
from tests.sri import sri


def sha512_of(data: bytes) -> Digest:
    return Digest("sha512", sri("sha512", data).removeprefix("sha512-"))


def make_artifact(**overrides: Any) -> MirrorArtifact:
    fields: dict[str, Any] = {
        "tarball_url": "http://127.0.0.1:9/left-pad/-/left-pad-1.3.0.tgz",
        "filename": "left-pad-1.3.0.tgz",
        "size": 1234,
        "digests": (sha512_of(b"left-pad"),),
    }
    fields.update(overrides)
    return MirrorArtifact(**fields)


def make_job(name: str = "left-pad", version: str = "1.3.0", **overrides: Any) -> MirrorJob:
    manifest = overrides.pop("manifest", None) or {
        "name": name,
        "version": version,
        "dependencies": {"is-number": "^7.0.0"},
        "dist": {"tarball": f"http://127.0.0.1:9/{name}/-/{name}-{version}.tgz"},
    }
    artifact = overrides.pop("artifact", None) or make_artifact(
        filename=f"{name.rsplit('/', 1)[-1]}-{version}.tgz")
    return MirrorJob(name=name, version=version, artifact=artifact, manifest=manifest, **overrides)
