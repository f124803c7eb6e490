"""What a packument says of where a version was built: whether it carries SLSA provenance
(`dist.attestations`), and its source repository as one comparable text.

One reading for the rules that use it: the takeover signal (`rules.takeover`), kinship
between a release and its dependencies (`rules.kinship`) and the provenance sentence of a
release verdict (`rules.provenance`). docs/verdicts.md#provenance-is-evidence-not-a-pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["PROVENANCE_PREDICATE", "has_provenance", "normalised_repository"]

PROVENANCE_PREDICATE = "https://slsa.dev/provenance/"
"""npm's `dist.attestations.provenance.predicateType` starts with this: `.../v1` today,
`.../v0.2` on the first versions published with provenance; both count. An identifier the
SLSA spec defines, compared as text, never fetched."""
_PRINTABLE = re.compile(r"[ -~]{1,200}")


def has_provenance(manifest: Mapping[str, Any]) -> bool:
    """Whether the packument says this version carries SLSA provenance."""
    dist = manifest.get("dist")
    attestations = dist.get("attestations") if isinstance(dist, Mapping) else None
    provenance = attestations.get("provenance") if isinstance(attestations, Mapping) else None
    kind = provenance.get("predicateType") if isinstance(provenance, Mapping) else None
    return isinstance(kind, str) and kind.startswith(PROVENANCE_PREDICATE)


def normalised_repository(url: str) -> str | None:
    """`git+https://github.com/Owner/Repo.git` and `github:owner/repo` alike, as one text
    (`github.com/owner/repo`); None for what names no `host/owner/repo`."""
    text = url.strip().lower()
    for prefix in ("git+", "git://", "ssh://git@", "https://", "http://", "git@"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.startswith("github:"):
        text = "github.com/" + text[len("github:"):]
    text = text.replace("github.com:", "github.com/", 1).split("#", 1)[0].rstrip("/")
    text = text.removesuffix(".git")
    host, _, path = text.partition("/")
    # printable and bounded: it is quoted in a verdict's evidence
    if not host or path.count("/") < 1 or not _PRINTABLE.fullmatch(text):
        return None  # not `host/owner/repo`: nothing two packages can be matched on
    return text
