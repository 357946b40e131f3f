"""All layers: every head of the model as one tiled image; click a tile to focus it."""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.app import state
from mha_viz.app.common import clicked_head, fitted_chart, head_name, pick_clicked_head
from mha_viz.app.context import ViewContext
from mha_viz.app.names import column_names, layer_name
from mha_viz.contract import Head, Model


def render(ctx: ViewContext) -> None:
    focus = overview(ctx.model, ctx.name, ctx.tokens, ctx.att)
    focused_head(ctx.tokens, ctx.att, focus, focus in ctx.heads_off)


def overview(model: Model, model_name: str, tokens: list[str], att: torch.Tensor) -> Head | None:
    """Every head in a layers x heads grid, one tiled image. Returns the head the user picked, if any."""
    st.caption(f"All {model.n_layers * model.n_heads} heads: rows are layers, columns heads. Each tile is scaled "
               "to its own maximum so faint patterns stay visible; grey tiles are switched off. "
               "Click a tile to focus it.")
    options = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    # The chart's selection is in session state before the chart is drawn, so this run can already focus it.
    # A click is applied once: the selection lingers across reruns and must not undo a later pick below.
    pick_clicked_head(clicked_head(st.session_state.get("overview")), options, "focus_pick", "_overview_click")
    if st.session_state.get("focus_pick") not in options:
        st.session_state["focus_pick"] = options[0]
    fig = plotting.tiled_figure(
        att, [layer_name(i) for i in range(model.n_layers)], column_names(model.n_heads),
        off=state.off_set(model_name), selected=st.session_state["focus_pick"], zscale="head",
    )
    tile, blocks = fig.layout.meta["tile"], fig.layout.meta["blocks"]
    if blocks > 1:
        st.caption(f"The {model.n_layers} layers are drawn as {blocks} blocks side by side, so the whole model "
                   "fits one screen.")
    if len(tokens) > tile:
        st.caption(f"With {len(tokens)} tokens each tile is shrunk to {tile} x {tile} cells, the pixels it has "
                   "(each cell shows the largest weight it covers); the focused head below is full size.")
    fitted_chart(fig, "overview", width="stretch", on_select="rerun", selection_mode="points")
    return st.selectbox("Focused head", options, format_func=head_name, key="focus_pick")


def focused_head(tokens: list[str], att: torch.Tensor, head: Head, off: bool) -> None:
    layer, h = head
    fig = plotting.head_figure(att[layer, h], tokens, head_name(head), off=off, size=460, colorbar=True)
    # Its own width (the square, its labels and its colour bar): stretched, the bar would stand at the column's far
    # edge, away from the picture it explains.
    fitted_chart(fig, "focused_fig", width="content")
