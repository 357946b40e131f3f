"""One number per head as a layers x heads map (importance, patching effects), and the next-token predictions
before and after an intervention.
"""
from __future__ import annotations

import html

import plotly.graph_objects as go
import torch

from mha_viz.names import column_names, layer_name
from mha_viz.plotting.layout import FONT, _as_np
from mha_viz.plotting.tokens import safe_label


def layer_head_map(values: torch.Tensor, title: str, colorbar_title: str, *, off=frozenset(), fmt: str = ".3f",
                   colorscale: str = "Reds", zmax: float | None = None) -> go.Figure:
    """A layers x heads map of one number per head (importance, pattern shift), ablated heads outlined. `zmax`
    fixes the top of the colour scale (from 0); default: plotly's range over the values."""
    z = _as_np(values)  # (L, H)
    n_layers, n_heads = z.shape
    fig = go.Figure(
        go.Heatmap(
            z=z, x=column_names(n_heads), y=[layer_name(layer) for layer in range(n_layers)],
            colorscale=colorscale, colorbar=dict(title=dict(text=colorbar_title)),
            **({"zmin": 0.0, "zmax": float(zmax)} if zmax else {}),
            hovertemplate="%{y} %{x}<br>" + colorbar_title + ": %{z:" + fmt + "}<extra></extra>",
        )
    )
    for layer, head in off:
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="black", width=2))
    fig.update_layout(
        template="none", title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
        height=int(min(1400, 120 + 22 * n_layers)), margin=dict(l=50, r=10, t=40, b=30),
        yaxis=dict(autorange="reversed"), font=FONT,
    )
    return fig


def predictions_figure(before: list[tuple[str, float]], after: list[tuple[str, float]], title: str,
                       changed: str = "with heads off") -> go.Figure:
    """Top-k next tokens before and after an intervention (`changed` names it) as grouped horizontal bars."""
    words = []
    for w, _ in before + after:
        if w not in words:
            words.append(w)
    b = dict(before)
    a = dict(after)
    labels = [safe_label(w) for w in words]  # a leading space is part of the token: ␣
    fig = go.Figure()
    fig.add_trace(go.Bar(y=labels, x=[b.get(w, 0.0) for w in words], name="all heads on", orientation="h",
                         marker_color="#4c72b0"))
    fig.add_trace(go.Bar(y=labels, x=[a.get(w, 0.0) for w in words], name=changed, orientation="h",
                         marker_color="#c44e52"))
    fig.update_layout(template="none", barmode="group",
                      title=dict(text=html.escape(title, quote=False), font=dict(size=13), y=1, yref="container",
                                 yanchor="top", pad=dict(t=10)),
                      height=140 + 28 * len(words), margin=dict(l=90, r=10, t=62, b=40),
                      yaxis=dict(autorange="reversed"), xaxis=dict(title="probability", range=[0, 1]), font=FONT,
                      # Above the bars, under the title: below them a narrow chart's legend sat on the axis title.
                      legend=dict(orientation="h", x=0, xanchor="left", y=1, yanchor="bottom"))
    return fig


def signed_layer_head_map(values: torch.Tensor, title: str, colorbar_title: str, *, fmt: str = ".3f",
                          marked=frozenset()) -> go.Figure:
    """`layer_head_map` for numbers with a sign (patching effects, direct effects): blue below 0, red above,
    white at 0 on a scale symmetric about it, so a head that pushes the other way is not mistaken for a small one."""
    fig = layer_head_map(values, title, colorbar_title, off=marked, fmt=fmt, colorscale="RdBu_r")
    bound = float(values.abs().max()) or 1.0
    fig.update_traces(zmid=0.0, zmin=-bound, zmax=bound)
    return fig
