"""Patching, for a model with cross-attention (encoder-decoder): the second text is a second SOURCE (the source box
holds the first), both read on the page's target, and the metric is a logit difference of the decoder's next-token
prediction after the target. The map patches every head of every kind alone, one patched run per head (such a
model has no batched head maps), and draws one map per kind, rows numbered within the kind; a head is named as
the page's one set names it (web/kinds.py: "Cross L1 H2")."""
from __future__ import annotations

import math

import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.analysis.patch_kinds import every_kind_patching_map
from mha_viz.analysis.patching import Metric, normalise, top_heads
from mha_viz.app import cache, estimates
from mha_viz.app.common import chart_config, exact_map_step, md_safe, metric_row, predictions_panel, quoted, where
from mha_viz.app.context import ViewContext
from mha_viz.app.name_swap import swapped
from mha_viz.app.patching_shared import answer_tokens, off_baseline, shown_token, source_key, typed_token
from mha_viz.app.run_cache import RunCache
from mha_viz.app.text import read_text
from mha_viz.contract import InputError
from mha_viz.web import kinds

_MAPS = RunCache(8, size=lambda _: 1)  # the last 8 maps of every kind, shared by every session
NO_ESTIMATE = ("No attribution estimate beside it: that needs the gradient of the metric with respect to every "
               "head's output in one stack, and this encoder-decoder model does not give head gradients, so the "
               "exact map is the measurement here.")
NO_DIRECT = ("No direct effects: they split the logit difference into one term per head in the residual stream the "
             "unembedding reads (the model's readout), and here the encoder's heads reach the decoder's stream only "
             "through cross-attention, so this model gives no such readout.")


def render(ctx: ViewContext) -> None:
    model, base = ctx.model, ctx.base
    st.subheader("Patching: which heads carry the difference between two sources")
    st.caption("Every head's output (its slice of the output projection's input), encoder, decoder and "
               "cross-attention alike, is taken, one head at a time, from a run on a second source read on the same "
               "target, with everything after it recomputed; the maps show how far that moves the decoder's "
               "prediction from the first source's value (0) toward the second's (1). All other heads are on here. "
               "Measurements on these two sources, not roles.")
    key = source_key(ctx.text)
    second = read_text(st.text_input("Second source (one detail changed; the decoder reads the same target)",
                                     value=None if key in st.session_state else swapped(ctx.text, model.name_words()),
                                     key=key) or "")
    if second.strip() == ctx.text.strip():
        st.info("The second source is the same as the first, so patching cannot move anything: there is no map to "
                "draw. Change one detail of the second source (a name for another name).")
        return
    if cache.current_target(model) is None:
        st.info("Patching reads both sources on one decoder input, so it needs a target: type the decoder's text "
                "in the Target box (empty, each source would be read on its own greedy continuation).")
        return
    try:
        other = cache.get_run(ctx.name, second)  # the page's target: the same decoder input as `base`
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    position = model.prediction_position(base)
    metric = _metric(ctx, other, position, second)
    if metric is None:
        return
    text_value, source_value = (float(metric(run.output, run.logits)) for run in (base, other))
    metric_row("patch_values", [(f"Metric on the first source: {_describe(ctx, metric)}", f"{text_value:.3f}"),
                                ("Metric on the second source", f"{source_value:.3f}")])
    if abs(source_value - text_value) < 1e-6:
        st.info("The metric is the same on both sources, so there is no difference for a head to carry: no map is "
                "drawn. Change the second source or the answer tokens.")
        return
    lined_up = len(other.tokens) == len(base.tokens)
    if not lined_up:
        st.caption(f"The second source has {len(other.tokens)} tokens and the first {len(base.tokens)}: an encoder "
                   "head's output is taken position by position, so encoder heads are not patched here (their map "
                   "is blank); decoder and cross-attention heads line up on the one target.")
    moved = exact_maps(ctx, second, metric, text_value, source_value, lined_up)
    st.caption(NO_ESTIMATE + " " + NO_DIRECT)
    patch_heads(ctx, second, metric, moved, lined_up)


def _metric(ctx: ViewContext, other, position: int, second: str) -> Metric | None:
    """The logit difference at the decoder's prediction position, its two tokens typed or kept (by default the
    swapped words, else each source's top prediction, as the one-stack view picks them)."""
    model, base = ctx.model, ctx.base
    first, against = answer_tokens(model, base, other, position, ctx.text, second)
    c1, c2 = st.columns(2)
    answer = c1.text_input("Answer token", value=shown_token(first), key=f"patch_answer|{first}",
                           help="The metric is logit(answer) − logit(against) at the decoder's prediction after "
                                "the target. Write a newline as \\n and a tab as \\t.")
    against = c2.text_input("Against", value=shown_token(against), key=f"patch_against|{against}")
    try:
        ids = model.token_id(typed_token(answer)), model.token_id(typed_token(against))
    except InputError as err:
        st.warning(md_safe(str(err)))
        return None
    return Metric("logit_diff", position=position, answer=ids[0], other=ids[1])


