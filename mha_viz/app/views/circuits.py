"""Circuits: what the weights alone say a head does (its QK and OV maps), which earlier heads each head reads
from (composition scores, against random matrices), whether that reading is used (switch the earlier head off and
measure the later one), how it forms over training, and two steps or models side by side. After Elhage et al.
2021, "A Mathematical Framework for Transformer Circuits"; the formulas and what they leave out are in
mha_viz/analysis/circuits/."""
from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.analysis import circuits as circ
from mha_viz.app.cache import get_model, side_model, side_result, training_evidence
from mha_viz.app.common import head_name, md_safe, metric_row, quoted, trained_here, visible
from mha_viz.app.context import ViewContext
from mha_viz.app.layer_kinds import KIND_KEY, current_kind
from mha_viz.contract import Head, InputError, ModelLoadError, UnavailableError
from mha_viz.models import checkpoints, load_model, seeds
from mha_viz.web import kinds

FULL_MAP_VOCAB = 512  # vocabularies up to this size get the full token x token maps; larger ones a chosen row
TOP_TOKENS = 15
NAMES = {"q": "queries", "k": "keys", "v": "values"}


@st.cache_resource(show_spinner=False, max_entries=8)
def model_circuits(name: str, kind: str | None = None) -> circ.Circuits:
    """`mha_viz.circuits` of a loaded model, one per model name (and kind of attention, for a model with
    cross-attention) for every session (the weights never change)."""
    return circ.circuits(get_model(name), kind=kind)


def step_circuits(name: str) -> circ.Circuits:
    """The same for a model loaded only for its weights (a training step such as tiny@800): the model is a side
    model and its circuits a side result, both in the run cache under its memory budget, so a timeline of many
    steps holds only what fits and drops the least recently used."""
    return side_result("circuits", name, lambda: circ.circuits(side_model(name)))


@st.cache_resource(show_spinner=False, max_entries=8)
def formation(name: str) -> circ.Formation:
    """Every saved training step of `name` measured once per server: its circuits, and its heads' induction and
    previous-token scores on the same repeated random texts at every step (`analysis.circuits.measured_formation`,
    as the notes measure it). Each step's model is loaded for this and dropped. Shared by this view and the Training
    view."""
    return circ.measured_formation(name, checkpoints(name), load_model)


@st.cache_resource(show_spinner=False, max_entries=8)
def measured_path(name: str) -> tuple[Head, Head] | None:
    """(previous-token head, induction head) of `name`, found by measuring both patterns on repeated random texts
    (`circ.induction_path`, as the notes find them); None where the vocabulary has too few plain words."""
    model = get_model(name)
    try:
        texts = circ.repeated_texts(model)
    except ValueError:
        return None
    return circ.induction_path(*circ.induction_and_previous(model, texts))


@st.cache_resource(show_spinner=False, max_entries=32)
def causal(name: str, off: Head, ablation: str) -> circ.CausalCheck:
    return circ.causal_check(get_model(name), off, ablation=ablation)


def _by_kind(kind: str | None) -> dict:
    """The `kind` argument a model with cross-attention takes (its weights and embeddings per kind); none else."""
    return {} if kind is None else {"kind": kind}


@st.cache_resource(show_spinner=False, max_entries=8)
def embeddings(name: str, kind: str | None = None):
    """`Model.embeddings()` once per model (and kind): its labels take seconds to build for a 49k-token vocabulary."""
    return get_model(name).embeddings(**_by_kind(kind))


