"""Every plot of the benches, with matplotlib on the Agg backend (no display).

- ``pyplot()`` and ``save_figure(fig, path, dpi)``: for a bench's own figure
  (the micro and load benches draw bars and lines of their own);
- ``timeseries``: panels stacked one above the other on a shared time axis,
  each with its own y scale from 0, one line and one legend entry per series
  (a NaN breaks the line: a server that is not running), vertical markers (an
  event, such as a restart) and shaded spans (a warm-up) across every panel.
  The streams bench and the soak draw theirs with it.

Writes only the file it is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Panel", "Series", "pyplot", "save_figure", "timeseries"]

# Colour-blind-safe (Okabe-Ito), in order of use.
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y), x ascending; a NaN y breaks the line


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    series: Sequence[Series]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported when a plot is first
    drawn: the measuring processes import the reports, and must not carry it."""
    import matplotlib  # noqa: PLC0415 (see the docstring)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def _note(ax: Any, x: float, text: str, dx: float, align: str) -> None:
    """``text`` at the top of the panel, beside ``x``."""
    ax.annotate(
        text,
        (x, 1),
        xycoords=("data", "axes fraction"),
        xytext=(dx, -12),
        textcoords="offset points",
        ha=align,
        color="#666666",
        fontsize=8,
    )


def timeseries(
    panels: Sequence[Panel],
    path: Path,
    *,
    title: str,
    x_label: str,
    markers: Sequence[tuple[float, str]] = (),
    shades: Sequence[tuple[float, float, str]] = (),
    dpi: int = 100,
) -> None:
    """``panels`` over a shared x axis from 0, as a PNG at ``path``;
    ``markers`` are ``(x, label)``, ``shades`` ``(x0, x1, label)``."""
    plt = pyplot()
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 0.6 + 2.4 * len(panels)), sharex=True, squeeze=False
    )
    for i, (ax, panel) in enumerate(zip(axes[:, 0], panels, strict=True)):
        ax.set_prop_cycle(color=_COLOURS)
        for x0, x1, label in shades:
            ax.axvspan(x0, x1, color="#eeeeee", zorder=0)
            if i == 0:
                _note(ax, x0, label, 3, "left")
        for x, label in markers:
            ax.axvline(x, color="#999999", linestyle="--", linewidth=1)
            if i == 0:
                _note(ax, x, label, -3, "right")
        for s in panel.series:
            xs = [x for x, _ in s.points]
            ys = [y for _, y in s.points]
            # A marker too, so that a lone point between gaps still shows.
            ax.plot(xs, ys, label=s.name, linewidth=1.4, marker="o", markersize=1.8)
        ax.set_title(panel.title, loc="left", fontsize=9, fontweight="bold")
        top = max((y for s in panel.series for _, y in s.points if math.isfinite(y)), default=0)
        ax.set_ylim(0, top * 1.1 if top > 0 else 1)
        ax.grid(alpha=0.3)
        if panel.series:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].set_xlabel(x_label)
    fig.suptitle(title, fontsize=11, fontweight="bold")
    fig.tight_layout()
    save_figure(fig, path, dpi)
