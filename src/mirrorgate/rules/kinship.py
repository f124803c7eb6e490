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

from mirrorgate.npm.attestations import has_provenance, normalised_repository

__all__ = ["provenance_repository"]


def provenance_repository(manifest: Mapping[str, Any]) -> str | None:
    """The source repository a version was built from, when it carries provenance (and so the
    registry checked that repository against the attestation); None otherwise."""
    if not has_provenance(manifest):
        return None
    repository = manifest.get("repository")
    url = repository.get("url") if isinstance(repository, Mapping) else repository
    return normalised_repository(url) if isinstance(url, str) else None