@st.cache_resource(show_spinner=False, max_entries=16)
def head_maps(name: str, layer: int, head: int, kind: str | None = None) -> dict:
    """One head's maps from the weights: the full token maps for a small vocabulary, the position map for learned
    positions, and what a big vocabulary needs to show one row at a time. `kind`: a model with cross-attention's
    Encoder, Decoder or Cross (layers numbered within it)."""
    model = get_model(name)
    w = model.head_weights(layer, **_by_kind(kind))
    emb = embeddings(name, kind)
    out = {"vocab": emb.labels, "rotary": w.rotary, "kv_head": w.kv_head[head],
           "full": len(emb.labels) <= FULL_MAP_VOCAB, "logits": emb.unembed is not None}
    wq, wk, wv, wo = w.w_q[head], w.w_k[head], w.w_v[head], w.w_o[head]  # (D, dh) x 3, (dh, D)
    if out["full"]:
        out["ov"] = circ.ov_token_map(emb.tokens, wv, wo, emb.unembed)  # (V, V)
        out["qk"] = circ.qk_token_map(emb.tokens, wq, wk)  # (V, V)
    if emb.positions is not None and not w.rotary:
        causal = model.causal if kind is None else kind == kinds.DECODER  # the decoder sees earlier targets only
        out["positions"] = circ.qk_position_map(emb.positions, wq, wk, causal=causal)  # (P, P)
    return out


# The token maps' colours end at this quantile of |value|: a few rows or columns far from the rest (tiny's OV map:
# the logits of <pad>, <unk> and <bos>, which it is never trained to predict, 4x its 99th percentile) would leave
# every other cell nearly white.
SATURATE = 0.99


def saturation_note(maps: dict, vocab: list[str], figures: dict) -> str:
    """What the token maps' colours mean when they saturate: the bound, the largest value, and the tokens whose
    rows or columns go past it most (the reason the rest would otherwise be white)."""
    parts = []
    for kind, fig in figures.items():
        bound, largest = fig.layout.meta["bound"], fig.layout.meta["largest"]
        if largest <= bound * 1.05:
            continue
        values = maps[kind.lower()].abs()  # (V, V)
        over = torch.maximum(values.amax(0), values.amax(1))  # (V,) each token's largest, as a row or a column
        worst = [md_safe(quoted(vocab[i], 12)) for i in over.topk(min(3, len(over))).indices.tolist()
                 if over[i] > bound]
        parts.append(f"{kind}: ±{bound:.2f} (the largest is {largest:.2f}, at {', '.join(worst)})")
    if not parts:
        return ""
    return (f"Colours end at the {SATURATE:.0%} quantile of |value| (cells beyond it take the end colour), so a few "
            f"extreme tokens do not wash out the rest: {'; '.join(parts)}. Hover a cell for its value.")


def left_out_words(c: circ.Circuits | None) -> str:
    """What the maps leave out, for the page's caption: `circuits.left_out_words` (the notebook's show_circuits
    says the same), as Markdown."""
    return md_safe(circ.left_out_words(c))


# What each kind of a model with cross-attention adds to what its maps leave out, for the page's caption.
KIND_WORDS = {
    kinds.ENCODER: "The encoder's heads write into the stream that cross-attention reads keys and values from, not "
                   "into the one the language-model head reads: their OV maps read the token embedding in the "
                   "unembedding's place, and the causal check switches an encoder head off.",
    kinds.DECODER: "The decoder's self-attention is one stack over the target: the cross-attention sublayers between "
                   "its layers are left out of its composition scores, as the MLPs are. No causal check here: it "
                   "measures induction over one text, the source.",
    kinds.CROSS: "Queries read the decoder's stream, keys and values the encoder's output (after its final norm): "
                 "the QK map reads both through the token embedding, and the OV map writes toward the target's "
                 "logits. No position map: queries and keys take their positions from two different stacks. No "
                 "causal check here: it measures induction over one text, the source.",
}


def _intro(c: circ.Circuits | None, kind: str | None = None) -> str:
    words = ("Read from the weights alone, no sentence is run: each head's query-key (QK) map says which token a query "
             "looks for, its value-output (OV) map what attending to a token writes; a composition score says how "
             "much of what an earlier head writes lies where a later head reads, through its queries, keys or values "
             f"(Elhage et al. 2021, *A Mathematical Framework for Transformer Circuits*). {left_out_words(c)}")
    if kind is None:
        return words + " The causal check below tests one path by switching the earlier head off."
    return f"{words} {kind}: {kinds.ABOUT[kind]}. {md_safe(KIND_WORDS[kind])}"


