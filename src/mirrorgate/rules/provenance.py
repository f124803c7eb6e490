"""Where a release was built against where the release it is compared with was: a sentence of
its verdict's evidence, never a reason to admit.

A stolen token publishes without the project's provenance; a poisoned pipeline publishes with
it, from the project's own repository and workflow (TanStack, May 2026). So the sentence says
which of the two a release looks like, and the capability comparison decides either way.
docs/verdicts.md#provenance-is-evidence-not-a-pass.
"""

from __future__ import annotations

from mirrorgate.npm.attestations import Workflow
from mirrorgate.rules.release import Release

__all__ = ["provenance_evidence"]

_SAID = "that says where it was built, not what its code does"


def _workflows(new: Release, old: Release) -> str:
    """What the two provenance statements say of the workflow that built each (`built`), as
    a clause after "built from the same repository"; empty when neither was fetched."""
    if new.built is None and old.built is None:
        return ""
    now, then = new.built, old.built
    if not isinstance(now, Workflow) or not isinstance(then, Workflow):
        # never a refusal and never a pass: said, with why
        unread = [f"{release.version}'s: {release.built}" for release in (new, old)
                  if not isinstance(release.built, Workflow)]
        return f", its workflow not read ({'; '.join(unread)})"
    if not now.same(then):
        return (f", by another workflow: {now.path} of {now.repository}, where "
                f"{old.version} was built by {then.path} of {then.repository}")
    # the ref is each release's own (a tag per release): said, not compared
    return f" by the same workflow ({now.path}, at {now.ref}; {old.version} at {then.ref})"


def provenance_evidence(new: Release, old: Release) -> str | None:
    """What `new`'s provenance says against `old`'s (each the repository the registry checked,
    `Release.provenance`, and the workflow its statement names, `Release.built`, when it was
    fetched); None when neither carries any: nothing to say of either."""
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
    # token cannot make this, a poisoned pipeline of the same repository and workflow can
    return (f"{new.version} was built from the same repository as {old.version} "
            f"({new.provenance}){_workflows(new, old)}, both with provenance: {_SAID}")
