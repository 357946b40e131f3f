"""Patching: which heads carry the difference between two sentences (activation patching, exact and its
attribution estimate), beside what each head writes straight into the prediction (direct effect)."""
from __future__ import annotations

import math

import streamlit as st

from mha_viz import analysis, plotting
from mha_viz.analysis.patching import normalise, rank_correlation, top_heads
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
from mha_viz.app.name_swap import final_name, swapped
from mha_viz.app.patching_shared import answer_tokens, off_baseline, shown_token, source_key, typed_token
from mha_viz.app.text import read_text
from mha_viz.contract import AttentionRun, InputError, Model


def read_position(model: Model, base: AttentionRun, text: str,
                  name: str) -> tuple[int | None, tuple[str, str] | None]:
    """(where the metric is read, the (final name, other name) read there or None). On a causal LM whose text ends
    with one of the swapped names, the token before that name (where the name is predicted), when the text up to
    it has the same first tokens; otherwise the model's prediction position, and no names."""
    position = model.prediction_position(base)
    ending = final_name(text, model.name_words())
    if position is None or not model.causal or ending is None:
        return position, None
    prompt = text[:ending[0]].rstrip()
    try:
        tokens = cache.get_run(name, prompt).tokens
    except InputError:
        return position, None
    if 0 < len(tokens) < len(base.tokens) and base.tokens[:len(tokens)] == tokens:
        return len(tokens) - 1, ending[1:]
    return position, None


# Pairs that differ in one word, tried in order; a model gets the first whose words it knows (no unknown token)
# and whose two sentences have the same number of tokens. The first is Wang et al. 2022's indirect-object
# template; the second is in the tiny model's own vocabulary (a list said again: the model copies its next word).
# "{mask}" is the model's mask token, for a masked LM to predict at.
PAIRS = [
    ("When Mary and John went to the store, John gave a drink to{mask}",
     "When Mary and John went to the store, Mary gave a drink to{mask}", "Mary", "John"),
    ("anna berg said : red lamp river cup . then tom lind said : red lamp river",
     "anna berg said : red lamp river box . then tom lind said : red lamp river", "cup", "box"),
]


def example_pair(name: str, model: Model) -> tuple[str, str] | None:
    """The first of PAIRS this model can run as a patching pair: (text, second sentence), or None."""
    mask = f" {model.mask_token}." if model.info.kind == "masked-lm" and model.mask_token else ""
    for text, source, *_ in PAIRS:
        text, source = text.format(mask=mask), source.format(mask=mask)
        try:
            a, b = cache.get_run(name, text), cache.get_run(name, source)
        except InputError:
            continue
        if not a.unknown and not b.unknown and len(a.tokens) == len(b.tokens) and a.tokens != b.tokens:
            return text, source
    return None


def render(ctx: ViewContext) -> None:
    model, base = ctx.model, ctx.base
    if model.has_cross_attention:  # a second source, read on the same target; every kind of head
        from mha_viz.app import patching_kinds

        patching_kinds.render(ctx)
        return
    st.subheader("Patching: which heads carry the difference between two sentences")
    st.caption("Every head's output (its slice of the output projection's input) is taken, one head at a time, "
               "from a run on the second sentence, with every later layer recomputed; the map shows how far that "
               "moves the metric from the first sentence's value (0) toward the second's (1). All other heads are "
               "on here, whatever is switched off elsewhere. Measurements on these two sentences, not roles.")
    key = source_key(ctx.text)
    source = read_text(st.text_input("Second sentence (the same number of tokens, one detail changed)",
                                     value=None if key in st.session_state else swapped(ctx.text, model.name_words()),
                                     key=key) or "")
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
