"""The gate: the packuments every part of mirrorgate reads, merged, judged and cached.

Between the protocol (`npm/`) and policy (`rules/`) below, and the three applications above it
(`serve/`, `worker/`, `commands/`), which use it and never each other. By concern, each reading
only those listed before it: `records` (what a gating hands back) and `cache` (TTL, single
flight, LRU), shared; `kept/` (what must not be forgotten: facts, first-party names,
withdrawals, waivers); `packuments/` (the merge, the fill, the entries, the service); `verdicts/`
(the release judge, one reading, the baseline); `pulls/` (the pull log, exposure). Above them,
the answers: `admission` (each request kind), `refusals` (what a refusal says), `alerts`, `jobs`,
and `assembled` (the one gate of a process). docs/architecture.md#the-layers.
"""

from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.jobs import mirror_job
from mirrorgate.gate.kept.firstparty import FirstPartyNames
from mirrorgate.gate.kept.withdrawals import WithdrawnVersions
from mirrorgate.gate.packuments.entry import PackumentEntry, PublicAnswer, Rendered, RenderKey
from mirrorgate.gate.packuments.fill import FirstPartyOutageError, PackumentSource
from mirrorgate.gate.packuments.merge import PUBLIC_WITHDRAWN, TARBALL_ORIGIN, gate
from mirrorgate.gate.packuments.public import CachedPublic, PublicPackuments
from mirrorgate.gate.packuments.service import Packuments
from mirrorgate.gate.records import (
    MAX_VERSIONS,
    Denial,
    Gated,
    TooManyVersionsError,
    UrlRefusal,
    VersionRecord,
)

__all__ = [
    "MAX_VERSIONS",
    "PUBLIC_WITHDRAWN",
    "TARBALL_ORIGIN",
    "Cached",
    "CachedPublic",
    "Denial",
    "FirstPartyNames",
    "FirstPartyOutageError",
    "Gated",
    "Loaded",
    "PackumentCache",
    "PackumentEntry",
    "PackumentSource",
    "Packuments",
    "PublicAnswer",
    "PublicPackuments",
    "RenderKey",
    "Rendered",
    "TooManyVersionsError",
    "UrlRefusal",
    "VersionRecord",
    "WithdrawnVersions",
    "gate",
    "mirror_job",
]
