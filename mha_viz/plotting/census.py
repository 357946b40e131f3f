"""The head census (the Census view): one score as a layers x heads map, two scores as a scatter of every head,
and one score of several models side by side.
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.names import column_name, column_names, head_name, layer_name
from mha_viz.plotting.layout import FONT, NO_TEMPLATE


def census_map(scores: torch.Tensor, title: str, uniform: float, baseline_text: str = "",
               zmax: float | None = None, reverse: bool = False) -> go.Figure:
    """One census score as a layers x heads map (rows L0 at the top), its baselines in the colour bar's title.

    scores: (L, H); uniform: what uniform attention scores there; baseline_text: e.g. "best offset -1: 0.51";
    reverse: for scores whose low values are notable (distance, entropy). An invisible scatter over the cells
    carries (layer, head) as customdata, since plotly reports no clicks on heatmap cells."""
    z = np.asarray(scores.detach().float(), dtype=np.float32)  # (L, H)
    n_layers, n_heads = z.shape
    finite = z[np.isfinite(z)]
    top = zmax if zmax is not None else max(1.0, float(finite.max()) if finite.size else 1.0)
    legend = f"uniform {uniform:.2f}" + (f"<br>{baseline_text}" if baseline_text else "")
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")  # (L, H) each
    data = [
        dict(type="heatmap", z=z, x=column_names(n_heads), y=[layer_name(l) for l in range(n_layers)],
             zmin=0.0, zmax=top, colorscale="Viridis", reversescale=reverse,
             colorbar=dict(title=dict(text=legend, side="right"), thickness=12),
             hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>"),
        dict(type="scatter", mode="markers", x=[column_name(h) for h in heads.ravel()],
             y=[layer_name(l) for l in layers.ravel()], customdata=np.stack([layers.ravel(), heads.ravel()], 1),
             marker=dict(size=max(4, min(18, 600 // max(n_heads, n_layers))), opacity=0.0), hoverinfo="skip",
             showlegend=False),
    ]
    layout = dict(template=NO_TEMPLATE, font=FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  height=min(900, 120 + 22 * n_layers), margin=dict(l=40, r=10, t=36, b=30),
                  yaxis=dict(autorange="reversed", type="category"), xaxis=dict(type="category", side="bottom"),
                  clickmode="event+select")
    return go.Figure(data=data, layout=layout, _validate=False)


def census_scatter(x: torch.Tensor, y: torch.Tensor, x_title: str, y_title: str,
                   x_base: float | None = None, y_base: float | None = None) -> go.Figure:
    """Every head as a point at (score x, score y), coloured by layer, with each score's baseline as a dotted line:
    the continuum between patterns (few heads are "pure"). customdata is (layer, head) for clicks."""
    xs = np.asarray(x.detach().float(), dtype=np.float32)  # (L, H)
    ys = np.asarray(y.detach().float(), dtype=np.float32)  # (L, H)
    n_layers, n_heads = xs.shape
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")  # (L, H) each
    names = [head_name((l, h)) for l, h in zip(layers.ravel(), heads.ravel())]
    data = [dict(type="scatter", mode="markers", x=xs.ravel(), y=ys.ravel(), text=names,
                 customdata=np.stack([layers.ravel(), heads.ravel()], 1),
                 marker=dict(color=layers.ravel(), colorscale="Plasma", size=9, line=dict(width=0.5, color="#333"),
                             colorbar=dict(title=dict(text="layer"), thickness=10)),
                 hovertemplate="%{text}<br>" + html.escape(x_title) + " %{x:.3f}<br>" + html.escape(y_title)
                               + " %{y:.3f}<extra></extra>", showlegend=False)]
    shapes = []
    if x_base is not None and np.isfinite(x_base):
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x_base, x1=x_base, y0=0, y1=1,
                           line=dict(color="#999", dash="dot", width=1)))
    if y_base is not None and np.isfinite(y_base):
        shapes.append(dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=y_base, y1=y_base,
                           line=dict(color="#999", dash="dot", width=1)))
    layout = dict(template=NO_TEMPLATE, font=FONT, height=420, margin=dict(l=50, r=10, t=20, b=40), shapes=shapes,
                  xaxis=dict(title=dict(text=html.escape(x_title)), zeroline=False, showgrid=True, gridcolor="#eee"),
                  yaxis=dict(title=dict(text=html.escape(y_title)), zeroline=False, showgrid=True, gridcolor="#eee"),
                  clickmode="event+select")
    return go.Figure(data=data, layout=layout, _validate=False)


def census_maps_side_by_side(maps: list[torch.Tensor], titles: list[str], zmax: float = 1.0) -> go.Figure:
    """The same census score of several models of one architecture (e.g. training seeds) as maps side by side on
    one colour scale: one figure, one heatmap per panel. maps: each (L, H)."""
    n = len(maps)
    gap = 0.04
    w = (1 - gap * (n - 1)) / n
    data, layout = [], dict(template=NO_TEMPLATE, font=FONT, height=60 + 26 * maps[0].shape[0] + 40,
                            margin=dict(l=40, r=10, t=30, b=30), annotations=[])
    for i, (m, title) in enumerate(zip(maps, titles)):
        z = np.asarray(m.detach().float(), dtype=np.float32)  # (L, H)
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        x0 = i * (w + gap)
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(domain=[x0, x0 + w], anchor=ya, type="category")
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(anchor=xa, autorange="reversed", type="category",
                                                               showticklabels=i == 0)
        data.append(dict(type="heatmap", z=z, x=column_names(z.shape[1]),
                         y=[layer_name(l) for l in range(z.shape[0])], zmin=0.0, zmax=zmax, colorscale="Viridis",
                         showscale=i == n - 1, xaxis=xa, yaxis=ya,
                         hovertemplate=html.escape(title, quote=False) + " %{y} %{x}: %{z:.2f}<extra></extra>"))
        layout["annotations"].append(dict(text=f"<b>{html.escape(title, quote=False)}</b>", x=x0 + w / 2, y=1.0,
                                          xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                                          showarrow=False, font=dict(size=11)))
    return go.Figure(data=data, layout=layout, _validate=False)
