"""Ablation effects' head importance on a model with cross-attention (encoder-decoder): every head of every kind
switched off alone, on top of the heads already off, and what that does to the decoder's prediction at the
position the predictions above read, one map per kind (Encoder, Decoder, Cross) in the page's one set of heads
(web/kinds.py). The one-stack view's gradient estimate is not drawn: it is defined along one stack over one text."""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.analysis.patch_kinds import every_kind_importance
from mha_viz.app import cache, estimates
from mha_viz.app.common import chart_config, exact_map_step, md_safe, where
from mha_viz.contract import AttentionRun, Head, InputError, Model
from mha_viz.web import kinds

BUTTON = "imp_kinds_btn"
NO_ESTIMATE = ("No instant estimate here: it comes from gradients along one self-attention stack over one text, and "
               "this model reads two texts with three kinds of heads. The exact map measures each head.")


def render(model: Model, model_name: str, text: str, base: AttentionRun, heads_off: frozenset[Head],
           position: int | None, ablation: str, ablation_short: str) -> None:
    target = cache.current_target(model)
    position = base.logits.shape[0] - 1 if position is None else position  # along the target
    st.caption(f"Each head of every kind is switched off alone (on top of the heads already off) and the change "
               f"of the decoder's prediction at {where(model, base, position)} is measured as the KL "
               f"divergence from the prediction with only those heads off. One batched forward per chunk of heads. "
               + NO_ESTIMATE)
    n = kinds.all_layers(model) * model.n_heads - len(heads_off)
    key = (model_name, text, target, tuple(sorted(heads_off)), position, ablation)
    store = st.session_state.setdefault("importance_kinds", {})
    try:
        measured = exact_map_step(
            BUTTON, key, n, estimates.exact_seconds(model_name, text, n),
            lambda progress: every_kind_importance(model, text, target, heads_off, position, ablation, progress),
            "Switching off one head at a time", model_name=model_name)
    except InputError as err:  # e.g. mean ablation for a model with no example sentences
        st.warning(md_safe(str(err)))
        return
    if measured is not None:
        store.clear()
        store[key] = measured
    if key not in store:
        return
    scores = store[key]  # (L_enc + 2 L_dec, H)
    top = float(scores.nan_to_num(0.0).max()) or 1.0  # one colour range for the three maps
    for column, kind in zip(st.columns(len(kinds.KINDS)), kinds.KINDS):
        start, count = kinds.set_offset(model, kind), kinds.n_layers(model, kind)
        off = {(l - start, h) for l, h in heads_off if start <= l < start + count}
        fig = plotting.layer_head_map(scores[start:start + count], f"{kind}: {ablation_short} alone",
                                      "KL", off=off, fmt=".4f", zmax=top)
        column.plotly_chart(fig, width="stretch", key=f"imp_kinds_map_{kind}", config=chart_config())
    best = [(int(i) // model.n_heads, int(i) % model.n_heads)
            for i in torch.argsort(scores.nan_to_num(-1.0).flatten(), descending=True)[:5]]
    st.markdown("Heads that move it most: " + ", ".join(
        f"{kinds.set_head_name(model, h)} ({float(scores[h]):.4f})" for h in best if float(scores[h]) > 0))
