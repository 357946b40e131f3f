"""Inside a head: what the head does on this input (its measured readings, each with how many queries it averaged
over, set against the census's name for it where a census was made); its scores, weights, values and weighted sum
for a chosen query token, each step with its formula; then how the heads of the layer add up for that token."""
from __future__ import annotations

import dataclasses

import streamlit as st
import torch

from mha_viz import analysis, measures, plotting
from mha_viz.analysis.agreement import head_agreement
from mha_viz.app import cache, state
from mha_viz.app.common import (
    KIND_KEY,
    TOKEN_KEY,
    chart_config,
    current_kind,
    fitted_chart,
    head_name,
    layer_picker,
    md_safe,
    metric_row,
    quoted,
    token_picker,
    visible,
)
from mha_viz.app.context import ViewContext
from mha_viz.app.names import UNKNOWN_MARK, marked_tokens, unknown_words
from mha_viz.contract import Ablation, InputError, UnavailableError
from mha_viz.names import layer_name
from mha_viz.web import kinds

OFF_WORDS = {a.key: f", its output {a.describe}: the head is off ({a.adjective})" for a in Ablation.kinds()}


def render(ctx: ViewContext) -> None:
    model = ctx.model
    if model.has_cross_attention:
        render_kinds(ctx)
        return
    st.subheader(f"Inside a head of layer {ctx.layer}")
    _apply_row_click()
    # Wide enough for "L29 H8" in a 1000 px window (at [1, 1, 4] the head picker showed "L0 H(").
    c1, c2, _ = st.columns([1.4, 1.4, 3])
    layer = layer_picker(model, ctx.name, ctx.layer, c1)
    head = c2.selectbox("Head", range(model.n_heads), format_func=lambda h: head_name((layer, h)), key="inside_head")
    query = token_picker(ctx.run, "Query token (click one)")
    try:
        heads = cache.inside_layer(ctx.name, ctx.text, layer, tuple(sorted(ctx.heads_off)), ctx.ablation)
    except UnavailableError as err:
        st.info(md_safe(str(err)))
        return
    except InputError as err:  # e.g. mean or resample ablation for a model with no example sentences
        st.warning(md_safe(str(err)))
        return
    h = heads[head]
    token = md_safe(quoted(h.tokens[query], 30))
    st.caption("Positions are the model's own tokens: the sidebar's hide/merge options do not apply here. "
               + (f"Grouped-query attention: k and v come from key/value head {h.kv_head}, shared by "
                  f"{model.n_heads // model.info.n_kv_heads} query heads. " if model.info.n_kv_heads else "")
               + "q and k are shown as they enter the dot product (after rotary embeddings where the model uses "
               "them).")
    readings(ctx, (layer, head))
    steps(ctx, h, query, token)
    combine(ctx, heads, query, token)


# The tokens each kind's queries and keys are, for its caption.
_READS = {kinds.ENCODER: "queries and keys are the source's tokens",
          kinds.DECODER: "queries and keys are the target's tokens (each sees itself and the earlier ones)",
          kinds.CROSS: "queries are the target's tokens, keys and values the source's"}


