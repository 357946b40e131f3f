"""Rollout & norms: attention rollout and the value-weighted norm view next to raw attention."""
from __future__ import annotations

import streamlit as st

from mha_viz import analysis, plotting
from mha_viz.app.cache import norm_inputs
from mha_viz.app.common import fitted_chart, head_name, layer_picker
from mha_viz.app.context import ViewContext
from mha_viz.app.names import layer_name
from mha_viz.contract import Ablation, head_keep_mask


def render(ctx: ViewContext) -> None:
    model, run = ctx.model, ctx.run
    layer = layer_picker(model, ctx.name, ctx.layer, st.columns([1, 5])[0])
    # Rollout runs through run.attentions' layers; an encoder-decoder model's set also holds its decoder and
    # cross-attention heads, numbered past them (web/kinds.py).
    own = [h for h in ctx.heads_off if h[0] < model.n_layers]
    keep = head_keep_mask(own, model.n_layers, model.n_heads)  # (L, H)
    rolled = analysis.rollout(run.attentions, keep)  # (L, Q, K)
    on = keep[layer].bool()  # (H,)
    st.markdown(f"**Attention rollout through layer {layer}** (Abnar & Zuidema 2020)")
    st.caption("Rollout multiplies the head-averaged attention of every layer up to this one, with the residual "
               "connection counted as half, to estimate how much each input token flows into each position. "
               "It ignores value vectors and MLPs: an estimate, not a measurement of importance.")
    if ctx.heads_off:
        st.caption("Switched-off heads are left out of both panels: the mean of heads and each layer's rollout step "
                   "average only the heads that are on, and a layer with every head off passes the residual "
                   "stream through unchanged.")
        if ctx.ablation != "zero":
            st.caption(f"Both panels and the norm view below come from the run with those heads' output "
                       f"{Ablation.of(ctx.ablation).describe}, as the sidebar says.")
    st.caption("Colours with square-root contrast, as in the Layer grid: a value a quarter of each map's top is drawn "
               "half dark, so a few strong cells (often the first token) do not leave the rest white. The hover and "
               "the colour bar give the values themselves.")
    c1, c2 = st.columns(2)
    if on.any():
        raw = run.attentions[layer][on].mean(0)  # (Q, K)  mean over the heads that are on
        title = f"{layer_name(layer)} raw, mean of the {int(on.sum())} heads on"
        fitted_chart(plotting.head_figure(raw, run.tokens, title, size=380, colorbar=True, contrast="sqrt"),
                     "roll_raw", c1, width="content")
    else:
        c1.info(f"Every head of {layer_name(layer)} is off: no attention of this layer reaches the output.")
    fitted_chart(plotting.head_figure(rolled[layer], run.tokens, f"rollout through {layer_name(layer)}", size=380,
                                      colorbar=True, contrast="sqrt"), "roll_fig", c2, width="content")

    st.markdown("**Value-weighted norms** ‖α_ij f(x_j)‖ (Kobayashi et al. 2020)")
    st.caption("Weights each attention arrow by the size of what it carries: the value vector of token j passed "
               "through this head's slice of the output projection. A large weight on a token whose vector is "
               "small moves little.")
    inputs = norm_inputs(ctx.name, ctx.text, tuple(sorted(ctx.heads_off)), ctx.ablation)
    if inputs is None:
        st.info("The norm view is not available for this model: "
                + ("its norms are defined on one self-attention stack over one text, and this model reads two "
                   "(a source and a target) with three kinds of heads; Inside a head shows any head's values and "
                   "what it adds." if model.has_cross_attention else "its output projection was not found."))
        return
    values, w_o = inputs  # (L, H, K, dh), (L, H, dh, D); a switched-off head's values are zero
    head = st.selectbox("Head", range(model.n_heads), format_func=lambda h: head_name((layer, h)), key="norm_head")
    norms = analysis.norm_view(run.attentions[layer], values[layer], w_o[layer])  # (H, Q, K)
    off = (layer, head) in ctx.heads_off
    name = head_name((layer, head))
    c1, c2 = st.columns(2)
    fitted_chart(plotting.head_figure(run.attentions[layer, head], run.tokens, f"{name} weights α",
                                      off=off, size=380, colorbar=True, contrast="sqrt"),
                 "norm_raw", c1, width="content")
    if off:
        c2.info(f"{name} is switched off (its output {Ablation.of(ctx.ablation).describe}): what it adds no "
                "longer comes from the keys, so every ‖α f(x)‖ is 0. Its weights α (left) are still computed.")
    else:
        fitted_chart(plotting.head_figure(norms[head], run.tokens, f"{name} ‖α f(x)‖", size=380,
                                          colorbar=True, contrast="sqrt"), "norm_fig", c2, width="content")
