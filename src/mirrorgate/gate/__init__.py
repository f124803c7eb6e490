"""The gate: the packuments every part of mirrorgate reads, merged, judged and cached.

Between the protocol (`npm/`) and policy (`rules/`) below, and the three applications above it
(`serve/`, `worker/`, `commands/`), which use it and never each other. One idea per module:
`records` (what a gating hands back), `merge` (the gating), `fill` (both upstreams asked at
once, then the gate), `cache` (TTL, single flight, LRU), `entry` (a cache value and its
renderings), `packuments` (the cache and the fill as one service), `public` (the readers of
public packuments the worker re-gates against), `memory` (what is learned from an upstream and
kept in the data directory), `firstparty` (names remembered as the organisation's),
`withdrawals` (mirrored versions the public registry took down), `jobs` (the mirror job built
from a record, and handing it to the queue).
"""

from mirrorgate.gate.cache import Cached, Loaded, PackumentCache
from mirrorgate.gate.entry import PackumentEntry, PublicAnswer, Rendered, RenderKey
from mirrorgate.gate.fill import FirstPartyOutageError, PackumentSource
from mirrorgate.gate.firstparty import FirstPartyNames
from mirrorgate.gate.jobs import mirror_job
from mirrorgate.gate.merge import PUBLIC_WITHDRAWN, TARBALL_ORIGIN, gate
from mirrorgate.gate.packuments import Packuments
from mirrorgate.gate.public import CachedPublic, PublicPackuments
from mirrorgate.gate.records import (
    MAX_VERSIONS,
    Denial,
    Gated,
    TooManyVersionsError,
    UrlRefusal,
    VersionRecord,
)
from mirrorgate.gate.withdrawals import WithdrawnVersions

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