def _describe(ctx: ViewContext, metric: Metric) -> str:
    answer, other = (ctx.model.decode(i) for i in (metric.answer, metric.other))
    return md_safe(f"logit({quoted(answer)}) − logit({quoted(other)}) at "
                   f"{where(ctx.model, ctx.base, metric.position)}")


def exact_maps(ctx: ViewContext, second: str, metric: Metric, text_value: float, source_value: float,
               lined_up: bool) -> torch.Tensor | None:
    """The button (one patched run per head, with progress), then a map per kind of the share of the gap each head
    closes; returns the shares (L_enc + 2 L_dec, H) in the one set's numbering, or None before the map is made."""
    model, target = ctx.model, cache.current_target(ctx.model)
    job = (ctx.name, ctx.text, second, target, metric.position, metric.answer, metric.other)
    result = _MAPS.peek(job)
    if result is None:
        # The heads measured: encoder heads only where the two sources line up.
        n = (kinds.all_layers(model) - (0 if lined_up else model.n_layers)) * model.n_heads
        result = exact_map_step(
            "patch_exact_btn", job, n, estimates.exact_seconds(ctx.name, ctx.text, n, second),
            lambda progress: _MAPS.get(job, lambda: every_kind_patching_map(model, ctx.text, second, target, metric,
                                                                            progress=progress)),
            "Patching one head at a time", model_name=ctx.name)
    if result is None:
        return None
    moved = normalise(result.patched - text_value, text_value, source_value)  # (L_enc + 2 L_dec, H)
    bound = float(moved.abs().nan_to_num(0.0).max()) or 1.0  # one colour range for every kind's map
    st.markdown("**Patching each head alone from the second source: share of the gap it closes**")
    columns = st.columns(len(kinds.KINDS))
    for column, kind in zip(columns, kinds.KINDS):
        start = kinds.set_offset(model, kind)
        rows = moved[start:start + kinds.n_layers(model, kind)]  # (layers of this kind, H)
        fig = plotting.signed_layer_head_map(rows, f"{kind}: exact", "moved")
        fig.update_traces(zmid=0.0, zmin=-bound, zmax=bound)
        column.plotly_chart(fig, width="stretch", key=f"patch_exact_map_{kind}", config=chart_config())
    found = [(h, v) for h, v in top_heads(moved.nan_to_num(0.0), 5) if math.isfinite(v) and abs(v) >= 0.005]
    st.markdown("Top heads: " + (", ".join(f"{kinds.set_head_name(model, h)} ({v:+.2f})" for h, v in found)
                                 or "none (no head moves it by 0.005 or more)"))
    return moved


def patch_heads(ctx: ViewContext, second: str, metric: Metric, moved: torch.Tensor | None, lined_up: bool) -> None:
    """Patch chosen heads of any kind and see the decoder's prediction move."""
    model, base = ctx.model, ctx.base
    st.markdown("**Patch heads and see the prediction move**")
    names = {kinds.set_head_name(model, (layer, head)): (layer, head)
             for layer in range(kinds.all_layers(model)) for head in range(model.n_heads)
             if lined_up or kinds.kind_of(model, layer)[0] != kinds.ENCODER}
    default = [kinds.set_head_name(model, h) for h, _ in top_heads(moved.nan_to_num(0.0), 1)] \
        if moved is not None else []
    # The pick starts at the map's strongest head once the map is there; a pick the user changed is theirs.
    key = f"patch_pick|{ctx.name}|{'map' if moved is not None else 'none'}"
    picked = st.multiselect("Heads to patch from the second source", list(names),
                            default=None if key in st.session_state else [d for d in default if d in names], key=key)
    if not picked:
        return
    heads = frozenset(names[name] for name in picked)
    try:
        run = cache.get_run(ctx.name, ctx.text, patch=heads, source=second)
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    value, before = float(metric(run.output, run.logits)), float(metric(base.output, base.logits))
    c1, c2 = st.columns(2)
    c1.metric(f"Metric with {len(heads)} head(s) patched", f"{value:.3f}", delta=f"{value - before:+.3f}")
    off_baseline(ctx, c2, heads, metric, before)
    predictions_panel(model, base, run, metric.position, key="patch_pred_fig", changed="with those heads patched")