def render(ctx: ViewContext) -> None:
    st.subheader("Circuits in the weights")
    kind = None
    if ctx.model.has_cross_attention:  # the same Encoder / Decoder / Cross switch as the Layer view's grid
        kind = current_kind()
        st.segmented_control("Attention", kinds.KINDS, key=KIND_KEY, help=". ".join(
            f"{k}: {kinds.ABOUT[k]}" for k in kinds.KINDS) + ".")
    intro = st.empty()  # the caption, filled once the circuits say what this model's maps leave out
    intro.caption(_intro(None, kind))
    try:
        with st.spinner("Measuring every pair of heads from the weights (once per model; SmolLM2 takes seconds)"):
            c = model_circuits(ctx.name, kind)
    except UnavailableError as err:
        st.info(f"Circuits are not available for this model: {md_safe(str(err))}")
        return
    intro.caption(_intro(c, kind))
    head = one_head(ctx, c)
    composition(ctx, c, head)
    over_training(ctx, c)
    compare_two(ctx, c)


def _head_picker(c: circ.Circuits, label: str, key: str, default: Head) -> Head:
    heads = [(layer, h) for layer in range(c.n_layers) for h in range(c.n_heads)]
    index = heads.index(default) if default in heads else 0
    return st.selectbox(label, heads, index=index, format_func=head_name, key=key)


# -- one head -------------------------------------------------------------------------------------------------------
def _modes(c: circ.Circuits) -> list[str]:
    """The composition modes measured, keys first (cross-attention's circuits hold Q-composition only)."""
    return [m for m in ("k", "q", "v") if m in c.composition]


def _kind(c: circ.Circuits) -> str | None:
    return c.kind or None  # a model with cross-attention's kind; None for one stack


