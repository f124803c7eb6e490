"""The dashboard's panels drawn from Prometheus's answers to its own queries, as one HTML page.

Grafana cannot be installed from the registries these machines reach, so docs/operations.md's
picture of deploy/grafana/mirrorgate.json is this page, shot by Chromium: each panel placed by
its `gridPos`, each of its queries (the dashboard's variables put in) answered by a real
Prometheus over a real mirrorgate's series (`query_range`), drawn as lines, or as numbers for a
stat panel. No script runs in the page: it is SVG written here.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["VARIABLES", "page", "substituted"]

VARIABLES = {"$__rate_interval": "15s", "$__range": "5m", "$namespace": ".*"}
"""What Grafana would put in for the page's range (five minutes, scraped every second)."""
_COLOURS = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
            "#705da0", "#508642", "#cca300")
_CELL_W, _CELL_H = 52, 34  # pixels per grid unit: 24 columns, rows of 30 px in Grafana
_LEGEND = re.compile(r"\{\{\s*\.?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

Series = list[dict[str, Any]]
Ask = Callable[[str], Series]


def substituted(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def _legend(template: str, labels: dict[str, str]) -> str:
    if not template:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template)


def _number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "s":
        return (f"{value * 1e6:.0f} µs" if value < 1e-3 else f"{value * 1e3:.1f} ms"
                if value < 1 else f"{value:.2f} s")
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.3g}"


def _lines(series: list[tuple[str, list[tuple[float, float]]]], unit: str, width: int,
           height: int) -> str:
    points = [(t, v) for _, values in series for t, v in values if not math.isnan(v)]
    if not points:
        return (f'<text x="{width / 2}" y="{height / 2}" class="none">no data in the '
                "range</text>")
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points)
    top = top * 1.1 if top > 0 else 1.0
    left, right, bottom, up = 58, width - 8, height - 4, 8

    def x(t: float) -> float:
        return left + (right - left) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)

    def y(v: float) -> float:
        return bottom - (bottom - up) * (v / top)

    parts = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" class="axis"/>']
    for fraction in (0.5, 1.0):
        level = top / 1.1 * fraction
        parts.append(f'<text x="{left - 4}" y="{y(level) + 4:.1f}" class="tick">'
                     f"{html.escape(_number(level, unit))}</text>"
                     f'<line x1="{left}" y1="{y(level):.1f}" x2="{right}" y2="{y(level):.1f}" '
                     'class="grid"/>')
    for index, (_, values) in enumerate(series):
        drawn = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values if not math.isnan(v))
        parts.append(f'<polyline points="{drawn}" fill="none" stroke-width="1.6" '
                     f'stroke="{_COLOURS[index % len(_COLOURS)]}"/>')
    return "".join(parts)


def _panel(panel: dict[str, Any], ask: Ask) -> str:
    grid = panel["gridPos"]
    left, top = grid["x"] * _CELL_W, grid["y"] * _CELL_H
    width, height = grid["w"] * _CELL_W - 8, grid["h"] * _CELL_H - 8
    style = f"left:{left}px;top:{top}px;width:{width}px;height:{height}px"
    title = html.escape(panel["title"])
    if panel["type"] == "row":
        return f'<div class="row" style="{style}">{title}</div>'
    unit = panel["fieldConfig"]["defaults"].get("unit", "short")
    drawn: list[tuple[str, list[tuple[float, float]]]] = []
    for target in panel["targets"]:
        for found in ask(substituted(target["expr"])):
            values = [(float(t), float(v)) for t, v in found["values"]]
            drawn.append((_legend(target.get("legendFormat", ""), found["metric"]), values))
    if panel["type"] == "stat":
        cells = "".join(f'<div class="stat"><b>{html.escape(_number(values[-1][1], unit))}</b>'
                        f"<span>{html.escape(name)}</span></div>"
                        for name, values in drawn if values) or '<p class="none">no data</p>'
        return (f'<div class="panel" style="{style}"><h3>{title}</h3>'
                f'<div class="stats">{cells}</div></div>')
    legend = "".join(f'<span><i style="background:{_COLOURS[i % len(_COLOURS)]}"></i>'
                     f"{html.escape(name)}</span>" for i, (name, _) in enumerate(drawn[:8]))
    more = f"<span>and {len(drawn) - 8} more</span>" if len(drawn) > 8 else ""
    chart = _lines(drawn, unit, width - 16, height - 78)
    return (f'<div class="panel" style="{style}"><h3>{title}</h3>'
            f'<svg width="{width - 16}" height="{height - 78}">{chart}</svg>'
            f'<div class="legend">{legend}{more}</div></div>')


def page(dashboard: dict[str, Any], ask: Ask, caption: str) -> str:
    """The whole page: `ask(expr)` is Prometheus's `query_range` over the page's range."""
    panels = "".join(_panel(panel, ask) for panel in dashboard["panels"])
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(
        dashboard['title'])}</title><style>
body {{ background:#111217; color:#ccccdc; font:12px sans-serif; margin:0; padding:12px; }}
header {{ font-size:16px; margin-bottom:4px; }} .caption {{ color:#8e8e9e; margin-bottom:10px; }}
.board {{ position:relative; height:{bottom * _CELL_H}px; }}
.panel, .row {{ position:absolute; box-sizing:border-box; }}
.panel {{ background:#181b1f; border:1px solid #2c3235; border-radius:3px; padding:6px 8px; }}
.row {{ font-size:14px; font-weight:bold; padding-top:10px; }}
h3 {{ font-size:12px; margin:0 0 4px; color:#d8d9da; }}
.axis {{ stroke:#555; }} .grid {{ stroke:#2c3235; }}
.tick {{ fill:#8e8e9e; font-size:10px; text-anchor:end; }}
.none {{ fill:#8e8e9e; color:#8e8e9e; text-anchor:middle; }}
.legend {{ font-size:10px; line-height:14px; overflow:hidden; height:44px; }}
.legend span {{ margin-right:10px; white-space:nowrap; }}
.legend i {{ display:inline-block; width:10px; height:3px; margin-right:3px;
  vertical-align:middle; }}
.stats {{ display:flex; gap:18px; margin-top:24px; }}
.stat b {{ display:block; font-size:30px; color:#73bf69; }}
</style></head><body><header>{html.escape(dashboard['title'])}</header>
<div class="caption">{html.escape(caption)}</div>
<div class="board">{panels}</div>
</body></html>"""
