"""Ablation effects: predictions before and after, how much every head's pattern moved, and head importance."""
from __future__ import annotations

import math

import streamlit as st

from mha_viz import analysis, plotting
from mha_viz.analysis.importance import effect_measure, head_importance
from mha_viz.analysis.patching import rank_correlation
from mha_viz.app import continuation
from mha_viz.app.common import (
    ABLATION_LABELS,
    ABLATION_SHORT,
    chart_config,
    exact_map_step,
    fitted_chart,
    head_name,
    predictions_panel,
    visible,
    where,
)
from mha_viz.app.context import ViewContext
from mha_viz.app.estimates import ESTIMATE_SAMPLES, exact_seconds, importance_estimate_cached
from mha_viz.contract import AttentionRun, Head, InputError, Model, UnavailableError, head_keep_mask

BUTTON = "imp_btn"  # the exact map's button; common.exact_map_step keeps its running job beside it


def render(ctx: ViewContext) -> None:
    model, base, run = ctx.model, ctx.base, ctx.run
    position = None
    if base.logits is not None:
        default = model.prediction_position(base)
        if model.info.kind == "masked-lm":
            st.caption(f"Masked LM: put {model.mask_token or 'the mask token'} in the sentence to predict that "
                       "word; its predictions before and after ablation are compared.")
        # An encoder-decoder run predicts along its target (the decoder's tokens), not along the source.
        along = getattr(base, "target_tokens", None) or base.tokens
        positions = list(range(len(along)))
        position = st.selectbox(
            "Prediction at position", positions, index=len(positions) - 1 if default is None else default,
            format_func=lambda i: f"{i}: {visible(along[i], 24)}", key="pred_pos",
            help="For a causal LM, position i predicts token i+1; the last position predicts what comes next.",
        )
    # With every head on, "before" and "after" are the same run: a KL of 0 and two equal top-5 lists say nothing.
    if not ctx.heads_off:
        st.info("All heads are on, so nothing differs yet. Switch heads off in the layer view, or compute the "
                "importance map below.")
    else:
        if position is not None:
            predictions_panel(model, base, run, position, key="pred_fig_fx", table=True)
        else:
            cos = analysis.cosine_change(base.output, run.output)
            st.metric("Cosine similarity of sentence embedding (before vs after)", f"{cos:.5f}")
        pattern_shift(model, base, run, ctx.heads_off)
    continuation.comparison_if_written(ctx)
    importance(model, ctx.name, ctx.text, base, ctx.heads_off, position, ctx.ablation)


SHIFT_SCALE_FLOOR = 0.05  # bits

def pattern_shift(model: Model, base: AttentionRun, run: AttentionRun, heads_off: frozenset[Head]) -> None:
    shift = analysis.pattern_shift(base.attentions, run.attentions)  # (L, H)
    # A floor under the scale's top: a largest shift of 0.004 bits would otherwise be drawn as full red.
    top = max(float(shift.max()), SHIFT_SCALE_FLOOR)
    st.plotly_chart(plotting.layer_head_map(shift, "How much each head's pattern moved (mean JS over query rows)",
                                            "JS (bits)", off=set(heads_off), zmax=top),
                    width="stretch", key="shift_map", config=chart_config())
    st.caption(f"Colour from 0 to {top:.3f} bits (the largest shift, or {SHIFT_SCALE_FLOOR} bits if that is "
               "smaller, so a tiny shift is not drawn as a large one); 1 bit = no overlap. Outlined: heads off.")
    options = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    pick = st.selectbox("Head to inspect", options, index=int(shift.flatten().argmax()), format_func=head_name,
                        key="shift_pick")
    layer, head = pick
    c1, c2, c3 = st.columns(3)
    zmax = float(max(base.attentions[layer, head].max(), run.attentions[layer, head].max()))
    fitted_chart(plotting.head_figure(base.attentions[layer, head], base.tokens, f"{head_name(pick)} all on",
                                      zmax=zmax, size=340, colorbar=True), "fx_base", c1, width="content")
    fitted_chart(plotting.head_figure(run.attentions[layer, head], run.tokens, f"{head_name(pick)} heads off",
                                      zmax=zmax, size=340, colorbar=True), "fx_abl", c2, width="content")
    fitted_chart(plotting.diff_figure(run.attentions[layer, head] - base.attentions[layer, head], base.tokens,
                                      f"{head_name(pick)} change"), "fx_diff", c3, width="content")


def importance(model: Model, model_name: str, text: str, base: AttentionRun, heads_off: frozenset[Head],
               position: int | None, ablation: str = "zero") -> None:
    """Each head switched off alone; measured at the same position as the predictions above."""
    st.markdown("**Head importance for this input**")
    if model.has_cross_attention:  # every kind's heads, each map its own kind's (importance_kinds.py)
        from mha_viz.app import importance_kinds

        importance_kinds.render(model, model_name, text, base, heads_off, position, ablation,
                                ABLATION_SHORT[ablation])
        return
    measure = effect_measure(model)
    if base.logits is not None:
        if position is None:
            position = len(base.tokens) - 1
        what = f"the KL divergence of the prediction at {where(model, base, position)}"
    else:
        what = "1 − cosine similarity of the sentence embedding (mean of the final hidden states)"
    st.caption(f"Each head is switched off alone ({ABLATION_LABELS[ablation]}; on top of the heads already off) "
               f"and the output change is measured as {what}. One batched forward pass per chunk of heads.")
    at = -1 if position is None else position
    key = (model_name, text, tuple(sorted(heads_off)), position, ablation)
    store = st.session_state.setdefault("importance", {})
    try:
        estimate = importance_estimate_cached(model_name, text, tuple(sorted(heads_off)), at, ablation)
    except (InputError, UnavailableError):
        estimate = None
    if estimate is not None:
        st.plotly_chart(plotting.layer_head_map(estimate, "Estimate (instant): second-order, sampled", measure,
                                                off=set(heads_off), fmt=".4f"),
                        width="stretch", key="imp_estimate", config=chart_config())
        st.caption(f"An estimate, not a measurement: {ESTIMATE_SAMPLES} backward passes give every head's term at "
                   "once (Michel et al. 2019's head-mask gradient, taken to second order because this measure has "
                   "no first-order change; see `importance_estimate`). It ranks heads; its size is trustworthy only "
                   "for small changes. The exact map below measures each head.")
    n_heads = model.n_layers * model.n_heads - len(heads_off)
    measured = exact_map_step(
        BUTTON, key, n_heads, exact_seconds(model_name, text, n_heads),
        lambda progress: head_importance(model, text, heads_off, position=at, progress=progress, ablation=ablation),
        "Switching off one head at a time", model_name=model_name)
    if measured is not None:
        store.clear()
        store[key] = measured
    if key in store:
        st.plotly_chart(plotting.layer_head_map(store[key], f"Output change when each head alone is "
                                                f"{ABLATION_SHORT[ablation]}", measure,
                                                off=set(heads_off), fmt=".4f"),
                        width="stretch", key="imp_map", config=chart_config())
        if estimate is not None:
            on = head_keep_mask(heads_off, model.n_layers, model.n_heads).bool()  # (L, H): heads that were measured
            rho = rank_correlation(store[key][on], estimate[on])
            st.caption("Rank correlation of the estimate with the exact map: "
                       + ("not defined (every head scores the same)" if math.isnan(rho) else f"{rho:.2f}")
                       + f" over {n_heads} heads.")

