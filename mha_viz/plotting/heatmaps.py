"""One head's attention as a heatmap, heads side by side in one figure, the difference of two patterns, a
pattern whose rows can be clicked, and per-token vectors (a head's queries, keys or values).
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import ATTN_SCALE, DIFF_SCALE, OFF_SCALE, sqrt_scale
from mha_viz.plotting.layout import (
    FONT,
    NO_TEMPLATE,
    _as_np,
    _fast_figure,
    _label_room,
    _square_colorbar,
    _square_layout,
    tick_plan,
)
from mha_viz.plotting.tokens import axis_labels


def head_figure(
    pattern: torch.Tensor,  # (Q, K)
    tokens: list[str],
    title: str,
    *,
    off: bool = False,
    zmax: float | None = None,
    size: int = 260,
    colorbar: bool = False,
    contrast: str = "linear",
    queries: list[str] | None = None,
) -> go.Figure:
    """One head's attention: queries on the y axis (top to bottom), keys on the x axis, hover = q, k, weight.
    contrast "sqrt" draws the colours as `sqrt_scale` says (the values, hover and colour bar stay the weights).
    `queries`: the rows' labels where they are another text's than the keys' `tokens` (cross-attention)."""
    if contrast not in ("linear", "sqrt"):
        raise ValueError(f"contrast is 'linear' or 'sqrt'; got {contrast!r}")
    z = _as_np(pattern)  # (Q, K)
    if z.ndim != 2:
        raise ValueError(f"head_figure wants one head's (query, key) pattern; got shape {z.shape}")
    labels = axis_labels(tokens)
    if len(labels) != z.shape[1]:
        raise ValueError(f"{len(labels)} tokens for a pattern with {z.shape[1]} keys")
    rows = labels if queries is None else axis_labels(queries)
    if len(rows) != z.shape[0]:
        raise ValueError(f"{len(rows)} query tokens for a pattern with {z.shape[0]} queries")
    top = float(zmax) if zmax else max(float(np.nanmax(z)) if z.size else 1.0, 1e-6)
    trace = dict(
        type="heatmap", z=z, x=labels, y=rows, zmin=0.0, zmax=top,
        colorscale=(sqrt_scale if contrast == "sqrt" else list)(OFF_SCALE if off else ATTN_SCALE),
        showscale=colorbar, colorbar=_square_colorbar("weight"),
        hovertemplate="query: %{y}<br>key: %{x}<br>weight: %{z:.3f}<extra></extra>",
    )
    return _fast_figure(trace, _square_layout(title + (" (off)" if off else ""), size, labels, colorbar=colorbar))


