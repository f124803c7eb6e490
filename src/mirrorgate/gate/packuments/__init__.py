"""The packuments: what both upstreams answer, merged and judged version by version, cached
and rendered. `merge` (the gating), `times` (publish times read as evidence), `lazyhistory`
(the releases a baseline walk reads, gated as reached), `fill` (both upstreams at once, then
the gate), `entry` (a cache value, its renderings), `service` (cache and fill as one service),
`public` (public's packuments the worker re-gates against). They read what is kept
(`gate.kept`) and never the release verdicts, which read them.
"""