def render_kinds(ctx: ViewContext) -> None:
    """A model with cross-attention: the same Encoder / Decoder / Cross switch as the Layer view's grid (its state,
    so this view opens the kind the grid shows), a layer within the kind, and a query token of that kind's queries
    (the target's for Decoder and Cross)."""
    model, run = ctx.model, ctx.run
    kind = current_kind()
    n_layers = kinds.n_layers(model, kind)
    st.subheader(f"Inside a head of {kind} layer {min(ctx.layer, n_layers - 1)}")
    st.segmented_control("Attention", kinds.KINDS, key=KIND_KEY, help=". ".join(
        f"{k}: {kinds.ABOUT[k]}" for k in kinds.KINDS) + ".")
    c1, c2, _ = st.columns([1.4, 1.4, 3])
    key = f"layer_pick|{ctx.name}"
    st.session_state[key] = min(ctx.layer, n_layers - 1)
    layer = c1.selectbox(f"{kind} layer", range(n_layers), format_func=layer_name, key=key,
                         on_change=_layer_picked, args=(ctx.name, key))
    head = c2.selectbox("Head", range(model.n_heads), format_func=lambda h: head_name((layer, h)), key="inside_head")
    queries = run.tokens if kind == kinds.ENCODER else list(getattr(run, "target_tokens", []))
    query_run = run if kind == kinds.ENCODER else dataclasses.replace(run, tokens=queries, special=(), unknown=())
    query = token_picker(query_run, "Query token (click one)" + ("" if kind == kinds.ENCODER else ", of the target"))
    try:
        heads = cache.inside_layer(ctx.name, ctx.text, layer, tuple(sorted(ctx.heads_off)), ctx.ablation,
                                   kind=kind, target=cache.current_target(model))
    except UnavailableError as err:
        st.info(md_safe(str(err)))
        return
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    h = heads[head]
    token = md_safe(quoted(h.tokens[query], 30))
    st.caption(f"{kind}: {_READS[kind]}. Positions are the model's own tokens, every one shown: the sidebar's "
               "hide/merge options do not apply here.")
    stack = kinds.one_stack(ctx.run, kind)
    if stack is None:  # cross-attention: the measures relate positions in one text
        st.markdown(kinds.NO_READINGS[kind])
    else:
        readings(ctx, (layer, head), *stack, kind=kind if kind != kinds.ENCODER else "")
    steps(ctx, h, query, token, kind=kind)
    combine(ctx, heads, query, token, kind=kind)


def _layer_picked(model_name: str, key: str) -> None:
    state.set_layer(model_name, st.session_state[key])  # the page's one layer, as the grid's layer tabs set it


def readings(ctx: ViewContext, head, run=None, causal: bool | None = None, kind: str = "") -> None:
    """The head's measured readings on this input, each with its support ("too few queries" below the floor), and
    where a census of the model was made, whether this input agrees with the name the census gave the head.
    `run`, `causal`: the run the measures read (the page's by default; a decoder's self-attention over its target,
    web/kinds.one_stack), `kind` its name ("Decoder"), whose heads the census does not measure."""
    run = ctx.run if run is None else run
    causal = ctx.model.causal if causal is None else causal
    scores, baselines = analysis.run_scores(run, causal, names=measures.BADGES)
    support = analysis.run_support(run, causal, names=measures.BADGES)
    lines = [analysis.badge_caption(scores, baselines, support, head[0], head[1]).removeprefix("measured: ")
             .replace("no location stands out", "no measured pattern stands out on this input")]
    census = None if kind else cache.census_made(ctx.name)
    if kind:
        lines.append(f"The census measures the encoder's heads only, not the {kind.lower()}'s: these readings are "
                     "this input's, over the target.")
    elif census is not None:
        lines += head_agreement(census, head, scores, support)
    else:
        lines.append("No census of this model has been made yet: the Census view measures what every head does over "
                     "many inputs, and this view then says whether this input agrees.")
    if run.unknown:
        lines.append(unknown_words(len(run.unknown), len(run.tokens) - len(set(run.special)), ctx.model.info.title)
                     + f" (marked “{UNKNOWN_MARK.strip()}” on the axes): they never count as repeating each other.")
    st.markdown(f"**{(kind + ' ') if kind else ''}{head_name(head)} on this input** (a measurement, not a role)\n\n"
                + "\n".join(f"- {md_safe(line)}" for line in lines))


def _clicked_row(selection_state) -> int | None:
    """The query row of a clicked cell of the pattern: the customdata of its transparent scatter point."""
    selection = selection_state.get("selection", {}) if isinstance(selection_state, dict) else \
        getattr(selection_state, "selection", None)
    points = (selection.get("points") if isinstance(selection, dict) else getattr(selection, "points", None)) or []
    for point in points:
        data = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(data, (int, float)):
            return int(data)
    return None


def _apply_row_click() -> None:
    """A click on the pattern picks its row as the query token. Applied once: the chart's selection lingers
    across reruns and must not undo a later click in the token strip."""
    clicked = _clicked_row(st.session_state.get("inside_pattern"))
    if clicked is not None and clicked != st.session_state.get("_inside_click"):
        st.session_state["_inside_click"] = clicked
        st.session_state[TOKEN_KEY] = clicked


