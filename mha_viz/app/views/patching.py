"""Patching: which heads carry the difference between two sentences (activation patching, exact and its
attribution estimate), beside what each head writes straight into the prediction (direct effect). A model with
cross-attention: a second source on the same target, every kind of head (`render_kinds`)."""
from __future__ import annotations

import math

import streamlit as st
import torch

from mha_viz import analysis, plotting
from mha_viz.analysis.patch_kinds import every_kind_patching_map
from mha_viz.analysis.patching import Metric, normalise, rank_correlation, top_heads
from mha_viz.app import cache, estimates, maps
from mha_viz.app.common import (
    chart_config,
    exact_map_step,
    head_name,
    md_safe,
    metric_row,
    parse_head,
    predictions_panel,
    quoted,
    where,
)
from mha_viz.app.context import ViewContext
from mha_viz.app.name_swap import swapped
from mha_viz.app.patching_shared import (
    answer_tokens,
    describe_metric,
    example_pair,
    kinds_metric,
    off_baseline,
    read_position,
    shown_token,
    source_key,
    typed_token,
)
from mha_viz.app.run_cache import RunCache
from mha_viz.app.text import read_text
from mha_viz.contract import AttentionRun, InputError, Model
from mha_viz.web import kinds


def render(ctx: ViewContext) -> None:
    model, base = ctx.model, ctx.base
    if model.has_cross_attention:  # a second source, read on the same target; every kind of head
        render_kinds(ctx)
        return
    st.subheader("Patching: which heads carry the difference between two sentences")
    st.caption("Every head's output (its slice of the output projection's input) is taken, one head at a time, "
               "from a run on the second sentence, with every later layer recomputed; the map shows how far that "
               "moves the metric from the first sentence's value (0) toward the second's (1). All other heads are "
               "on here, whatever is switched off elsewhere. Measurements on these two sentences, not roles.")
    source = second_text(ctx, "Second sentence (the same number of tokens, one detail changed)")
    if source.strip() == ctx.text.strip():
        identical(ctx)
        return
    try:
        other = cache.get_run(ctx.name, source)
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    if len(other.tokens) != len(base.tokens):
        st.warning(f"The second sentence has {len(other.tokens)} tokens and the first has {len(base.tokens)}: "
                   "patching swaps head outputs position by position, so both need the same number of tokens. "
                   "Change a word for one of the same length in tokens (a name for a name).")
        return
    position, names = read_position(model, base, ctx.text, ctx.name)
    metric_args, describe = _metric(model, base, other, position, ctx.text, source, names)
    if metric_args is None:
        return
    text_value = float(maps.metric_for(ctx.name, source, metric_args)(base.output, base.logits))
    source_value = float(maps.metric_for(ctx.name, source, metric_args)(other.output, other.logits))
    metric_row("patch_values", [(f"Metric on the first sentence: {describe}", f"{text_value:.3f}"),
                                ("Metric on the second sentence", f"{source_value:.3f}")])
    if abs(source_value - text_value) < 1e-6:
        st.info("The metric is the same on both sentences, so there is no difference for a head to carry: no map "
                "is drawn. Change the second sentence or the answer tokens.")
        offer_pair(ctx)
        return
    exact_button(ctx, source, metric_args)
    left, right = st.columns(2)
    with left:
        patched = patching_maps(ctx, source, metric_args, text_value, source_value)
    with right:
        direct = direct_map(ctx, position, metric_args)
    patch_heads(ctx, model, base, source, metric_args, position, patched, direct)


def second_text(ctx: ViewContext, label: str) -> str:
    """The box for the text patched from, under `label`: first filled with the page's text, a name swapped for
    another of the model's names; then what the user typed there for this text."""
    key = source_key(ctx.text)
    return read_text(st.text_input(label, value=None if key in st.session_state
                                   else swapped(ctx.text, ctx.model.name_words()), key=key) or "")


def identical(ctx: ViewContext) -> None:
    """The two sentences are the same: nothing to patch, so no map and no button to compute one."""
    st.info("The second sentence is the same as the first, so patching cannot move anything: there is no map to "
            "draw. Change one detail of the second sentence (a name for another name of as many tokens), or "
            "start from this model's example pair.")
    offer_pair(ctx)


