"""The status page's HTML frame: one layout, the escaping helper and the response headers.

Every value that reaches a page goes through `esc` (`html.escape`, quotes included), so a
package name, a reason or an upstream's error text is always text, never markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from aiohttp import web

__all__ = ["CSP", "HEADERS", "esc", "page", "search_form", "table"]

# No script at all, styles and images only from this origin, forms only back to it, no framing:
# an injection that slipped past escaping still could not run, load or post anything elsewhere.
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # the page shows live figures and, behind tokens, what a client may see: never cached
    "Cache-Control": "no-store",
}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def table(headings: Iterable[str], rows: Iterable[Iterable[str]], *, empty: str,
          cls: str = "") -> str:
    """A table of already-escaped cells (callers escape with `esc`), or `empty` as a line."""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headings)
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def search_form(value: str = "") -> str:
    return ('<form class="search" method="get" action="/ui/package" role="search">'
            '<label for="name">Package</label>'
            f'<input id="name" name="name" type="search" value="{esc(value)}" '
            'placeholder="lodash or @scope/name" autocomplete="off" required>'
            '<button type="submit">Look up</button></form>')


def page(title: str, body: str, *, status: int = 200, search: str = "",
         nav: bool = True) -> web.Response:
    """A complete HTML document; `body` is markup built from escaped values."""
    top = (f'<header><a class="brand" href="/ui/">mirrorgate</a>{search_form(search)}</header>'
           if nav else '<header><span class="brand">mirrorgate</span></header>')
    document = (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · mirrorgate</title>"
        '<link rel="stylesheet" href="/ui/static/style.css">'
        f"</head><body>{top}<main>{body}</main></body></html>\n"
    )
    return web.Response(status=status, text=document, content_type="text/html",
                        charset="utf-8", headers=HEADERS)
