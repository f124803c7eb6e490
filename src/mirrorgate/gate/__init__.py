"""The gate: the packuments every part of mirrorgate reads, merged, judged and cached.

Between the protocol (`npm/`) and policy (`rules/`) below, and the three applications above it
(`serve/`, `worker/`, `commands/`), which use it and never each other. One idea per module:
`records` (what a gating hands back), `merge` (the gating), `fill` (both upstreams at once,
then the gate), `cache` (TTL, single flight, LRU), `entry` (a cache value, its renderings),
`packuments` (cache and fill as one service), `public` (public's packuments the worker re-gates
against), `firstparty` (names remembered as the organisation's), `withdrawals` (mirrored
versions public took down), `jobs` (the mirror job of a record), `admission` (the answer to
each request kind), `refusals` (what a refusal says). docs/architecture.md#the-layers.
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