def offer_pair(ctx: ViewContext) -> None:
    pair = example_pair(ctx.name, ctx.model)
    if pair is None or pair[0] == ctx.text:
        return
    text, source = pair
    st.caption(f"Example pair: “{md_safe(text)}” → “{md_safe(source)}”")
    if st.button("Use the example pair", key="patch_pair", on_click=_use_pair, args=(text, source)):
        st.rerun()  # the sentence box is outside this fragment: the whole page takes the new sentence


def _use_pair(text: str, source: str) -> None:
    st.session_state["text"] = st.session_state["text_box"] = text
    st.session_state[source_key(text)] = source


def _metric(model: Model, base: AttentionRun, other: AttentionRun, position: int | None, text: str = "",
            source: str = "", names: tuple[str, str] | None = None):
    """("logit_diff", position, answer, other) for LMs, ("cosine",) for encoders, and its wording. `names`: the
    (final name, other name) `read_position` read the metric before, if it did."""
    if position is None:
        if model.info.kind == "masked-lm":
            st.caption(f"Put {md_safe(model.mask_token or 'the mask token')} in both sentences to patch on a "
                       "logit difference; until then the metric is the embedding cosine.")
        return ("cosine",), "cosine similarity of the sentence embedding with the second sentence's"
    first, second = answer_tokens(model, base, other, position, text, source, names)
    c1, c2 = st.columns(2)
    answer = c1.text_input("Answer token", value=shown_token(first), key=f"patch_answer|{first}",
                           help="The metric is logit(answer) − logit(against) at the prediction position. "
                                "Include a leading space where the token has one (' Mary'); write a newline "
                                "as \\n and a tab as \\t.")
    against = c2.text_input("Against", value=shown_token(second), key=f"patch_against|{second}")
    answer, against = typed_token(answer), typed_token(against)
    try:
        ids = model.token_id(answer), model.token_id(against)
    except InputError as err:
        st.warning(md_safe(str(err)))
        return None, ""
    label = f"logit({quoted(answer)}) − logit({quoted(against)}) at {where(model, base, position)}"
    if names is not None:
        st.caption(md_safe(f"The text ends with the name {names[0]}, so the metric is read where that name is "
                           f"predicted: at position {position}, {quoted(base.tokens[position])}, the token before "
                           f"the name, comparing {quoted(answer)} with {quoted(against)} (the text's own next word "
                           "against the other name, by default). A causal model's prediction there does not see the "
                           "name or anything after it."))
    return ("logit_diff", position, *ids), md_safe(label)


def exact_button(ctx: ViewContext, source: str, metric_args: tuple) -> None:
    """The exact map's button (with its cost), Stop and progress, full width; the map itself is drawn beside its
    estimate by patching_maps, from the shared cache. No button once the map is there."""
    job = (ctx.name, ctx.text, source, metric_args)
    if maps.exact_patching_map(*job, compute=False) is not None:
        return
    n = ctx.model.n_layers * ctx.model.n_heads
    exact_map_step("patch_exact_btn", job, n, estimates.exact_seconds(ctx.name, ctx.text, n, source),
                   lambda progress: maps.exact_patching_map(*job, progress=progress), "Patching one head at a time",
                   model_name=ctx.name)


def patching_maps(ctx: ViewContext, source: str, metric_args: tuple, text_value: float, source_value: float):
    """The attribution estimate (cheap, always) and the exact map (on request); returns the map picks start from."""
    st.markdown("**Patching each head alone from the second sentence**")
    try:
        with st.spinner("Attribution patching: one forward and one backward pass..."):
            estimate = normalise(maps.attribution_map(ctx.name, ctx.text, source, metric_args),
                                 text_value, source_value)  # (L, H)
    except InputError as err:
        st.info(md_safe(str(err)))
        estimate = None
    n = ctx.model.n_layers * ctx.model.n_heads
    result = maps.exact_patching_map(ctx.name, ctx.text, source, metric_args, compute=False)
    exact = None if result is None else result.moved  # (L, H)
    # One colour range for both maps, symmetric about 0: the estimate is drawn to compare with the exact map.
    shown = [m for m in (exact, estimate) if m is not None]
    bound = max((float(m.abs().nan_to_num(0.0).max()) for m in shown), default=0.0) or 1.0
    if exact is not None:
        fig = plotting.signed_layer_head_map(exact, "Exact: share of the gap each head closes", "moved")
        fig.update_traces(zmid=0.0, zmin=-bound, zmax=bound)
        st.plotly_chart(fig, width="stretch", key="patch_exact_map", config=chart_config())
    if estimate is not None:
        fig = plotting.signed_layer_head_map(estimate, "Attribution estimate (first order)", "moved")
        fig.update_traces(zmid=0.0, zmin=-bound, zmax=bound)
        st.plotly_chart(fig, width="stretch", key="patch_attr_map", config=chart_config())
        st.caption("Attribution patching (Nanda 2023; Syed et al. 2023): the gradient of the metric on the first "
                   "sentence times the change of each head's output. Exact for a small change; a whole swapped "
                   "name is not small, so check it against the exact map."
                   + (f" Both maps share one colour range, −{bound:.2f} to +{bound:.2f} (the largest value of "
                      "either), so a colour means the same share in each." if exact is not None else ""))
    if exact is not None and estimate is not None:
        rho = rank_correlation(exact, estimate)
        agreement = (f"rank correlation **{rho:.2f}**" if math.isfinite(rho)
                     else "no rank correlation (one of the maps is flat: every head moves it the same)")
        st.markdown(f"Agreement over all {n} heads: {agreement}.  \n"
                    f"Top heads, exact: {tops(exact)}  \nTop heads, estimate: {tops(estimate)}")
    return exact if exact is not None else estimate