def one_head(ctx: ViewContext, c: circ.Circuits) -> Head:
    st.markdown("#### One head's maps" + (f" ({c.kind})" if c.kind else ""))
    best = c.top_pairs(_modes(c)[0], 1)
    default = best[0][1] if best else (min(ctx.layer, c.n_layers - 1), 0)
    layer, head = _head_picker(c, "Head", "circ_head", default)
    maps = head_maps(ctx.name, layer, head, _kind(c))
    copy = None if c.copying is None else float(c.copying[layer, head])
    metric_row("circ_head", [
        dict(label="OV copying score", value="n/a" if copy is None else f"{copy:+.2f}",
             help="sum(λ) / sum(|λ|) over the eigenvalues λ of the token-to-token OV map: +1 when attending to a "
                  "token raises that same token's logit along every direction, -1 when it lowers it"),
        ("QK effective rank", f"{float(c.qk_rank[layer, head]):.1f} of {c.d_head}"),
        ("OV effective rank", f"{float(c.ov_rank[layer, head]):.1f} of {c.d_head}")])
    name = head_name((layer, head))
    vocab = maps["vocab"]
    if maps["full"]:
        a, b = st.columns(2)
        # Without a language-model head the OV map is read through the token embedding (no logits to change).
        ov_title, ov_x = ("W_E W_V W_O W_U", "logit of") if maps["logits"] else ("W_E W_V W_O W_Eᵀ", "embedding of")
        ov = plotting.weight_map_figure(maps["ov"], vocab, vocab, f"{name} OV map {ov_title}",
                                        x_title=ov_x, y_title="attended token", name="ov map",
                                        saturate=SATURATE)
        qk = plotting.weight_map_figure(maps["qk"], vocab, vocab, f"{name} QK map W_E W_Q W_Kᵀ W_Eᵀ",
                                        x_title="key token", y_title="query token", name="qk map",
                                        saturate=SATURATE)
        a.plotly_chart(ov, width="stretch", key="circ_ov")
        b.plotly_chart(qk, width="stretch", key="circ_qk")
        diag = torch.diagonal(maps["ov"])
        st.caption(f"OV map: row = the token attended to, column = the logit it changes. A copying head has a red "
                   f"diagonal: here the diagonal is the row's largest entry for "
                   f"{float((maps['ov'].argmax(-1) == torch.arange(len(diag))).float().mean()):.0%} of the tokens. "
                   + saturation_note(maps, vocab, {"OV": ov, "QK": qk}))
    else:
        _top_tokens(ctx, maps, name, layer, head, _kind(c))
    if "positions" in maps:
        pos = maps["positions"]
        n = min(pos.shape[0], 64)
        labels = [str(i) for i in range(n)]
        profile = circ.offset_profile(pos[:n, :n], max_offset=8)
        left, right = st.columns([3, 2])
        left.plotly_chart(plotting.weight_map_figure(pos[:n, :n], labels, labels, f"{name} QK map of positions "
                                                     "W_P W_Q W_Kᵀ W_Pᵀ", x_title="key position",
                                                     y_title="query position", name="position map"),
                          width="stretch", key="circ_pos")
        right.markdown("**Mean score by offset** (key this many positions before the query)")
        right.table([{"offset": o, "mean score": f"{float(v):+.3f}"} for o, v in enumerate(profile)])
        before = pos[1:n, :n].nan_to_num(float("-inf")).argmax(-1) == torch.arange(n - 1)  # (n-1,)
        right.caption("A head that attends to the previous token from position alone shows a band just below the "
                      f"diagonal, and peaks at offset 1. Here the previous position scores highest for "
                      f"{float(before.float().mean()):.0%} of the query positions.")
    elif maps["rotary"]:
        st.caption("No position map: this model has no position embedding. Its queries and keys are rotated by "
                   "their positions after the projection (rotary embeddings), so the score of a query for a key "
                   "depends on their offset *and* on the content being rotated; the weights alone give no "
                   "position x position map. The QK map here is the one at offset 0.")
    elif c.kind == kinds.CROSS:
        st.caption("No position map: a cross-attention head's queries take their positions from the decoder's "
                   "stack and its keys from the encoder's.")
    else:
        st.caption("No position map: this model's positions do not enter as a learned embedding table.")
    st.plotly_chart(plotting.singular_values_figure(c.qk_singular[layer, head], c.ov_singular[layer, head],
                                                    float(c.qk_rank[layer, head]), float(c.ov_rank[layer, head]),
                                                    f"{name}: singular values of its QK and OV maps"),
                    width="stretch", key="circ_sv")
    return layer, head


def _top_tokens(ctx: ViewContext, maps: dict, name: str, layer: int, head: int, kind: str | None = None) -> None:
    """A big vocabulary: one row of the OV map, for a token of the sentence (the target's, for a decoder's
    self-attention head: the tokens it attends to)."""
    decoder = kind == kinds.DECODER
    ids = list(getattr(ctx.base, "target_ids", [])) if decoder else list(ctx.base.token_ids)
    tokens = list(getattr(ctx.base, "target_tokens", [])) if decoder else list(ctx.base.tokens)
    if not ids:
        st.caption("The vocabulary is too large for the full token maps, and this model reports no token ids.")
        return
    pos = st.selectbox("Input token (from the " + ("target)" if decoder else "sentence)"), range(len(ids)),
                       index=min(1, len(ids) - 1), format_func=lambda i: f"{i}: {visible(tokens[i], 24)}",
                       key="circ_token")
    model = get_model(ctx.name)
    w, emb = model.head_weights(layer, **_by_kind(kind)), embeddings(ctx.name, kind)
    row = circ.ov_token_map(emb.tokens, w.w_v[head], w.w_o[head], emb.unembed, rows=torch.tensor([ids[pos]]))[0]
    top = row.topk(TOP_TOKENS)
    labels = [maps["vocab"][i] for i in top.indices.tolist()]
    attended = quoted(tokens[pos])
    if emb.unembed is None:  # an encoder without its language-model head: no logits to raise
        title = f"{name}: the tokens its OV map writes toward most when it attends to {attended}"
        x_title = "dot product with the token's embedding, per unit of attention"
    else:
        title, x_title = f"{name}: the logits its OV map raises most when it attends to {attended}", None
    st.plotly_chart(plotting.top_tokens_figure(top.values, labels, title,
                                               **({"x_title": x_title} if x_title else {})),
                    width="stretch", key="circ_top")
    rank = int((row > row[ids[pos]]).sum())
    st.caption(f"The token itself is number {rank + 1:,} of {row.numel():,} in this row "
               "(number 1 would be a head that copies it)."
               + (" This model has no output layer (an encoder without its language-model head), so it has no "
                  "logits: the OV map is read through the token embedding in the unembedding's place, "
                  "W_E W_V W_O W_Eᵀ, as the copying score is. A high bar says the head writes in the direction of "
                  "that token's embedding, not that the model would predict it." if emb.unembed is None else ""))


