"""Circuits read from the weights (analysis/circuits/): composition maps between heads, one head's QK and OV
maps, the tokens an OV row raises, singular values, and a causal check of a score with one head off.
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.names import head_name
from mha_viz.plotting.colours import COMPOSITION_SCALE, DIFF_SCALE
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np, _fast_figure, tick_plan
from mha_viz.plotting.tokens import safe_label

COMPOSITION_TITLES = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}


def composition_map_figure(scores: torch.Tensor, baseline: float, title: str, *, marked=None,
                           height: int = 520) -> go.Figure:
    """Composition scores (L, H, L, H) as one map: a row per later head, a column per earlier head, blank where
    the earlier layer is not earlier. White at or below `baseline` (the random matrices' mean score), dark red
    at the largest score, so a cell is coloured only as far as it exceeds what unrelated maps would score.
    `marked` ((l1, h1), (l2, h2)) outlines one pair."""
    z = _as_np(scores)  # (L, H, L, H)
    n_layers, n_heads = z.shape[:2]
    n = n_layers * n_heads
    grid = z.reshape(n, n).T  # (N later, N earlier)
    labels = [head_name((layer, head)) for layer in range(n_layers) for head in range(n_heads)]
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else baseline + 1e-6
    ratio = grid / baseline  # (N, N)
    trace = dict(type="heatmap", z=grid, x=labels, y=labels, customdata=ratio, zmin=baseline,
                 zmax=max(top, baseline + 1e-6), colorscale=COMPOSITION_SCALE, hoverongaps=False,
                 colorbar=dict(title=dict(text="score"), tickformat=".2f"),
                 hovertemplate="from %{x} into %{y}<br>score %{z:.3f} (%{customdata:.2f} x random)<extra></extra>")
    shapes = []
    if marked is not None:
        (l1, h1), (l2, h2) = marked
        x, y = l1 * n_heads + h1, l2 * n_heads + h2
        shapes.append(dict(type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5,
                           line=dict(color="#222", width=2)))
    small = max(5, min(10, int(600 / max(n, 1))))
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT, shapes=shapes,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=60, r=10, t=40, b=60),
                  xaxis=dict(title=dict(text="earlier head (writes)"), tickfont=dict(size=small),
                             showticklabels=n <= 72),
                  yaxis=dict(title=dict(text="later head (reads)"), autorange="reversed", tickfont=dict(size=small),
                             showticklabels=n <= 72))
    return _fast_figure(trace, layout)


def difference_map_figure(a: torch.Tensor, b: torch.Tensor, title: str, *, height: int = 520) -> go.Figure:
    """b - a of two composition score tensors (L, H, L, H), on a scale symmetric about 0: red where b is higher."""
    d = _as_np(b) - _as_np(a)  # (L, H, L, H)
    n_layers, n_heads = d.shape[:2]
    n = n_layers * n_heads
    grid = d.reshape(n, n).T  # (N later, N earlier)
    labels = [head_name((layer, head)) for layer in range(n_layers) for head in range(n_heads)]
    bound = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    trace = dict(type="heatmap", z=grid, x=labels, y=labels, zmid=0.0, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE,
                 hoverongaps=False, colorbar=dict(title=dict(text="change")),
                 hovertemplate="from %{x} into %{y}<br>change %{z:+.3f}<extra></extra>")
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=60, r=10, t=40, b=60), xaxis=dict(title=dict(text="earlier head (writes)")),
                  yaxis=dict(title=dict(text="later head (reads)"), autorange="reversed"))
    return _fast_figure(trace, layout)


def weight_map_figure(values: torch.Tensor, row_labels: list[str], col_labels: list[str], title: str, *,
                      x_title: str, y_title: str, height: int = 560, name: str = "",
                      saturate: float | None = None) -> go.Figure:
    """One head's QK or OV map (token x token, or position x position), blue below 0 and red above on a scale
    symmetric about 0; NaN cells (keys a causal query cannot see) blank. `saturate` (a quantile, e.g. 0.99) puts
    the ends of the scale at that quantile of |value| instead of the largest, so a few extreme rows or columns do
    not wash the rest out; `layout.meta` then says {"bound", "largest"} for the page to state. Token labels are
    thinned as `tick_plan` does (never under TICK_FONT_MIN px)."""
    z = _as_np(values)  # (R, C)
    finite = np.abs(z[np.isfinite(z)])
    largest = float(finite.max()) if finite.size else 1.0
    bound = largest
    if saturate is not None and finite.size:
        bound = min(largest, max(float(np.quantile(finite, saturate)), 1e-6))
    rows, cols = [safe_label(t) for t in row_labels], [safe_label(t) for t in col_labels]
    trace = dict(type="heatmap", z=z, x=cols, y=rows,
                 zmid=0.0, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE, hoverongaps=False, name=name,
                 colorbar=dict(title=dict(text="value")),
                 hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>%{{z:+.3f}}<extra></extra>")
    px = (height - 110) / max(len(rows), 1)  # the plot's height (margins and title off) per row
    y_font, y_ticks, _ = tick_plan(rows, px, max_font=9)
    x_font, x_ticks, _ = tick_plan(cols, px, max_font=9)
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=70, r=10, t=40, b=70), meta=dict(bound=bound, largest=largest),
                  xaxis=dict(title=dict(text=x_title), tickfont=x_font, **x_ticks),
                  yaxis=dict(title=dict(text=y_title), autorange="reversed", tickfont=y_font, **y_ticks))
    return _fast_figure(trace, layout)


def top_tokens_figure(values: torch.Tensor, labels: list[str], title: str, *, height: int = 360,
                      x_title: str = "logit change per unit of attention") -> go.Figure:
    """The tokens one row of an OV map raises most, as horizontal bars, largest on top."""
    v = _as_np(values)  # (k,)
    trace = dict(type="bar", orientation="h", x=v, y=[safe_label(t) for t in labels], marker=dict(color="#b2182b"),
                 hovertemplate="%{y}: %{x:+.3f}<extra></extra>")
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=90, r=10, t=40, b=30), yaxis=dict(autorange="reversed", type="category"),
                  xaxis=dict(title=dict(text=x_title)))
    return _fast_figure(trace, layout)


def singular_values_figure(qk: torch.Tensor, ov: torch.Tensor, qk_rank: float, ov_rank: float, title: str, *,
                           height: int = 300) -> go.Figure:
    """The singular values of one head's QK and OV maps (dh each, descending), each scaled by its largest, with
    their effective ranks in the legend."""
    data = []
    for name, s, rank, colour in (("QK", qk, qk_rank, "#2166ac"), ("OV", ov, ov_rank, "#b2182b")):
        v = _as_np(s)  # (dh,)
        data.append(dict(type="scatter", mode="lines+markers", x=np.arange(1, len(v) + 1), y=v / max(v[0], 1e-30),
                         name=f"{name} (effective rank {rank:.1f} of {len(v)})", line=dict(color=colour),
                         hovertemplate=f"{name} #%{{x}}: %{{y:.3f}} of the largest<extra></extra>"))
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=50, r=10, t=40, b=40), legend=dict(orientation="h", y=-0.25),
                  xaxis=dict(title=dict(text="singular value #")), yaxis=dict(range=[0, 1.05], title="of the largest"))
    return go.Figure(data=data, layout=layout, _validate=False)


def causal_check_figure(on: torch.Tensor, off: torch.Tensor, title: str, switched_off: str, *,
                        height: int = 320) -> go.Figure:
    """Every head's score with all heads on and with one head switched off, as paired bars (L*H heads)."""
    a, b = _as_np(on).reshape(-1), _as_np(off).reshape(-1)  # (N,)
    n_layers, n_heads = _as_np(on).shape
    labels = [head_name((layer, head)) for layer in range(n_layers) for head in range(n_heads)]
    data = [dict(type="bar", x=labels, y=a, name="all heads on", marker=dict(color="#4292c6"),
                 hovertemplate="%{x}: %{y:.1%}<extra>all on</extra>"),
            dict(type="bar", x=labels, y=b, name=f"{switched_off} off", marker=dict(color="#ef8a62"),
                 hovertemplate="%{x}: %{y:.1%}<extra>" + html.escape(switched_off) + " off</extra>")]
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT, barmode="group",
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=50, r=10, t=40, b=60), legend=dict(orientation="h", y=1.12),
                  yaxis=dict(tickformat=".0%", range=[0, 1.02]), xaxis=dict(type="category"))
    return go.Figure(data=data, layout=layout, _validate=False)