def tops(values) -> str:
    """The heads that move a map most, with their values; heads that move it by nothing are not "top"."""
    found = [(h, v) for h, v in top_heads(values, 5) if math.isfinite(v) and abs(v) >= 0.005]
    return ", ".join(f"{head_name(h)} ({v:+.2f})" for h, v in found) or "none (no head moves it by 0.005 or more)"


def direct_map(ctx: ViewContext, position: int | None, metric_args: tuple):
    if metric_args[0] != "logit_diff":  # no next-token scores at any position of this run: the metric is a cosine
        st.markdown("**Direct effect of each head: none for the embedding cosine**")
        st.caption("This run gives no next-token scores (a model without an LM head, or a masked LM's text without "
                   "its mask token), so the metric is the cosine similarity of the first sentence's mean-pooled "
                   "embedding with the second's. A direct effect splits a score read linearly off the last "
                   "residual stream into one term per head; the cosine of a normalised, pooled embedding does not "
                   "split that way, so no head's share of it is shown. The patching map beside this measures each "
                   "head's whole effect on the cosine.")
        return None
    if not ctx.model.causal:
        st.markdown("**Direct effect of each head: measured for causal language models**")
        st.caption("Direct effects are measured for causal language models: each head's term in the residual "
                   "stream carried through the final norm and the unembedding onto the logit difference.")
        return None
    st.markdown("**Direct effect of each head on the logit difference**")
    _, position, answer, other = metric_args
    parts = maps.direct_effect_map(ctx.name, ctx.text, position, answer, other)
    if parts is None:
        st.caption("This model's final norm or LM head could not be read as a linear map, so direct effects are "
                   "not shown rather than guessed.")
        return None
    st.plotly_chart(plotting.signed_layer_head_map(parts.heads, "Direct effect (logits), first sentence",
                                                   "Δ logit diff"), width="stretch", key="patch_direct_map",
                    config=chart_config())
    metric_row("patch_direct", [("Sum over heads", f"{float(parts.heads.sum()):+.3f}"),
                                ("Rest (embeddings, MLPs, biases)", f"{parts.rest:+.3f}"),
                                ("Total logit difference", f"{parts.total:+.3f}")])
    st.caption("Each head's output through its slice of the output projection, then the final norm with its "
               "scale frozen at this input, then the unembedding (Elhage et al. 2021). Only the direct path: "
               "what a head does through later layers shows up in the patching map, not here. Top: "
               + tops(parts.heads))
    return parts.heads