# -- composition ----------------------------------------------------------------------------------------------------
def composition(ctx: ViewContext, c: circ.Circuits, head: Head) -> None:
    st.markdown("#### Which earlier heads each head reads from")
    if c.n_layers < 2:
        st.caption("One layer: there is no earlier head to compose with.")
        return
    if c.composition_note:
        st.caption(md_safe(c.composition_note))
    mode = st.radio("Through its", _modes(c), format_func=NAMES.get, horizontal=True, key="circ_mode")
    base = c.baseline[mode]
    scores = c.composition[mode]  # (L, H, L, H)
    pairs = c.top_pairs(mode, 8)
    left, right = st.columns([3, 2])
    marked = (pairs[0][0], pairs[0][1]) if pairs else None
    left.plotly_chart(plotting.composition_map_figure(
        scores, base.mean, f"{plotting.COMPOSITION_TITLES[mode]} (white = at or below random matrices, "
                           f"{base.mean:.3f})", marked=marked), width="stretch", key="circ_comp")
    right.markdown(f"**Highest {plotting.COMPOSITION_TITLES[mode]} scores**")
    right.table([{"from": head_name(a), "into": head_name(b), "score": f"{s:.3f}", "x random": f"{s / base.mean:.2f}"}
                 for a, b, s in pairs])
    right.caption(f"Random matrices of the same shapes score {base.mean:.3f} ± {base.std:.3f} (99th percentile "
                  f"{base.p99:.3f}, {base.n_pairs} pairs). A score far above it says the earlier head writes where "
                  "the later one reads; it does not say the path is used: the causal check below tests that.")
    layer, h = head
    if layer > 0:
        reads = scores[:layer, :, layer, h]  # (layer, H)
        order = reads.flatten().argsort(descending=True)[:3].tolist()
        words = ", ".join(f"{head_name((i // c.n_heads, i % c.n_heads))} ({float(reads.flatten()[i]):.3f})"
                          for i in order)
        st.caption(f"{head_name(head)} reads most, through its {NAMES[mode]}, from: {words}.")
    if c.kind not in ("", kinds.ENCODER):  # the check measures induction over one text: the encoder's, the source
        return
    causal_panel(ctx, c, pairs[0] if pairs else None)


def causal_panel(ctx: ViewContext, c: circ.Circuits, top) -> None:
    st.markdown("#### Causal check: switch the earlier head off")
    # By default the pair the check is about: the measured previous-token head and the induction head it may feed
    # (the strongest composition of all can be another pair, whose later head does no induction).
    with st.spinner("Finding the previous-token and induction heads on repeated random words"):
        path = measured_path(ctx.name) if c.n_layers > 1 else None
    first = path or ((top[0], top[1]) if top else ((0, 0), (1, 0)))
    a, b = st.columns(2)
    with a:
        off = _head_picker(c, "Switch off (earlier head)", "circ_off", first[0])
    with b:
        later = _head_picker(c, "Measure (later head)", "circ_later", first[1])
    try:
        with st.spinner("Running the repeated texts with and without it"):
            check = causal(ctx.name, off, "mean")
    except (InputError, UnavailableError, ValueError) as err:
        st.warning(f"No check: {md_safe(str(err))}")
        return
    on, cut = float(check.induction_on[later]), float(check.induction_off[later])
    st.markdown(f"**{head_name(later)}'s induction score: {on:.1%} with every head on, {cut:.1%} with "
                f"{head_name(off)} mean-ablated.**")
    st.caption(f"Measured on {len(check.texts)} texts of random words said twice (e.g. "
               f"\"{md_safe(check.texts[0][:80])}...\"): at a word's second occurrence, the attention on the word "
               "after its "
               f"first occurrence (Olsson et al. 2022). {head_name(off)} attends to the previous token "
               f"{float(check.previous_on[off]):.1%} on these texts. Mean ablation: its output is set to its mean "
               "over the model's example sentences.")
    st.plotly_chart(plotting.causal_check_figure(check.induction_on, check.induction_off,
                                                 "Every head's induction score", head_name(off)),
                    width="stretch", key="circ_causal")