def heads_row_figure(
    patterns: torch.Tensor,  # (N, Q, K): the heads of one row of the layer grid
    tokens: list[str],
    titles: list[str],
    off: list[bool],
    *,
    zmax: float | None = None,
    columns: int | None = None,
    height: int = 300,
    colorbar: bool = False,
    contrast: str = "linear",
) -> go.Figure:
    """Several heads side by side in ONE figure (one subplot each), so a layer is a few plotly charts, not one
    per head: measured in headless Chromium, 12 heads draw in ~0.1 s as subplots vs ~0.9 s as 12 charts.
    Keys on each subplot's x axis (top), queries on the y axis (labelled on the first subplot of the row).
    `columns` (default N) fixes the subplot width, so a short last row lines up with the rows above it.
    `colorbar` draws one colour bar for the row: meaningful when `zmax` puts every head on one scale.
    `contrast` "sqrt" draws the colours as `sqrt_scale` says (weak weights stay visible beside a strong one).
    """
    if contrast not in ("linear", "sqrt"):
        raise ValueError(f"contrast is 'linear' or 'sqrt', not {contrast!r}")
    scales = {False: ATTN_SCALE, True: OFF_SCALE}
    if contrast == "sqrt":
        scales = {off_: sqrt_scale(scale) for off_, scale in scales.items()}
    z_all = _as_np(patterns)  # (N, Q, K)
    if z_all.ndim != 3:
        raise ValueError(f"heads_row_figure wants (heads, query, key); got shape {z_all.shape}")
    n = z_all.shape[0]
    if not (len(titles) == len(off) == n):
        raise ValueError(f"{n} patterns need {n} titles and {n} off flags; got {len(titles)} and {len(off)}")
    columns = max(columns or n, n)
    labels = axis_labels(tokens)
    tick_font, ticks, _ = tick_plan(labels, height / max(len(labels), 1), max_font=9)
    gap = 0.035
    width = (1 - gap * (columns - 1)) / columns
    label_room = _label_room(labels, tick_font["size"])  # any of them may be the one plotly labels
    # A title in parts ("L0 H0 · step 4000") is written one part a line: side by side in a narrow window's columns
    # (~110 px at 1000x800) one-line titles ran into each other.
    lines = max(len(t.split(" · ")) for t in titles) if titles else 1
    top_margin = 24 + 14 * (lines - 1) + label_room  # the rotated key labels stand above the plot, titles above
    data, layout = [], dict(template=NO_TEMPLATE, height=height + top_margin, font=FONT, showlegend=False,
                            margin=dict(l=8 + label_room, r=4, t=top_margin, b=4), annotations=[])
    for i in range(n):
        z = z_all[i]  # (Q, K)
        top = float(zmax) if zmax else max(float(np.nanmax(z)) if z.size else 1.0, 1e-6)
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        title = html.escape(titles[i] + (" (off)" if off[i] else ""), quote=False)
        data.append(dict(
            type="heatmap", z=z, x=labels, y=labels, zmin=0.0, zmax=top, xaxis=xa, yaxis=ya,
            colorscale=scales[bool(off[i])], name=title,
            showscale=colorbar and i == n - 1, colorbar=dict(title=dict(text="weight", side="right"), thickness=10),
            hovertemplate=f"{title}<br>query: %{{y}}<br>key: %{{x}}<br>weight: %{{z:.3f}}<extra></extra>",
        ))
        x0 = i * (width + gap)
        # No scaleanchor: a square constraint shrinks the plot inside its box and leaves a gap under the
        # titles; the caller sizes `height` to the column width instead.
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(
            domain=[x0, x0 + width], anchor=ya, side="top", tickangle=-90, tickfont=tick_font, showgrid=False,
            **ticks)
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(
            domain=[0, 1], anchor=xa, autorange="reversed", tickfont=tick_font, showgrid=False,
            showticklabels=i == 0, title=dict(text="query ↓" if i == 0 else "", font=dict(size=10)), **ticks)
        layout["annotations"].append(dict(
            text="<br>".join(f"<b>{part}</b>" for part in title.split(" · ")), x=x0 + width / 2, y=1,
            xref="paper", yref="paper", yanchor="bottom",
            yshift=label_room, showarrow=False, font=dict(size=12, color="#777" if off[i] else "#222")))
    return go.Figure(data=data, layout=layout, _validate=False)


def diff_figure(diff: torch.Tensor, tokens: list[str], title: str, size: int = 320,
                bound: float | None = None) -> go.Figure:
    """A signed difference of two patterns on a symmetric red-blue scale: ±`bound` (default its own largest
    change; pass one bound to several figures to put them on one scale)."""
    z = _as_np(diff)  # (Q, K)
    bound = max(float(bound) if bound else (float(np.nanmax(np.abs(z))) if z.size else 0.0), 1e-6)
    labels = axis_labels(tokens)
    trace = dict(
        type="heatmap", z=z, x=labels, y=labels, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE, zmid=0.0,
        hovertemplate="query: %{y}<br>key: %{x}<br>change: %{z:+.3f}<extra></extra>",
        colorbar=_square_colorbar("change"),
    )
    return _fast_figure(trace, _square_layout(title, size, labels, colorbar=True))


