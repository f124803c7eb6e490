"""Where a release was built against where the release it is compared with was: a sentence of
its verdict's evidence, never a reason to admit.

A stolen token publishes without the project's provenance; a poisoned pipeline publishes with
it, from the project's own repository (TanStack, May 2026). So the sentence says which of the
two a release looks like, and the capability comparison decides either way.
docs/verdicts.md#provenance-is-evidence-not-a-pass.
"""

from __future__ import annotations

from mirrorgate.rules.release import Release

__all__ = ["provenance_evidence"]


def provenance_evidence(new: Release, old: Release) -> str | None:
    """What `new`'s provenance says against `old`'s (each the repository the registry checked,
    `Release.provenance`); None when neither carries any: nothing to say of either."""
    if new.provenance is None and old.provenance is None:
        return None
    if new.provenance is None:
        return (f"{new.version} carries no provenance naming its repository, where "
                f"{old.version} was built from {old.provenance} with provenance: the shape "
                "of a publish with a stolen token")
    if old.provenance is None:
        return (f"{new.version} was built from {new.provenance} with provenance, where "
                f"{old.version} carried none")
    if new.provenance != old.provenance:
        return (f"{new.version} was built from another repository than {old.version}: "
                f"{new.provenance}, where {old.version} was built from {old.provenance}")
    # the registry checked the repository, and only a CI run of it could sign: a stolen
    # token cannot make this, a poisoned pipeline of the same repository can
    return (f"{new.version} was built from the same repository as {old.version} "
            f"({new.provenance}), both with provenance: that says where it was built, not "
            "what its code does")