# -- over training --------------------------------------------------------------------------------------------------
def over_training(ctx: ViewContext, c: circ.Circuits) -> None:
    st.markdown("#### Over training")
    base = trained_here(ctx.name)
    steps = checkpoints(base)
    if not steps:
        st.caption("No saved training steps to show (run `make train`).")
        return
    if not checkpoints(ctx.name):
        st.caption(f"This model has no saved training steps; shown for the in-repo `{base}` model.")
    try:
        per_step = [step_circuits(f"{base}@{s}") for s in steps]
    except (UnavailableError, ModelLoadError) as err:
        st.caption(f"Not available: {md_safe(str(err))}")
        return
    last = per_step[-1]
    top = last.top_pairs("k", 1)
    # By default the measured induction path at the last step (as in the causal check above), else the top pair.
    path = measured_path(base) if last.n_layers > 1 else None
    default = path or (top[0] if top else ((0, 0), (min(1, last.n_layers - 1), 0), 0.0))
    a, b = st.columns(2)
    with a:
        earlier = _head_picker(last, "From (earlier head)", "circ_t_from", default[0])
    with b:
        later = _head_picker(last, "Into (later head)", "circ_t_into", default[1])
    if earlier[0] >= later[0]:
        st.caption("Pick an earlier head from an earlier layer than the later head.")
        return
    pairs = {f"{plotting.COMPOSITION_TITLES[m]} {head_name(earlier)} → {head_name(later)}":
             np.array([float(x.composition[m][earlier + later]) for x in per_step]) for m in ("k", "q", "v")}
    copying = np.stack([x.copying.numpy() for x in per_step]) if last.copying is not None else None
    pattern = None
    evidence = training_evidence(base)
    if evidence is not None and evidence.steps == steps and all(
            r in s.scores for s in evidence.per_step for r in ("induction", "previous")):
        pattern = {f"{head_name(later)} induction (probe file)":
                   np.array([s.scores["induction"][later[0]][later[1]] for s in evidence.per_step]),
                   f"{head_name(earlier)} previous token (probe file)":
                   np.array([s.scores["previous"][earlier[0]][earlier[1]] for s in evidence.per_step])}
    st.plotly_chart(plotting.circuits_timeline_figure(
        steps, pairs, last.baseline["k"].mean,
        copying, pattern),
        width="stretch", key="circ_timeline")
    rows = [{"step": s, "K-composition": f"{float(x.composition['k'][earlier + later]):.3f}",
             f"{head_name(later)} copying": "n/a" if x.copying is None else f"{float(x.copying[later]):+.2f}"}
            for s, x in zip(steps, per_step)]
    if pattern:
        for row, value in zip(rows, next(iter(pattern.values()))):
            row[f"{head_name(later)} induction"] = f"{value:.0%}"
    st.table(rows)
    st.caption(f"Random matrices score {last.baseline['k'].mean:.3f}. The induction scores come from the probe file "
               "(`make probe`), measured on held-out repeated sequences at each step.")
    every_seed(base, last.baseline["k"].mean)


