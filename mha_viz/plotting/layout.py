"""What the figures share: the unvalidated fast path, the template, token axes labelled without overlap
(`tick_plan`) and the square heatmap's layout and colour bar.
"""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch

# What plotly.py writes for template="none"; spelled out because the fast path skips plotly's own conversion.
NO_TEMPLATE = {"data": {"scatter": [{"type": "scatter"}]}}


FONT = dict(size=10)


def _as_np(matrix: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().numpy()
    return np.asarray(matrix, dtype=np.float32)


def _fast_figure(trace: dict, layout: dict) -> go.Figure:
    """Build without plotly's per-property validation: 25-45x faster for the same JSON (benchmarks/), and a
    layer view builds a dozen of these on every toggle. The dicts here are written against plotly's schema and
    tests read the figures back."""
    return go.Figure(data=[trace], layout=layout, _validate=False)


def _label_room(labels: list[str], font_size: int) -> int:
    """Pixels the rotated key labels need above a plot: the longest label at about 0.62 em per character."""
    longest = max((len(label.replace("\u200b", "")) for label in labels), default=1)
    return 8 + int(font_size * 0.62 * longest)


TICK_FONT_MIN = 8  # px: token labels are never smaller; a long text labels every k-th token instead


def tick_plan(labels: list[str], px_per_token: float, max_font: int = 10) -> tuple[dict, dict, list[str]]:
    """(tick font, tick settings, about the labels plotly will show) for a token axis of about `px_per_token` pixels a
    token: a font of TICK_FONT_MIN to `max_font` px, as large as lets every label show, and plotly's own choice of
    which to label. On a category axis plotly labels every k-th category, k from the axis's drawn length and 1.2x
    the font, from the first one: so labels never overlap, also where the chart is drawn narrower than planned (a
    narrow window's columns), and never shrink below the minimum. Forcing every label, as before, drew 122 of
    them at 6 px."""
    px = max(float(px_per_token), 1e-6)
    font = max(TICK_FONT_MIN, min(max_font, int(px / 1.2)))
    step = max(1, math.ceil(font * 1.2 / px))
    return dict(size=font), dict(tickmode="auto"), labels[::step]


_AXIS_TITLE_PX = 16  # the "key →" title above the key labels: its 10 px line and standoff


COLORBAR_PX = 56  # room under a square heatmap for its colour bar (a horizontal strip), its numbers and title


def _square_colorbar(title: str) -> dict:
    """The colour bar of a square heatmap: a strip under it, from its left edge, as wide as the plot area (the
    square's width: a narrow column makes the width the square's limit, and a figure of its own width is the
    square and its labels). Under, not beside: a bar beside it takes ~100 px of width, and in a narrow window's
    column (Inside a head at 1000x800: ~190 px) the square shrank to ~45 px to make room. (A bar of the planned
    width, in pixels, ran out of a narrow figure.)"""
    # The title under the numbers: plotly drew a horizontal bar's "top" title over the bar's top edge.
    return dict(title=dict(text=title, side="bottom"), thickness=10, orientation="h", lenmode="fraction", len=1.0,
                x=0, xanchor="left", xpad=0, y=0, yref="container", yanchor="bottom", ypad=4)


def _square_layout(title: str, size: int, labels: list[str], colorbar: bool = False) -> dict:
    """A square heatmap `size` px a side under its title, labelled as `tick_plan` says. With a colour bar (a strip
    under the square) it gets a width of its own, the plot and its query labels, shown with the chart's
    width="content": stretched over a wide column, a bar beside it stood ~330 px away at the column's edge."""
    tick_font, ticks, _ = tick_plan(labels, size / max(len(labels), 1))
    room = _label_room(labels, tick_font["size"])  # any of them may be the one plotly labels
    # The title sits above the axis title "key →", which sits above the rotated key labels.
    top = 26 + _AXIS_TITLE_PX + room
    bottom = 4 + (COLORBAR_PX if colorbar else 0)
    across = room + _AXIS_TITLE_PX + 8  # what the query labels, their title and the margins take of the width
    width = dict(width=size + across) if colorbar else {}
    return dict(
        template=NO_TEMPLATE, **width,
        # Drawn narrower than planned, the square shrinks with the width: `fit` says how the figure's height follows
        # its width (fixed_v + (width - fixed_h) * ratio, at most `height`), so a page can shrink it too and leave
        # no band of white under the square (app/common.fitted_chart).
        meta=dict(fit=dict(height=size + top + bottom, fixed_v=top + bottom, fixed_h=across, ratio=1.0)),
        title=dict(text=html.escape(title, quote=False), font=dict(size=12), x=0.5, xanchor="center",
                   y=1, yref="container", yanchor="top", pad=dict(t=6)),
        # The query labels' room is the left margin itself (automargin only grows it), so the width the square gets
        # is exactly the figure's less `across`, as `fit` assumes: left to automargin, the labels took ~9 px less
        # than planned, the plot area was wider than the square and the colour bar under it ran past its edge.
        height=size + top + bottom, margin=dict(l=across - 4, r=4, t=top, b=bottom),
        # Where the chart is drawn narrower than planned (a narrow window's columns) the square shrinks: it keeps to
        # the top left, under its title and labels, instead of floating in the middle of the figure's height.
        xaxis=dict(side="top", tickangle=-90, tickfont=tick_font, showgrid=False, automargin=True,
                   constrain="domain", constraintoward="left", title=dict(text="key →", font=dict(size=10),
                                                                          standoff=4), **ticks),
        yaxis=dict(autorange="reversed", tickfont=tick_font, showgrid=False, automargin=True,
                   scaleanchor="x", constrain="domain", constraintoward="top",
                   title=dict(text="query ↓", font=dict(size=10), standoff=4), **ticks),
        font=FONT,
    )


def _finite_or_nan(values) -> np.ndarray:
    z = _as_np(values)
    return np.where(np.isfinite(z), z, np.nan).astype(np.float32)
