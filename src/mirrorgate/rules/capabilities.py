"""What a release's code can do, judged: against the release before it (a capability gained),
and alone where nothing vouches for it (a first release, a young package).

A capability present is not a signal: most packages that reach the network always did. A
capability gained is: the worm gains a process and a download at install, the chalk payload
gains interception at load, a token stealer gains the environment beside the network. Pure:
it reads two `Capabilities` (`npm.capabilities`). docs/serving.md "What a release's code can
do" tells the story; `verdict` is the entry point for a reader of two releases (bench/).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from mirrorgate.npm.capabilities import INSTALL, LOAD, Capabilities, Found, capabilities_of
from mirrorgate.npm.jsuses import (
    CAPABILITIES,
    CODE_REMOVED,
    CREDENTIALS,
    DECODED,
    ENDLESS,
    ENVIRONMENT,
    HOME,
    INTERCEPTS,
    NETWORK,
    OBFUSCATED,
    PROCESS,
    UNREAD,
    WRITES,
    WRITES_HOME,
)
from mirrorgate.rules.destinations import new_destinations
from mirrorgate.rules.provenance import provenance_evidence
from mirrorgate.rules.release import Fired, Release
from mirrorgate.rules.releasetable import NEW_CAPABILITY, YOUNG_PACKAGE_CAPABILITY

__all__ = ["ALONE_AT_INSTALL", "ALONE_AT_LOAD", "GAINED_AT_LOAD", "alone", "can_gain",
           "check_alone",
           "check_gained", "gained", "of_release", "verdict"]

GAINED_AT_LOAD = frozenset({WRITES, WRITES_HOME, DECODED, INTERCEPTS, OBFUSCATED, UNREAD,
                            ENDLESS})
"""What load-time code may not gain, alone; network with the environment or files outside
the package (`_SENDS`) may not be gained together either, nor may its code be removed
(`_code_removed`). Other gains at load (a new `require('https')`, a `child_process` of a new
feature) are what a library's releases do. An endless loop at module scope is sabotage's
(colors 1.4.44-liberty-2): `require` never returns."""
ALONE_AT_INSTALL = frozenset({NETWORK, PROCESS, ENVIRONMENT, CREDENTIALS, UNREAD})
"""What a release nothing vouches for may not do at install."""
ALONE_AT_LOAD = frozenset({DECODED, INTERCEPTS, WRITES_HOME, UNREAD, ENDLESS})
"""What a release nothing vouches for may not do at load, besides sending the environment or
files outside the package over the network (`_SENDS`). Writing into the home directory (or
where it hides the path) is peacenotwar's; writing into the project it runs in
(`writes-outside` alone) is what a young CLI's bin does, and passes. A loop with no way out at
module scope has no use in a first release either: it hangs whoever requires it. A first
release with no code at load (`code-removed`) passes: nothing was taken from anyone."""
_READS = frozenset({ENVIRONMENT, HOME, CREDENTIALS})
_SHOWN = 3
_SAID = 200  # characters of a dependency's spec and why it runs kept (a URL is the sender's)


def _places(found: Iterable[Found]) -> str:
    items = list(found)
    shown = "; ".join(item.text() for item in items[:_SHOWN])
    return shown + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _sends(capabilities: Capabilities, phase: str) -> bool:
    """Whether code of `phase` reaches the network and reads the environment or files
    outside the package: what it reads, it can send."""
    held = capabilities.at(phase)
    return NETWORK in held and bool(held & _READS)


def _detail(capabilities: Capabilities, capability: str, phase: str, verb: str) -> str:
    return (f"{phase}-time code {verb} {capability} ({CAPABILITIES[capability]}): "
            f"{_places(capabilities.where(capability, phase))}")


def gained(new: Capabilities, previous: Capabilities) -> list[str]:
    """What `new`'s code gains over `previous`'s, as details naming each place: any
    capability at install; at load, `GAINED_AT_LOAD` and sending what it reads."""
    details: list[str] = []
    for capability in sorted(new.at_install - previous.at_install):
        details.append(_detail(new, capability, INSTALL, "gains"))
    for capability in sorted((new.at_load - previous.at_load) & GAINED_AT_LOAD):
        details.append(_detail(new, capability, LOAD, "gains"))
    if _sends(new, LOAD) and not _sends(previous, LOAD):
        for capability in [NETWORK, *sorted(new.at_load & _READS)]:
            details.append(_detail(new, capability, LOAD, "gains, together,"))
    details += new_destinations(new, previous)  # a host the release before never named
    return details + _code_removed(new, previous)


def _code_removed(new: Capabilities, previous: Capabilities) -> list[str]:
    """faker 6.6.6's sabotage: the code that runs at load is gone (its entry missing or only
    comments) where the release before loaded code; said with the entries it loaded."""
    if CODE_REMOVED not in new.at_load or CODE_REMOVED in previous.at_load or \
            not any(size != 0 for _path, size in previous.entries):
        return []
    loaded = "; ".join(f"{path} ({size:,} bytes of code)" if size > 0 else path
                       for path, size in previous.entries[:_SHOWN] if size != 0)
    return [f"load-time code gains {CODE_REMOVED} ({CAPABILITIES[CODE_REMOVED]}): "
            f"{_places(new.where(CODE_REMOVED, LOAD))}; the release before loaded {loaded}"]


def alone(new: Capabilities) -> list[str]:
    """What `new`'s code does that a release nothing vouches for may not."""
    details = [_detail(new, capability, INSTALL, "can use")
               for capability in sorted(new.at_install & ALONE_AT_INSTALL)]
    details += [_detail(new, capability, LOAD, "can use")
                for capability in sorted(new.at_load & ALONE_AT_LOAD)]
    if _sends(new, LOAD):
        details += [_detail(new, capability, LOAD, "can use, together,")
                    for capability in [NETWORK, *sorted(new.at_load & _READS)]]
    return details