def steps(ctx: ViewContext, h, query: int, token: str, kind: str = "") -> None:
    """The steps for one query. `kind`: a model with cross-attention's kind of attention (web/kinds.py), whose
    keys may be another text's (`h.key_tokens`: the source's, for Cross); "" for a model with one stack."""
    name = f"{kind} {head_name((h.layer, h.head))}".strip()
    keys = h.tokens if h.key_tokens is None else h.key_tokens
    # The run's unknown words are the source's: marked where the source is drawn (every position of a one-stack run).
    source_unknown = ctx.run.unknown
    q_unknown = source_unknown if kind in ("", kinds.ENCODER) else ()
    k_unknown = source_unknown if kind in ("", kinds.ENCODER, kinds.CROSS) else ()
    dh = h.q.shape[1]
    scores, weights = h.scores[query], h.weights[query]  # (K,), (K,)
    norms = analysis.value_norms(h.v)  # (K,)
    weighted = analysis.weighted_values(weights, h.v)  # (K, dh)
    z = weighted.sum(0)  # (dh,)
    masked = int(torch.isneginf(scores).sum())
    left, right = st.columns([2, 3])
    with left:
        shown = marked_tokens(keys, k_unknown)
        rows = None if h.key_tokens is None else marked_tokens(h.tokens, q_unknown)
        fitted_chart(plotting.pattern_pick_figure(h.weights, shown, f"{name} weights", query, off=h.ablated,
                                                  queries=rows),
                     "inside_pattern", width="content", on_select="rerun", selection_mode="points")
        if len(h.tokens) <= plotting.CLICKABLE_ROWS_UP_TO:
            st.caption("Click a cell to open its row (query token); the outlined row is the one below.")
    right.markdown(f"**{name}, query token {query}: {token}**" + (" — switched off" if h.ablated else ""))
    if h.query_scale is None:
        scored = (f"1. **Scores** $s_j = q \\cdot k_j \\times {h.scale:.4g}$ (the scale is $1/\\sqrt{{d_{{head}}}}$ "
                  f"with $d_{{head}} = {dh}$ where it equals that)")
    else:  # length-scaled attention (models/attention.length_scale): this query's own factor
        factor = float(h.query_scale[query])
        scored = (f"1. **Scores** $s_j = q \\cdot k_j \\times {h.scale:.4g} \\times {factor:.4g}$: "
                  f"$1/\\sqrt{{d_{{head}}}}$ with $d_{{head}} = {dh}$, times the log of the number of keys this query "
                  f"sees ($\\ln {max(query + 1, 2)}$), so a fixed score gap keeps its weight however long the text "
                  "(Scalable-Softmax, Nakanishi 2025)")
    if h.position_bias is not None:  # the model adds a per-head position term, shown as its own term
        seen = h.position_bias[query][torch.isfinite(scores)]  # (K',): the keys this query sees
        scored += (f" $+\\, b_j$, the model's own position term for this head, added to every score (ALiBi models, "
                   "Press et al. 2022, add a penalty linear in the distance with this head's slope; DeBERTa-v2, He et "
                   "al. 2021, adds its content-to-position and position-to-content terms, and MPNet, Song et al. "
                   "2020, and T5, Raffel et al. 2020, a bias per bucket of relative distance); here from "
                   f"{float(seen.min()):.3g} to "
                   f"{float(seen.max()):.3g}, the diamonds in the chart's first row)")
    right.markdown(
        scored
        + (f"; {masked} later key(s) are masked ($-\\infty$): a causal model's token sees only itself and earlier "
           "ones" if masked else "") + ".\n"
        "2. **Weights** $\\alpha_j = e^{s_j} / \\sum_k e^{s_k}$: a softmax over the keys, so they sum to 1.\n"
        "3. **Values** $\\lVert v_j \\rVert$: how much each key has to give.\n"
        f"4. **Weighted sum** $z = \\sum_j \\alpha_j v_j$, a vector of {dh} numbers "
        f"($\\lVert z \\rVert = {float(z.norm()):.3f}$).\n"
        f"5. **Contribution** $c = z\\,W_O^{{h}}$ through this head's slice of the output projection "
        f"($\\lVert c \\rVert = {float(h.contribution[query].norm()):.3f}$"
        + (OFF_WORDS.get(ctx.ablation, ", the head is off") if h.ablated else "") + ")."
    )
    bias = None if h.position_bias is None else h.position_bias[query]  # (K,)
    own = query if h.key_tokens is None else None  # cross-attention: the query is not among the keys
    st.plotly_chart(plotting.inside_steps_figure(shown, scores, weights, norms, own,
                                                 f"{name}: query {visible(h.tokens[query], 20)}", bias=bias),
                    width="stretch", key="inside_steps", config=chart_config())
    with st.expander(f"{name}'s queries, keys and values: one row per token, the vectors the steps use"):
        st.caption("q of the outlined token is dotted with every k to make the scores; the values are mixed by "
                   "the weights.")
        for col, (letter, vectors, key) in zip(st.columns(3), (("q", h.q, "inside_q"), ("k", h.k, "inside_k"),
                                                               ("v", h.v, "inside_v"))):
            col.plotly_chart(plotting.vectors_figure(vectors, h.tokens if letter == "q" else keys,
                                                     f"{letter} ({vectors.shape[0]} x {dh})",
                                                     row=query if letter == "q" else None),
                             width="stretch", key=key, config=chart_config())
    with st.expander("The weighted sum, row by row (αⱼ vⱼ and their sum z)"):
        st.plotly_chart(plotting.weighted_sum_figure(keys, weighted, z, f"{name}: αⱼ vⱼ for each key, and z"),
                        width="stretch", key="inside_sum", config=chart_config())
    if h.ablated:
        off = Ablation.of(ctx.ablation)
        st.caption(f"This head is switched off: its weights are still computed (above), but its output z is "
                   f"{off.describe} before the output projection ({off.adjective}). {off.help}")