def patch_heads(ctx: ViewContext, model: Model, base: AttentionRun, source: str, metric_args: tuple,
                position: int | None, patched, direct) -> None:
    """Patch chosen heads and see the predictions (or the embedding) move."""
    st.markdown(f"**Patch heads and see the {'prediction' if position is not None else 'embedding'} move**")
    options = [head_name((layer, head)) for layer in range(model.n_layers) for head in range(model.n_heads)]
    start = patched if patched is not None else direct
    default = [head_name(h) for h, _ in top_heads(start, 1)] if start is not None else []
    key, seen = f"patch_pick|{ctx.name}", f"patch_pick_default|{ctx.name}"
    # The pick starts at the strongest head of the map on screen (the estimate, then the exact map once it is
    # computed): a pick the user has not touched follows a better map; one they changed is theirs.
    if key in st.session_state and st.session_state[key] == st.session_state.get(seen) and default:
        st.session_state[key] = default
    st.session_state[seen] = default
    picked = st.multiselect("Heads to patch from the second sentence", options,
                            default=None if key in st.session_state else default, key=key)
    if not picked:
        return
    heads = frozenset(parse_head(name) for name in picked)
    run = cache.get_run(ctx.name, ctx.text, patch=heads, source=source)
    metric = maps.metric_for(ctx.name, source, metric_args)
    value, before = float(metric(run.output, run.logits)), float(metric(base.output, base.logits))
    c1, c2 = st.columns(2)
    c1.metric(f"Metric with {len(heads)} head(s) patched", f"{value:.3f}", delta=f"{value - before:+.3f}")
    off_baseline(ctx, c2, heads, metric, before)
    if position is not None:
        predictions_panel(model, base, run, position, key="patch_pred_fig", changed="with those heads patched")
    else:
        st.caption(f"Cosine similarity of the embedding with the unpatched first sentence's: "
                   f"{analysis.cosine_change(base.output, run.output):.5f}")


# -- a model with cross-attention: every kind of head, one set of heads (web/kinds.py) ----------------------------
_KINDS_MAPS = RunCache(8, size=lambda _: 1)  # the last 8 maps of every kind, shared by every session
NO_KINDS_ESTIMATE = ("No attribution estimate beside it: that needs the gradient of the metric with respect to "
                     "every head's output in one stack, and this encoder-decoder model does not give head gradients, "
                     "so the exact map is the measurement here.")
NO_KINDS_DIRECT = ("No direct effects: they split the logit difference into one term per head in the residual stream "
                   "the unembedding reads (the model's readout), and here the encoder's heads reach the decoder's "
                   "stream only through cross-attention, so this model gives no such readout.")


def render_kinds(ctx: ViewContext) -> None:
    """Patching for a model with cross-attention: a second source read on the same target, every kind of head."""
    model, base = ctx.model, ctx.base
    st.subheader("Patching: which heads carry the difference between two sources")
    st.caption("Every head's output (its slice of the output projection's input), encoder, decoder and "
               "cross-attention alike, is taken, one head at a time, from a run on a second source read on the same "
               "target, with everything after it recomputed; the maps show how far that moves the decoder's "
               "prediction from the first source's value (0) toward the second's (1). All other heads are on here. "
               "Measurements on these two sources, not roles.")
    second = second_text(ctx, "Second source (one detail changed; the decoder reads the same target)")
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
    metric = kinds_metric(ctx, other, position, second)
    if metric is None:
        return
    text_value, source_value = (float(metric(run.output, run.logits)) for run in (base, other))
    metric_row("patch_values", [(f"Metric on the first source: {describe_metric(ctx, metric)}",
                                 f"{text_value:.3f}"),
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
    moved = kinds_exact_maps(ctx, second, metric, text_value, source_value, lined_up)
    st.caption(NO_KINDS_ESTIMATE + " " + NO_KINDS_DIRECT)
    patch_kind_heads(ctx, second, metric, moved, lined_up)


def kinds_exact_maps(ctx: ViewContext, second: str, metric: Metric, text_value: float, source_value: float,
               lined_up: bool) -> torch.Tensor | None:
    """The button (one patched run per head, with progress), then a map per kind of the share of the gap each head
    closes; returns the shares (L_enc + 2 L_dec, H) in the one set's numbering, or None before the map is made."""
    model, target = ctx.model, cache.current_target(ctx.model)
    job = (ctx.name, ctx.text, second, target, metric.position, metric.answer, metric.other)
    result = _KINDS_MAPS.peek(job)
    if result is None:
        # The heads measured: encoder heads only where the two sources line up.
        n = (kinds.all_layers(model) - (0 if lined_up else model.n_layers)) * model.n_heads
        result = exact_map_step(
            "patch_exact_btn", job, n, estimates.exact_seconds(ctx.name, ctx.text, n, second),
            lambda progress: _KINDS_MAPS.get(job, lambda: every_kind_patching_map(
                model, ctx.text, second, target, metric, progress=progress)),
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


def patch_kind_heads(ctx: ViewContext, second: str, metric: Metric, moved: torch.Tensor | None,
                     lined_up: bool) -> None:
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
