"""Line charts drawn on the server as inline SVG: no chart script to ship or load, and a page that
shows a chart works with scripts off."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from markupsafe import Markup, escape

from spark_mq.dashboard.sampler import Point

WIDTH, HEIGHT, PAD = 640, 180, 36
COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1")


def line_chart(series: Sequence[tuple[str, Sequence[Point]]], unit: str = "") -> Markup:
    """An SVG chart of named series over time (a shared axis from the first to the last point)."""
    points = [p for _, s in series for p in s]
    if len(points) < 2:
        return Markup('<p class="muted chart-empty">Not enough samples yet: the chart fills in as the console '
                      'samples the cluster.</p>')
    t0, t1 = min(p.t for p in points), max(p.t for p in points)
    top = max(max(p.value for p in points), 1.0)
    span = (t1 - t0) or 1.0  # one instant only: drawn at the left

    def xy(p: Point) -> str:
        x = PAD + (p.t - t0) / span * (WIDTH - 2 * PAD)
        y = HEIGHT - PAD / 2 - p.value / top * (HEIGHT - PAD)
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="2" y="12" class="axis">{top:,.1f} {escape(unit)}</text>',
             f'<text x="2" y="{HEIGHT - 4}" class="axis">{datetime.fromtimestamp(t0):%H:%M}</text>',
             f'<text x="{WIDTH - 40}" y="{HEIGHT - 4}" class="axis">{datetime.fromtimestamp(t1):%H:%M}</text>']
    for (name, s), colour in zip(series, COLOURS * (len(series) // len(COLOURS) + 1), strict=False):
        if s:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{" ".join(xy(p) for p in s)}"><title>{escape(name)}</title></polyline>')
    parts.append("</svg>")
    legend = " ".join(f'<span class="legend" style="color:{c}">&#9632; {escape(n)}</span>'
                      for (n, _), c in zip(series, COLOURS * (len(series) // len(COLOURS) + 1), strict=False))
    return Markup("".join(parts) + f"<div>{legend}</div>")