def can_gain(new: Capabilities) -> bool:
    """Whether a release reading `new` could have gained anything `gained` holds (most
    releases run nothing at install and nothing at load it looks for): if not, the release
    before it need not be read."""
    # besides the gains themselves: code removed (`_code_removed`) and a network call to a
    # written host (`new_destinations`), each judged against the release before
    return bool(new.at_install or new.at_load & (GAINED_AT_LOAD | {CODE_REMOVED})
                or new.sent) or _sends(new, LOAD)


def verdict(new: Capabilities, previous: Capabilities | None) -> list[str]:
    """Why a release reading `new` is held, compared with the release reading `previous`
    (None: nothing vouches for it, judged alone); empty: it passes. The entry point for a
    reader of two releases (bench/): the gate's own checks are `check_gained` and
    `check_alone`, which say the same with the versions named."""
    return gained(new, previous) if previous is not None else alone(new)


def of_release(release: Release) -> Capabilities:
    """What a release's code can do as npm and yarn run it: its tarball's reading, with the
    hooks only the registry's manifest declares added (each client runs one or the other),
    and the code npm fetches from outside any registry to run at install, unread."""
    contents = release.contents
    extra = {hook: command for hook, command in release.commands.items()
             if contents.scripts.get(hook) != command}
    read = capabilities_of(contents.layout, contents.code, extra) if extra \
        else contents.capabilities
    # a git, URL or path dependency's code runs at install (a git one's `prepare`, an
    # archive's hooks) with no registry, and so no gate, between: code at install that
    # mirrorgate never reads (`Release.fetched_outside`, issue 53)
    unread = [Found(UNREAD, INSTALL, "package.json", 0, outside[:_SAID])
              for outside in release.fetched_outside()]
    if contents.problem is not None:
        # a tarball that cannot be read as npm unpacks it is not clean: what runs in it, at
        # install and at load, is unread
        unread += [Found(UNREAD, phase, "package.json", 0, contents.problem[:100])
                   for phase in (INSTALL, LOAD)]
    return replace(read, found=read.found + tuple(unread)) if unread else read


def check_gained(new: Release, previous: Release) -> Fired | None:
    """Stops a compromised release of an established package: its code gains a capability
    the release before it did not have (`gained`). The predecessor's capabilities stand
    beside the evidence, and where each was built (`provenance_evidence`): said, never
    weighed, since a poisoned pipeline signs what it builds."""
    now, then = of_release(new), of_release(previous)
    details = gained(now, then)
    if not details:
        return None
    had = (f"{previous.version} could use at install: {then.described(INSTALL)}; at load: "
           f"{then.described(LOAD)}")
    built = provenance_evidence(new, previous)
    where = () if built is None else (built,)
    return Fired(NEW_CAPABILITY, f"its code gains what {previous.version}'s could not: "
                 f"{'; '.join(details[:_SHOWN])} ({had})"
                 + "".join(f"; {sentence}" for sentence in where), (*details, *where, had))


def check_alone(new: Release, why: str) -> Fired | None:
    """Stops a malicious first release, or a young package's: with nothing to compare with,
    what its code can do at install and at load (`alone`). `why` says why nothing vouches
    for it (a first version, a package first published days ago)."""
    details = alone(of_release(new))
    if not details:
        return None
    return Fired(YOUNG_PACKAGE_CAPABILITY, f"{why}, and its code can do what such a release "
                 f"may not: {'; '.join(details[:_SHOWN])}", tuple(details))