CLICKABLE_ROWS_UP_TO = 80  # one transparent click target per cell: 6,400 points at most


def pattern_pick_figure(pattern: torch.Tensor, tokens: list[str], title: str, query: int, *, off: bool = False,
                        size: int = 360, queries: list[str] | None = None) -> go.Figure:
    """One head's pattern (Q, K) with the query's row outlined. Plotly reports no clicks on heatmap cells, so for
    up to CLICKABLE_ROWS_UP_TO tokens a transparent scatter point sits on every cell, carrying its query row as
    customdata: a click on any cell picks that row. `queries`: as `head_figure`'s."""
    fig = head_figure(pattern, tokens, title, off=off, size=size, colorbar=True, queries=queries)
    labels, rows_shown = list(fig.data[0].x), list(fig.data[0].y)
    n, nq = len(labels), len(rows_shown)
    # On a category axis position i is the i-th category, so the row spans i - 0.5 .. i + 0.5.
    fig.layout.shapes = [dict(type="rect", xref="x", x0=-0.5, x1=n - 0.5, yref="y", y0=query - 0.5, y1=query + 0.5,
                              line=dict(color="#d62728", width=2), layer="above")]
    if max(n, nq) <= CLICKABLE_ROWS_UP_TO:
        # Plotly sends clicks only to points that take hover, so the scatter carries the hover and the heatmap none.
        z = _as_np(pattern)  # (Q, K)
        rows, keys = np.repeat(np.arange(nq), n), np.tile(np.arange(n), nq)  # (Q * K,) each
        fig.data[0].hoverinfo = "skip"
        fig.add_trace(dict(type="scatter", x=[labels[k] for k in keys], y=[rows_shown[q] for q in rows],
                           customdata=rows, text=[f"{w:.3f}" for w in z.reshape(-1)], mode="markers",
                           marker=dict(size=max(4, int(size / max(n, 1))), color="rgba(0,0,0,0)", symbol="square"),
                           hovertemplate="query: %{y}<br>key: %{x}<br>weight: %{text}<br>"
                                         "click to open this row<extra></extra>", showlegend=False))
        # The click targets' markers would pad the axes' automatic ranges: the cells fill the plot, as without them.
        fig.layout.xaxis.range = [-0.5, n - 0.5]
        fig.layout.yaxis.autorange = False
        fig.layout.yaxis.range = [nq - 0.5, -0.5]
    return fig


def vectors_figure(vectors: torch.Tensor, tokens: list[str], title: str, *, row: int | None = None,
                   height: int = 360) -> go.Figure:
    """One vector per token as a row, (T, dh), on a symmetric red-blue scale: a head's queries, keys or values.
    `row` (e.g. the query token) is outlined."""
    z = _as_np(vectors)  # (T, dh)
    labels = axis_labels(tokens)
    if z.ndim != 2 or z.shape[0] != len(labels):
        raise ValueError(f"vectors must be ({len(labels)}, dh), one row per token; got {z.shape}")
    bound = max(float(np.nanmax(np.abs(z))) if z.size else 0.0, 1e-6)
    trace = dict(type="heatmap", z=z, y=labels, zmin=-bound, zmax=bound, zmid=0.0, colorscale=DIFF_SCALE,
                 showscale=False, hovertemplate="%{y}<br>dim %{x}: %{z:+.3f}<extra></extra>")
    shapes = [] if row is None else [dict(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=row - 0.5,
                                          y1=row + 0.5, line=dict(color="#222", width=2))]
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  height=height, font=FONT, margin=dict(l=70, r=6, t=34, b=24), shapes=shapes,
                  yaxis=dict(autorange="reversed", tickfont=dict(size=max(6, min(9, int(500 / max(len(labels), 1)))))),
                  xaxis=dict(title="dimension"))
    return _fast_figure(trace, layout)
