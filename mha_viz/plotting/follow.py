"""Follow a token: where one query's attention goes in many heads, drawn on the sentence itself."""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import OFF_COLOUR, head_colour
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np, _fast_figure
from mha_viz.plotting.tokens import axis_labels, safe_label

# The narrowest plot area Follow a token gets: the main column of a 1000 px wide window less the figure's margins
# (measured: 18 cells of 24 px). A character of its cell font is about 0.46 of the font size wide.
FOLLOW_PLOT_PX = 430


_CHAR_EM = 0.46


def cell_words(tokens: list[str], plot_px: float = FOLLOW_PLOT_PX) -> tuple[list[str] | None, int]:
    """(the words written in Follow a token's cells, their font size), so that no word runs into the next cell
    (at 1000 px "cabinet" ran over "were"): at 10 px if every token fits its cell, else at 9 px with a word that
    still does not fit cut to the cell with "…" (hover names the whole token); None when a cell holds fewer than
    three characters even so, and the tokens go to the axis instead."""
    labels = [safe_label(t) for t in tokens]
    cell = plot_px / max(len(tokens), 1) - 2  # the cells' gap
    longest = max((len(html.unescape(lab)) for lab in labels), default=1)
    if longest <= cell / (_CHAR_EM * 10):
        return labels, 10
    room = int(cell / (_CHAR_EM * 9))
    if room < 3:
        return None, 10

    def cut(label: str) -> str:
        text = html.unescape(label)
        return label if len(text) <= room else html.escape(text[:room - 1], quote=False) + "…"

    return [cut(lab) for lab in labels], 9


def follow_figure(tokens: list[str], rows: torch.Tensor, row_names: list[str], row_heads: list[int],
                  off: list[bool], query: int, title: str, *, shared_scale: bool = False) -> go.Figure:
    """Where one token's attention goes in many heads, on the sentence itself: one row per head, the tokens as
    cells, each cell shaded in its head's colour by the weight. rows (R, K): the query's row of each head's
    pattern; row_heads: the head index that picks each row's colour.

    ONE heatmap trace (not one per head, which would be R traces): row r's values are mapped into its own band
    [r, r + 1) of the z range, and the colour scale runs white -> head colour inside every band.
    """
    w = _as_np(rows)  # (R, K)
    if w.ndim != 2 or w.shape[0] != len(row_names) or w.shape[1] != len(tokens):
        raise ValueError(f"rows must be ({len(row_names)}, {len(tokens)}); got {w.shape}")
    n_rows, n_keys = w.shape
    top = np.ones((n_rows, 1), np.float32) if shared_scale else np.maximum(w.max(axis=1, keepdims=True), 1e-6)
    shade = np.clip(w / top, 0.0, 0.999)  # (R, K) in [0, 1)
    band = np.arange(n_rows, dtype=np.float32)[:, None]  # (R, 1)
    z = (band + shade) / n_rows  # (R, K): row r in [r / R, (r + 1) / R)
    scale = []
    for r in range(n_rows):
        colour = OFF_COLOUR if off[r] else head_colour(row_heads[r])
        scale += [[r / n_rows, "#ffffff"], [(r + 0.999) / n_rows, colour]]
    scale[-1][0] = 1.0
    names = [html.escape(n, quote=False) + (" (off)" if o else "") for n, o in zip(row_names, off)]
    # The sentence is written in the cells only while it fits; past that the cells are too narrow for words, and
    # a (rows x tokens) array of strings (270 x 512 for SmolLM2) would only weigh down the page. Hover names the key.
    words, font = cell_words(tokens)
    written = words is not None
    trace = dict(type="heatmap", z=z, zmin=0.0, zmax=1.0, colorscale=scale, showscale=False, x=axis_labels(tokens),
                 y=names, customdata=w, textfont=dict(size=font), xgap=2 if written else 0, ygap=3,
                 hovertemplate="%{y}<br>key: %{x}<br>weight: %{customdata:.3f}<extra></extra>")
    if written:
        trace.update(text=np.array([words] * n_rows), texttemplate="%{text}")
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                  height=min(4000, 70 + 24 * n_rows), font=FONT, margin=dict(l=90, r=10, t=40, b=10),
                  xaxis=dict(showticklabels=not written, side="top", tickangle=-90, showgrid=False, zeroline=False),
                  yaxis=dict(autorange="reversed", showgrid=False, tickfont=dict(size=10)),
                  shapes=[dict(type="rect", xref="x", yref="paper", x0=query - 0.5, x1=query + 0.5, y0=0, y1=1,
                               line=dict(color="#222", width=2))])
    return _fast_figure(trace, layout)
