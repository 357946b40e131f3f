"""One opened-up head (`HeadInside`): a query's scores, weights and value sizes step by step, the weighted sum
of the values, and how the heads of a layer add up for one token.
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import DIFF_SCALE, OFF_COLOUR, head_colour
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np, _fast_figure, _finite_or_nan
from mha_viz.plotting.tokens import axis_labels


def inside_steps_figure(tokens: list[str], scores: torch.Tensor, weights: torch.Tensor, value_norms: torch.Tensor,
                        query: int | None, title: str, bias: torch.Tensor | None = None) -> go.Figure:
    """One query of one head, step by step, one row of bars per step over the key tokens: the raw scores before
    softmax (masked keys have none), the weights after it, and each key's value vector size ‖v_j‖.
    scores, weights, value_norms: (K,). bias (K,) or None: what the model adds to q·kⱼ·scale to make the scores
    (ALiBi's position bias, `HeadInside.position_bias`), marked on the scores' row so both terms show.
    query: the query's own key column, outlined; None where the keys are another text's (cross-attention)."""
    from plotly.subplots import make_subplots  # three axes only: the subplot cost that bites is at 72+ axes

    labels = axis_labels(tokens)
    s, w, n = _finite_or_nan(scores), _as_np(weights), _as_np(value_norms)  # (K,) each
    if not (len(labels) == s.shape[0] == w.shape[0] == n.shape[0]):
        raise ValueError(f"{len(labels)} tokens but {s.shape[0]} scores, {w.shape[0]} weights, {n.shape[0]} norms")
    masked = ~np.isfinite(_as_np(scores))
    first = "1. scores q·kⱼ·scale (before softmax)" if bias is None else \
        "1. scores q·kⱼ·scale + bⱼ (before softmax; ◆ the position bias bⱼ)"
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[first, "2. weights αⱼ = softmax(scores)", "3. value size ‖vⱼ‖"])
    s_colours = np.where(np.nan_to_num(s) >= 0, "#4c72b0", "#c44e52")
    fig.add_trace(go.Bar(x=labels, y=np.nan_to_num(s), marker_color=s_colours, name="score",
                         text=["masked" if m else "" for m in masked], textposition="outside",
                         hovertemplate="key: %{x}<br>score: %{y:.3f}<extra></extra>"), row=1, col=1)
    if bias is not None:
        b = np.where(masked, np.nan, _as_np(bias))  # (K,): none where the key is masked, as the scores
        if b.shape[0] != s.shape[0]:
            raise ValueError(f"{s.shape[0]} scores but {b.shape[0]} bias values")
        fig.add_trace(go.Scatter(x=labels, y=b, mode="markers", marker=dict(symbol="diamond", size=7, color="#222"),
                                 name="position bias", customdata=np.nan_to_num(s) - np.nan_to_num(b),
                                 hovertemplate="key: %{x}<br>position bias: %{y:.3f}<br>q·k·scale: "
                                               "%{customdata:.3f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=w, marker_color="#08519c", name="weight",
                         hovertemplate="key: %{x}<br>weight: %{y:.3f}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Bar(x=labels, y=n, marker_color="#55a868", name="‖v‖",
                         hovertemplate="key: %{x}<br>‖v‖: %{y:.3f}<extra></extra>"), row=3, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)  # not fixed at 0-1: over 20+ keys most weights are small
    # The query's own column, outlined in every row.
    for row in (1, 2, 3) if query is not None else ():
        fig.add_vrect(x0=query - 0.5, x1=query + 0.5, line_width=1.5, line_color="#222", fillcolor="rgba(0,0,0,0)",
                      row=row, col=1)
    fig.update_layout(template="none", title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                      height=520, showlegend=False, font=FONT, margin=dict(l=50, r=10, t=60, b=70))
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=max(6, min(10, int(700 / max(len(labels), 1))))))
    for annotation in fig.layout.annotations:
        annotation.font = dict(size=11)
    return fig


def weighted_sum_figure(tokens: list[str], weighted: torch.Tensor, total: torch.Tensor, title: str) -> go.Figure:
    """The weighted sum as a picture: one row per key, αⱼ vⱼ (K, dh), and under them their sum z (dh,), on one
    symmetric red-blue scale, so the rows that make up z stand out."""
    z_rows = _as_np(weighted)  # (K, dh)
    z = np.vstack([z_rows, _as_np(total)[None]])  # (K + 1, dh)
    labels = axis_labels(tokens) + ["Σ = z"]
    if z_rows.shape[0] != len(labels) - 1:
        raise ValueError(f"{len(labels) - 1} tokens for {z_rows.shape[0]} weighted value rows")
    bound = max(float(np.nanmax(np.abs(z))) if z.size else 0.0, 1e-6)
    trace = dict(type="heatmap", z=z, y=labels, zmin=-bound, zmax=bound, zmid=0.0, colorscale=DIFF_SCALE,
                 hovertemplate="%{y}<br>dim %{x}: %{z:+.3f}<extra></extra>", showscale=True)
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                  height=min(900, 110 + 16 * len(labels)), font=FONT, margin=dict(l=90, r=10, t=40, b=30),
                  yaxis=dict(autorange="reversed", tickfont=dict(size=9)), xaxis=dict(title="dimension of the head"))
    return _fast_figure(trace, layout)


def heads_combine_figure(names: list[str], norms: torch.Tensor, along: torch.Tensor, off: list[bool],
                         bias_along: float, total_norm: float, title: str) -> go.Figure:
    """How the heads of a layer add up for one token: per head its contribution's size ‖c_h‖ (light) and its
    signed length along the layer's total (dark; negative = against it), then the output bias and the total.
    The dark bars plus the bias's sum to the total's length."""
    norms_np, along_np = _as_np(norms), _as_np(along)  # (H,), (H,)
    if not (len(names) == norms_np.shape[0] == along_np.shape[0] == len(off)):
        raise ValueError(f"{len(names)} names for {norms_np.shape[0]} norms and {along_np.shape[0]} components")
    labels = [html.escape(n, quote=False) + (" (off)" if o else "") for n, o in zip(names, off)]
    colours = [OFF_COLOUR if o else head_colour(i) for i, o in enumerate(off)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=norms_np, name="size ‖c_h‖", marker_color=colours, opacity=0.35,
                         hovertemplate="%{x}<br>‖c_h‖: %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Bar(x=labels + ["bias", "total"], y=np.append(along_np, [bias_along, total_norm]),
                         name="along the total", marker_color=colours + ["#999999", "#222222"],
                         hovertemplate="%{x}<br>along the total: %{y:+.3f}<extra></extra>"))
    fig.update_layout(template="none", barmode="group", title=dict(text=html.escape(title, quote=False),
                                                                   font=dict(size=13)),
                      height=320, font=FONT, margin=dict(l=50, r=10, t=40, b=60),
                      legend=dict(orientation="h", y=-0.25), yaxis=dict(zeroline=True, zerolinecolor="#444"))
    return fig
