"""Line charts as one self-contained SVG document, no plotting library.

Owns ``render``: panels stacked one above the other on a shared time axis,
each with its own y scale (from 0, "nice" ticks), one polyline and one legend
entry per series, vertical markers (an event, e.g. a restart) and shaded
spans (e.g. a warm-up) across every panel. Text stays text, so the file is
small and diffs in review. Pure: returns a string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

__all__ = ["Panel", "Series", "nice_ticks", "render"]

# Colour-blind-safe (Okabe-Ito), in order of use.
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_LEFT, _RIGHT, _TOP, _GAP, _BOTTOM = 64, 170, 40, 46, 40


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y), x ascending; a NaN y breaks the line


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    series: Sequence[Series]


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Ticks from 0 to at least ``top``, about ``count`` of them, at 1, 2 or 5 x 10^k."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _runs(points: Sequence[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """The stretches of ``points`` between NaN values."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if math.isnan(y):
            runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]


def _label(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.1f}"


def _text(x: float, y: float, s: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(s)}</text>'


def render(
    panels: Sequence[Panel],
    *,
    title: str,
    x_label: str,
    markers: Sequence[tuple[float, str]] = (),
    shades: Sequence[tuple[float, float, str]] = (),
    width: int = 900,
    panel_height: int = 200,
) -> str:
    """The SVG document: ``panels`` over a shared x axis from 0 to the largest x;
    ``markers`` are ``(x, label)``, ``shades`` ``(x0, x1, label)``."""
    xs = [x for p in panels for s in p.series for x, _ in s.points]
    x_ticks = nice_ticks(max(xs, default=1.0), 8)
    x_max = x_ticks[-1]
    plot_w = width - _LEFT - _RIGHT
    height = _TOP + len(panels) * (panel_height + _GAP) + _BOTTOM - _GAP

    def sx(x: float) -> float:
        return _LEFT + plot_w * x / x_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        _text(width / 2, 20, title, "middle", ' font-size="14" font-weight="bold"'),
    ]
    for i, panel in enumerate(panels):
        top = _TOP + i * (panel_height + _GAP)
        bottom = top + panel_height
        ys = [y for s in panel.series for _, y in s.points if not math.isnan(y)]
        y_ticks = nice_ticks(max(ys, default=1.0))
        y_max = y_ticks[-1]

        def sy(y: float, bottom: float = bottom, y_max: float = y_max) -> float:
            return bottom - panel_height * y / y_max

        out.append(_text(_LEFT, top - 6, panel.title, extra=' font-weight="bold"'))
        for x0, x1, label in shades:
            out.append(
                f'<rect x="{sx(x0):.1f}" y="{top}" width="{max(0.0, sx(x1) - sx(x0)):.1f}" '
                f'height="{panel_height}" fill="#eeeeee"/>'
            )
            if i == 0:
                out.append(_text(sx(x0) + 3, top + 12, label, extra=' fill="#666666"'))
        for y in y_ticks:
            out.append(
                f'<line x1="{_LEFT}" y1="{sy(y):.1f}" x2="{_LEFT + plot_w}" y2="{sy(y):.1f}" '
                'stroke="#dddddd"/>'
            )
            out.append(_text(_LEFT - 6, sy(y) + 4, _label(y), "end"))
        for x in x_ticks:
            out.append(
                f'<line x1="{sx(x):.1f}" y1="{bottom}" x2="{sx(x):.1f}" y2="{bottom + 4}" '
                'stroke="#444444"/>'
            )
            out.append(_text(sx(x), bottom + 16, _label(x), "middle"))
        out.append(
            f'<rect x="{_LEFT}" y="{top}" width="{plot_w}" height="{panel_height}" '
            'fill="none" stroke="#444444"/>'
        )
        for x, label in markers:
            out.append(
                f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{bottom}" '
                'stroke="#999999" stroke-dasharray="4 3"/>'
            )
            if i == 0:
                out.append(_text(sx(x) - 3, top + 12, label, "end", ' fill="#666666"'))
        for j, s in enumerate(panel.series):
            colour = _COLOURS[j % len(_COLOURS)]
            for run in _runs(s.points):
                if len(run) == 1:
                    x, y = run[0]
                    out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="{colour}"/>')
                    continue
                points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in run)
                out.append(
                    f'<polyline points="{points}" fill="none" stroke="{colour}" '
                    'stroke-width="1.5"/>'
                )
            ly = top + 14 + 16 * j
            lx = _LEFT + plot_w + 12
            out.append(
                f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
            out.append(_text(lx + 24, ly, s.name))
    last = _TOP + len(panels) * (panel_height + _GAP) - _GAP
    out.append(_text(_LEFT + plot_w / 2, last + 34, x_label, "middle"))
    out.append("</svg>")
    return "\n".join(out) + "\n"
