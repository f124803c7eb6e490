"""What one file of JavaScript can do: the capabilities its code uses (network, processes, the
environment, files outside the package, dynamic code, native code, interception of globals),
each with its line and the call, read with a JavaScript parser (tree-sitter) where a word
that may show one stands. `npm.capabilities` gathers these over the files that run.

Pure and bounded: the words found at memory speed settle most places (`npm.js.words`), only
the code around the rest is parsed (`npm.js.windows`), each word read by where the parser
places it (`npm.js.calls`, a write's path in `npm.js.writes`). Past `ReadBudget` or
`MAX_HITS` the file is `unread`, never clean. The entry of the parts under `npm/js/`.
docs/serving.md "What a release's code can do" tells the story.
"""

from __future__ import annotations

from dataclasses import replace

from mirrorgate.npm.js.calls import classify
from mirrorgate.npm.js.destinations import hosts_in, url_call_hits
from mirrorgate.npm.js.found import (
    CAPABILITIES,
    CODE_REMOVED,
    CREDENTIALS,
    DECODED,
    DYNAMIC,
    ENDLESS,
    ENVIRONMENT,
    HOME,
    INTERCEPTS,
    NATIVE,
    NETWORK,
    OBFUSCATED,
    PROCESS,
    UNREAD,
    WRITES,
    WRITES_HOME,
    Use,
    Uses,
)
from mirrorgate.npm.js.sabotage import endless_loops, is_blank
from mirrorgate.npm.js.tree import in_code
from mirrorgate.npm.js.windows import (
    PARSED_PER_TARBALL,
    ReadBudget,
    Reading,
    parsed_window,
    thread_parser,
    windows_of,
)
from mirrorgate.npm.js.words import (
    FAR_WORDS,
    MAX_HITS,
    MAX_URLS,
    Hit,
    capped_far_writes,
    hits_of,
)
from mirrorgate.npm.js.writes import FOLLOWS

__all__ = ["CAPABILITIES", "CODE_REMOVED", "CREDENTIALS", "DECODED", "DYNAMIC", "ENDLESS",
           "ENVIRONMENT", "HOME", "INTERCEPTS", "NATIVE", "NETWORK", "OBFUSCATED", "PROCESS",
           "UNREAD", "WRITES", "WRITES_HOME", "ReadBudget", "Use", "Uses", "uses_of"]


def uses_of(data: bytes, budget: ReadBudget | None = None) -> Uses:
    """What the code in `data` (one file's bytes) can do, read as described above."""
    budget = budget if budget is not None else ReadBudget()
    modules: dict[str, None] = {}
    relative: dict[str, None] = {}
    urls: list[int] = []
    hits = hits_of(data, modules, relative, urls)
    if hits is None:
        return Uses(unread=f"past {MAX_HITS:,} places where a capability may be, or "
                           f"{MAX_URLS:,} URLs")
    uses = _uses_of(data, budget, hits, modules, relative, urls)
    # sabotage's marks (`npm.js.sabotage`), read apart from the words' hits
    loops, blank = endless_loops(data, budget), is_blank(data)
    if not loops and not blank:
        return uses
    found = sorted((*uses.found, *loops), key=lambda use: (use.line, use.capability))
    return replace(uses, found=tuple(found), blank=blank)


def _uses_of(data: bytes, budget: ReadBudget, hits: list[Hit], modules: dict[str, None],
             relative: dict[str, None], urls: list[int]) -> Uses:
    far = None
    if any(hit.kind == "write-far" for hit in hits):
        far = any(word in data for word in FAR_WORDS)
        hits = capped_far_writes(hits, far)
    hosts = hosts_in(data, urls) if urls else ()
    if urls:  # a URL handed straight to a call the words do not name (`axios.post(url)`)
        hits = sorted([*hits, *url_call_hits(data, urls)], key=lambda hit: hit.start)
    if not hits:  # most files: nothing to parse
        return Uses(modules=tuple(modules), requires=tuple(relative), hosts=hosts)
    reading = Reading(data, thread_parser(), budget, modules=modules, follows=FOLLOWS, far=far)
    for start, end, group in windows_of(data, hits):
        if not budget.take(end - start):
            return Uses(tuple(reading.found.values()), tuple(reading.modules),
                        f"past the {PARSED_PER_TARBALL:,} bytes of code parsed per tarball",
                        tuple(relative), destinations=tuple(reading.destinations.values()),
                        hosts=hosts)
        root = parsed_window(reading, data[start:end])
        for hit in group:
            node = root.descendant_for_byte_range(hit.start - start, hit.end - start)
            if node is not None and in_code(node, hit.kind):
                classify(reading, node, hit, start, root)
    found = sorted(reading.found.values(), key=lambda use: (use.line, use.capability))
    return Uses(tuple(found), tuple(reading.modules), requires=tuple(relative),
                destinations=tuple(reading.destinations.values()), hosts=hosts)
