"""When a young dependency is the project's own new package: the one exemption of
`new-dependency-young`, made of what a thief holding one stolen npm token cannot produce.

Both the release and the dependency carry a provenance attestation, built from the same source
repository. The registry accepts a provenance bundle only when its Sigstore certificate (issued
to a CI run of that repository, through the CI's OIDC identity) names the repository the
package.json declares, so the `repository` of a version with provenance is the registry's
checked word, not the publisher's claim. docs/serving.md#an-exemption-an-attacker-cannot-mint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorgate.rules.takeover import PROVENANCE_PREDICATE

__all__ = ["provenance_repository"]


def _has_provenance(manifest: Mapping[str, Any]) -> bool:
    dist = manifest.get("dist")
    attestations = dist.get("attestations") if isinstance(dist, Mapping) else None
    provenance = attestations.get("provenance") if isinstance(attestations, Mapping) else None
    kind = provenance.get("predicateType") if isinstance(provenance, Mapping) else None
    return isinstance(kind, str) and kind.startswith(PROVENANCE_PREDICATE)


def _normalised(url: str) -> str | None:
    """`git+https://github.com/Owner/Repo.git` and `github:owner/repo` alike, as one text."""
    text = url.strip().lower()
    for prefix in ("git+", "git://", "ssh://git@", "https://", "http://", "git@"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.startswith("github:"):
        text = "github.com/" + text[len("github:"):]
    text = text.replace("github.com:", "github.com/", 1).split("#", 1)[0].rstrip("/")
    text = text.removesuffix(".git")
    host, _, path = text.partition("/")
    if not host or path.count("/") < 1:
        return None  # not `host/owner/repo`: nothing two packages can be matched on
    return text


def provenance_repository(manifest: Mapping[str, Any]) -> str | None:
    """The source repository a version was built from, when it carries provenance (and so the
    registry checked that repository against the attestation); None otherwise."""
    if not _has_provenance(manifest):
        return None
    repository = manifest.get("repository")
    url = repository.get("url") if isinstance(repository, Mapping) else repository
    return _normalised(url) if isinstance(url, str) else None
