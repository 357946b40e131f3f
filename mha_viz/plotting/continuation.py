"""A written token's row in every head of a layer: one heatmap, heads down, the keys it could read across (the prompt
and the tokens written before it), so a step of a continuation shows where each head looked as it wrote."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import ATTN_SCALE
from mha_viz.plotting.layout import FONT, NO_TEMPLATE


def step_rows_figure(rows: torch.Tensor, tokens: list[str], n_prompt: int, head_names: list[str],
                     title: str) -> go.Figure:
    """rows (H, K): each head's attention from one written token's position over the K positions up to it;
    tokens: the K key labels; positions n_prompt.. were written (marked ✎ on the axis)."""
    if rows.ndim != 2 or rows.shape[1] != len(tokens) or rows.shape[0] != len(head_names):
        raise ValueError(f"rows must be (H={len(head_names)}, K={len(tokens)}); got {tuple(rows.shape)}")
    labels = [f"{t} ✎" if i >= n_prompt else t for i, t in enumerate(tokens)]
    z = rows.detach().float().cpu().numpy().astype(np.float32)  # (H, K)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(tokens))), y=head_names, colorscale=ATTN_SCALE, zmin=0.0,
                               zmax=1.0, colorbar=dict(title="weight", thickness=10),
                               hovertemplate="%{y} → %{customdata}: %{z:.3f}<extra></extra>",
                               customdata=np.array([labels] * len(head_names), dtype=object)))
    fig.update_layout(template=NO_TEMPLATE, title=dict(text=title, font=dict(size=13)), font=FONT,
                      height=90 + 22 * len(head_names), margin=dict(l=60, r=20, t=40, b=80),
                      xaxis=dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=labels,
                                 tickangle=-60),
                      yaxis=dict(autorange="reversed"))
    return fig
