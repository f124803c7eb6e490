"""The package view (`/ui/package/<name>`): every version and what mirrorgate made of it.

The packument comes from the serve path's own cache and fill, so the page shows exactly the
verdicts `/npm/` serves, and looking a package up here warms the cache for the next install.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from aiohttp import web

from mirrorgate.gate import PUBLIC_WITHDRAWN, Gated, VersionRecord
from mirrorgate.gate.pulls.exposure import Exposure, iso
from mirrorgate.npm.names import InvalidNameError, PackageName, parse_name
from mirrorgate.npm.ownership import mirrored_mark
from mirrorgate.npm.versions import nearest, newest_first
from mirrorgate.serve.refusals import Refused
from mirrorgate.serve.ui.page import esc, page, table
from mirrorgate.serve.ui.session import see_other

__all__ = ["LoadPackument", "PulledBy", "package_view", "search"]

LoadPackument = Callable[[PackageName], Awaitable[Gated | None]]
"""The serve path's cached packument for a name; raises `Refused` when an upstream fails."""
PulledBy = Callable[[str, str | None], Awaitable[list[Exposure] | None]]
"""Who pulled which version of a name (one client's pulls, or None: every client's), from the
pull log; None when it cannot be read now."""
PULLERS_SHOWN = 200  # rows; `mirrorgate exposure NAME` lists every one


def _verdict(record: VersionRecord, survivors: list[str]) -> tuple[str, str, str]:
    """(css class, verdict, detail) for one version; the texts are escaped by the caller:
    denied (the rule, the reason, the nearest admitted version to use instead), mirrored
    (private, carrying the worker's mark), first-party (private, not a copy) or admitted
    (served from public, not mirrored yet). A denial comes first: the rules reach mirrored and
    first-party versions too; a takedown is shown as such, with the moment it was seen."""
    if record.denial is not None and record.denial.rule == PUBLIC_WITHDRAWN:
        seen = record.denial.since
        return ("denied", f"withdrawn (seen {seen})" if seen else "withdrawn",
                record.denial.reason)
    if record.denial is not None:
        instead = nearest(record.version, survivors)
        use = f"; nearest admitted: {instead}" if instead else "; no admitted version to use"
        return ("denied", f"denied ({record.denial.rule})", record.denial.reason + use)
    if record.reported:
        would = record.reported[0]
        return ("would-deny", f"would deny ({would.rule})",
                f"{would.reason}; served all the same: the rule is in report mode")
    if record.excepted:
        return "excepted", "admitted by exception", "; ".join(record.excepted)
    if record.private:
        # the same recognition the gate uses (`ownership`): a mark whose digest the stored
        # `dist` carries is a copy the worker made; anything else is the organisation's own
        if mirrored_mark(record.manifest()) is not None:
            return "mirrored", "mirrored", "a copy the worker verified and published"
        return "first-party", "first-party", "published to the private registry, not a copy"
    return "admitted", "admitted", "served from the public registry; not mirrored yet"


def _newest_first(gated: Gated) -> list[VersionRecord]:
    return [gated.versions[v] for v in newest_first(gated.versions)]


def _name_error(text: str, error: InvalidNameError) -> web.Response:
    body = (f"<h1>Not a package name</h1><p class=\"error\">{esc(text)}: {esc(error)}</p>"
            "<p>npm names are letters, digits and <code>-._~</code>, optionally scoped as "
            "<code>@scope/name</code>.</p>")
    return page("Not a package name", body, status=400)


def _pulled_section(found: list[Exposure] | None, pulls_of: str | None) -> str:
    """Who pulled which version (served, not refused), newest version first: every client's,
    or only `pulls_of`'s (a client that is not an operator)."""
    heading = "<h2>Who pulled it</h2>" + (
        "" if pulls_of is None else
        f'<p class="note" data-key="pulls-own">Your pulls only, as {esc(pulls_of)}: who else '
        "pulled a version is an operator's view (MIRRORGATE_OPERATORS).</p>")
    if found is None:
        return (f"<section>{heading}<p class=\"empty\">The pull log cannot be "
                "read now (the state store does not answer, or keeps no log here).</p>"
                "</section>")
    order = {v: n for n, v in enumerate(newest_first({e.version for e in found}))}
    found = sorted(found, key=lambda e: (order.get(e.version, len(order)), e.first))
    rows = ([f'<span class="version">{esc(e.version)}</span>', esc(e.client),
             esc(iso(e.first)), esc(iso(e.last)), esc(e.pulls), esc(", ".join(sorted(e.sources)))]
            for e in found[:PULLERS_SHOWN])
    more = (f"<p class=\"meta\">{len(found) - PULLERS_SHOWN} more: ask "
            "<code>mirrorgate exposure</code>.</p>" if len(found) > PULLERS_SHOWN else "")
    return (f"<section>{heading}" + table(
        ["version", "client", "first", "last", "pulls", "from"], rows,
        empty=("no client pulled a version of this package within the pull log's retention"
               if pulls_of is None else "you pulled no version of this package within the "
               "pull log's retention"), cls="pulled")
        + more + "</section>")


async def package_view(raw: str, load: LoadPackument, pulled: PulledBy | None = None, *,
                       pulls_of: str | None = None) -> web.Response:
    """`raw` is the path after `/ui/package/`, still percent-encoded: it is decoded and
    checked once, by the same `parse_name` as `/npm/`."""
    try:
        name = parse_name(raw)
    except InvalidNameError as error:
        # shown decoded, as the person typed it, and escaped like everything else
        return _name_error(unquote(raw, errors="replace"), error)
    try:
        gated = await load(name)
    except Refused as refused:
        body = (f"<h1>{esc(name.full)}</h1><p class=\"error\">mirrorgate could not read this "
                f"package: {esc(refused.message)}</p>")
        return page(name.full, body, status=refused.status, search=name.full)
    if gated is None or not gated.versions:
        body = (f"<h1>{esc(name.full)}</h1><p class=\"empty\">Neither the private nor the "
                "public registry knows this package.</p>")
        return page(name.full, body, status=404, search=name.full)
    survivors = gated.survivors
    rows = []
    for record in _newest_first(gated):
        css, verdict, detail = _verdict(record, survivors)
        # the license its manifest declares, as npm reads it and the license rule judges it
        license_ = (esc(record.license) if record.license is not None
                    else '<span class="meta">none</span>')
        rows.append([f'<span class="version">{esc(record.version)}</span>',
                     f'<span class="verdict {css}">{esc(verdict)}</span>',
                     esc(detail), license_, esc(gated.time.get(record.version, ""))])
    tags = table(["tag", "version"], ([esc(t), esc(v)] for t, v in sorted(
        gated.dist_tags.items())), empty="no dist-tags point at an admitted version")
    versions = table(["version", "verdict", "detail", "license", "published"], rows,
                     empty="no versions", cls="versions")
    counts = (f"{len(gated.versions)} versions: {len(survivors)} installable, "
              f"{len(gated.denied)} denied")
    body = (f"<h1>{esc(name.full)}</h1><p class=\"meta\">{esc(counts)}</p>"
            f"<section><h2>dist-tags</h2>{tags}</section>"
            f"<section><h2>Versions</h2>{versions}</section>")
    if pulled is not None:
        body += _pulled_section(await pulled(name.full, pulls_of), pulls_of)
    return page(name.full, body, search=name.full)


def search(text: str) -> web.Response:
    """The search box's GET: a valid name redirects to its page, anything else is a 400."""
    try:
        name = parse_name(text.strip())
    except InvalidNameError as error:
        return _name_error(text, error)
    return see_other(f"/ui/package/{name.url_path()}")
