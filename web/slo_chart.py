"""The burn-rate history of one SLO group as a plain SVG, drawn on the server (no script, no inline style:
the CSP allows neither; colours come from classes in style.css)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from markupsafe import Markup, escape

_W, _H, _PAD = 720, 180, 34


def burn_chart(points: Sequence[tuple[int, float]], thresholds: Sequence[float] = (1.0, 6.0, 14.4)) -> Markup:
    """Hourly burn rates as a polyline with the policy's thresholds as dashed lines; empty when no points."""
    if not points:
        return Markup('<p class="muted" id="burn-chart-empty">No requests counted in the window yet.</p>')
    first, last = points[0][0], max(points[-1][0], points[0][0] + 3600)
    top = max(max(rate for _, rate in points), 1.0) * 1.1

    def x(t: int) -> float:
        return _PAD + (t - first) / (last - first) * (_W - 2 * _PAD)

    def y(rate: float) -> float:
        return _H - _PAD + -rate / top * (_H - 2 * _PAD)

    parts = [f'<svg id="burn-chart" class="burn-chart" viewBox="0 0 {_W} {_H}" role="img" '
             f'aria-label="burn rate per hour over the window" xmlns="http://www.w3.org/2000/svg">',
             f'<line class="axis" x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}"/>']
    for limit in thresholds:
        if limit <= top:
            parts.append(f'<line class="threshold" x1="{_PAD}" y1="{y(limit):.1f}" x2="{_W - _PAD}" '
                         f'y2="{y(limit):.1f}"/><text class="label" x="{_W - _PAD + 2}" y="{y(limit) + 4:.1f}">'
                         f'{limit:g}×</text>')
    line = " ".join(f"{x(t):.1f},{y(rate):.1f}" for t, rate in points)
    parts.append(f'<polyline class="burn" points="{line}"/>')
    for t, rate in points:
        parts.append(f'<circle class="point" cx="{x(t):.1f}" cy="{y(rate):.1f}" r="2.5">'
                     f'<title>{escape(_hour(t))}: {rate:.3g}×</title></circle>')
    parts.append(f'<text class="label" x="{_PAD}" y="{_H - 8}">{escape(_hour(first))}</text>'
                 f'<text class="label end" x="{_W - _PAD}" y="{_H - 8}">{escape(_hour(last))}</text>'
                 f'<text class="label" x="2" y="{_PAD - 8}">{top:.3g}×</text></svg>')
    return Markup("".join(parts))


def _hour(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:00Z")
