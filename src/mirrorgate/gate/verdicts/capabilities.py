"""The capability signals of one verdict: which release's code vouches for this one's, and
whether nothing does (a first release, a young package), for `gate.verdicts.reading`.

Apart from the reading of one version (`gate.verdicts.reading`) because it is the one decision
the default rules make on every first pull: what a release's code can do, compared with the
release before it, or judged alone (docs/serving.md "What a release's code can do").
"""

from __future__ import annotations

from datetime import datetime

from mirrorgate.gate.records import Gated, VersionRecord
from mirrorgate.gate.verdicts.findings import package_first_published
from mirrorgate.moments import stamp
from mirrorgate.rules.capabilities import check_alone, check_gained
from mirrorgate.rules.release import Fired, Release
from mirrorgate.rules.releasetable import NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY, ReleaseRules

__all__ = ["capability_findings"]


def capability_findings(new: Release, previous: VersionRecord | None, before: Release | None,
                        gated: Gated, rules: ReleaseRules, now: datetime, *,
                        looked: bool) -> list[Fired]:
    """What the capability signals find in `new`: a capability gained over `before` (the
    baseline `previous`, its bytes read; None when they could not be, which `unchecked` or
    `unreadable-release` says instead), and, where nothing vouches for it (no earlier
    release clean to compare with, or a package first published less than
    `release.young_package` ago, or one whose times establish no age: its earlier releases
    are as new as it), what its code can do alone. `looked`: whether a baseline was looked
    for (not when the code shows nothing it could have gained, nor with no signal that
    compares on)."""
    found: list[Fired] = []
    if before is not None and rules.action(NEW_CAPABILITY) != "off":
        gained = check_gained(new, before)
        if gained is not None:
            found.append(gained)
    if rules.action(YOUNG_PACKAGE_CAPABILITY) == "off":
        return found
    first = package_first_published(gated)
    why: str | None = None
    if first is None:  # times that cannot establish its age never make it old
        why = ("the package's first publish cannot be established from its registry's "
               "times, so it is treated as young")
    elif now - first < rules.young_package:
        why = (f"the package was first published {stamp(first)}, less than "
               f"{rules.young_package_text} ago")
    elif previous is None and looked:
        # a baseline was looked for and none found (not merely not looked for)
        why = f"{new.version} has no earlier release whose code vouches for it"
    if why is not None:
        alone = check_alone(new, why)
        if alone is not None:
            found.append(alone)
    return found