def every_seed(base: str, baseline: float) -> None:
    """The same recipe under every seed: each seed's own top K-composition pair (found at its last step, since a
    seed puts the roles on other heads) against the step."""
    names = seeds(base)
    if len(names) < 2:
        return
    st.markdown("**Every seed of the same recipe**: each seed's own top K-composition pair at its last step, "
                "measured at every saved step")
    pairs, rows, all_steps = {}, [], []
    for name in names:
        steps = checkpoints(name)
        if not steps:
            continue
        try:
            per_step = [step_circuits(f"{name}@{s}") for s in steps]
        except (UnavailableError, ModelLoadError) as err:
            st.caption(f"{name}: {md_safe(str(err))}")
            continue
        top = per_step[-1].top_pairs("k", 1)
        if not top:
            continue
        earlier, later, _ = top[0]
        values = {s: float(x.composition["k"][earlier + later]) for s, x in zip(steps, per_step)}
        pairs[f"{name}: {head_name(earlier)} → {head_name(later)}"] = values
        all_steps = sorted(set(all_steps) | set(steps))
        copy = per_step[-1].copying
        rows.append({"model": name, "pair": f"{head_name(earlier)} → {head_name(later)}",
                     "first step": f"{values[steps[0]]:.3f} (step {steps[0]})",
                     "last step": f"{values[steps[-1]]:.3f} (step {steps[-1]})",
                     "later head's copying": "n/a" if copy is None else f"{float(copy[later]):+.2f}"})
    if not pairs:
        return
    lines = {k: np.array([v.get(s, np.nan) for s in all_steps]) for k, v in pairs.items()}  # NaN: step not saved
    st.plotly_chart(plotting.circuits_timeline_figure(all_steps, lines, baseline, None, height=420),
                    width="stretch", key="circ_seeds")
    st.table(rows)


# -- compare two ----------------------------------------------------------------------------------------------------
def compare_two(ctx: ViewContext, c: circ.Circuits) -> None:
    st.markdown("#### Compare two steps or models")
    base = trained_here(ctx.name)
    steps = [f"{base}@{s}" for s in checkpoints(base)]
    options = steps + ([ctx.name] if ctx.name not in steps else [])
    if len(options) < 2:
        st.caption("Only one model to compare.")
        return
    a, b = st.columns(2)
    first = a.selectbox("Left", options, index=0, key="circ_cmp_a")
    # By default the first and last saved steps: a model of another shape can be picked, and is refused with a reason.
    second = b.selectbox("Right", options, index=max(1, len(steps) - 1), key="circ_cmp_b")
    mode = st.radio("Composition through", _modes(c), format_func=NAMES.get, horizontal=True,
                    key="circ_cmp_mode")
    try:
        left = model_circuits(first, _kind(c)) if first == ctx.name else step_circuits(first)
        right = model_circuits(second, _kind(c)) if second == ctx.name else step_circuits(second)
        circ.check_same_shape(left, right)
    except (UnavailableError, ModelLoadError, ValueError) as err:
        st.warning(md_safe(str(err)))
        return
    cols = st.columns(3)
    for col, x, key in ((cols[0], left, "a"), (cols[1], right, "b")):
        col.plotly_chart(plotting.composition_map_figure(x.composition[mode], x.baseline[mode].mean,
                                                         f"{x.name}: {plotting.COMPOSITION_TITLES[mode]}", height=420),
                         width="stretch", key=f"circ_cmp_map_{key}")
    cols[2].plotly_chart(plotting.difference_map_figure(left.composition[mode], right.composition[mode],
                                                        f"{right.name} minus {left.name}", height=420),
                         width="stretch", key="circ_cmp_diff")
    if left.copying is not None and right.copying is not None:
        cols = st.columns(3)
        for col, x, key in ((cols[0], left, "a"), (cols[1], right, "b")):
            col.plotly_chart(plotting.signed_layer_head_map(x.copying, f"{x.name}: OV copying score", "copying",
                                                            fmt="+.2f"), width="stretch", key=f"circ_copy_{key}")
        cols[2].plotly_chart(plotting.signed_layer_head_map(right.copying - left.copying, "difference", "change",
                                                            fmt="+.2f"), width="stretch", key="circ_copy_diff")