def combine(ctx: ViewContext, heads, query: int, token: str, kind: str = "") -> None:
    layer = heads[0].layer
    st.markdown(f"#### How the heads of {kind + ' ' if kind else ''}layer {layer} combine, for token {query}: "
                f"{token}")
    contributions = torch.stack([h.contribution[query] for h in heads])  # (H, D)
    combo = analysis.combine_heads(contributions, heads[0].bias)
    st.markdown(
        "The heads run in parallel; the layer's attention output for a token is the **sum** of every head's "
        "contribution plus the output bias (added once): $\\text{out} = \\sum_h c_h + b$. "
        "Light bars: the size of each head's contribution; dark bars: its signed length along the total "
        "(negative = pointing against it). The dark bars and the bias add up to the total's length."
    )
    names = [head_name((layer, h.head)) for h in heads]
    fig = plotting.heads_combine_figure(names, combo.norms, combo.along, [h.ablated for h in heads],
                                        combo.bias_along, combo.total_norm,
                                        f"{kind + ' l' if kind else 'L'}ayer {layer}, token {query}")
    st.plotly_chart(fig, width="stretch", key="inside_combine", config=chart_config())
    sizes = analysis.update_sizes(heads[0].resid[query], combo.total)
    metric_row("inside_sizes", [("‖Σ heads + bias‖ (the update)", f"{sizes['update']:.3f}"),
                                ("‖residual stream in‖", f"{sizes['resid']:.3f}"),
                                ("update / residual", f"{sizes['ratio']:.2f}"),
                                ("cos(update, residual)", f"{sizes['cosine']:+.2f}")])
    st.caption("Pre-LN models (GPT-2, Llama, SmolLM2, the tiny model) add the update to the residual stream as it "
               "is; post-LN models (BERT, MiniLM) add it and then normalise. "
               f"‖residual + update‖ = {sizes['after']:.3f}. Sizes are measurements on this input; a large "
               "contribution is not by itself an important one (switch the head off to test that).")
