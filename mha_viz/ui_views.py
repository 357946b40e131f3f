"""Streamlit sections beyond one layer's grid: overview, compare, effects, similarity, scores, rollout, export."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import streamlit as st
import torch

from . import analysis, plotting
from .contract import AttentionRun, Head, Model
from .experiments import effect_measure, head_importance
from .ui import _md_safe, _top, get_model, get_run, off_set, prediction_position

MAX_COMPARE = 4


def head_name(head: Head) -> str:
    return f"L{head[0]} H{head[1]}"


def parse_head(text: str) -> Head:
    layer, head = text.replace("L", "").replace("H", "").split()
    return int(layer), int(head)


# -- display transforms (hide special tokens, merge word pieces) ----------------------------------------------
def display(run: AttentionRun, hide_special: bool, merge: bool) -> tuple[list[str], torch.Tensor]:
    """Tokens and attentions (L, H, Q, K) as the user asked to see them. The model run itself is unchanged."""
    tokens, att = list(run.tokens), run.attentions  # (L, H, Q, K)
    if hide_special and run.special and len(run.special) < len(tokens):
        keep = torch.ones(len(tokens), dtype=torch.bool)  # (T,)
        keep[list(run.special)] = False
        att = analysis.hide_positions(att, keep)  # (L, H, Q', K')
        tokens = [t for i, t in enumerate(tokens) if keep[i]]
    if merge:
        special = () if hide_special else run.special
        groups = analysis.word_groups(tokens, special=special)
        if len(groups) < len(tokens):
            att = analysis.merge_word_pieces(att, groups)  # (L, H, W, W)
            tokens = analysis.word_labels(tokens, groups)
    return tokens, att


def display_notes(run: AttentionRun, hide_special: bool, merge: bool) -> None:
    notes = []
    if hide_special and run.special:
        notes.append("special tokens are hidden and each row is renormalised over the tokens shown, so weights "
                     "are shares of the attention that went to visible tokens")
    if merge:
        notes.append("word pieces are merged into words: attention to a word is the sum over its pieces, "
                     "attention from a word the mean over its pieces (Clark et al. 2019)")
    if notes:
        st.caption("Display: " + "; ".join(notes) + ".")


# -- all layers at a glance -----------------------------------------------------------------------------------
def overview(model: Model, model_name: str, tokens: list[str], att: torch.Tensor) -> Head | None:
    """Every head in a layers x heads grid, one tiled image. Returns the head the user picked, if any."""
    st.caption(f"All {model.n_layers * model.n_heads} heads: rows are layers, columns heads. Each tile is scaled "
               "to its own maximum so faint patterns stay visible; grey tiles are switched off. "
               "Click a tile to focus it.")
    if len(tokens) > plotting.MAX_TILE:
        st.caption(f"With {len(tokens)} tokens each tile is shrunk to {plotting.MAX_TILE} x {plotting.MAX_TILE} cells "
                   "(each cell shows the largest weight it covers); the focused head below is full size.")
    options = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    # The chart's selection is in session state before the chart is drawn, so this run can already focus it.
    # A click is applied once: the selection lingers across reruns and must not undo a later pick below.
    clicked = _clicked_head(st.session_state.get("overview"))
    if clicked in options and clicked != st.session_state.get("_overview_click"):
        st.session_state["_overview_click"] = clicked
        st.session_state["focus_pick"] = clicked
    if st.session_state.get("focus_pick") not in options:
        st.session_state["focus_pick"] = options[0]
    fig = plotting.tiled_figure(
        att, [f"L{i}" for i in range(model.n_layers)], [f"H{h}" for h in range(model.n_heads)],
        off=off_set(model_name), selected=st.session_state["focus_pick"], zscale="head",
    )
    st.plotly_chart(fig, width="stretch", key="overview", on_select="rerun", selection_mode="points",
                    config={"displaylogo": False})
    return st.selectbox("Focused head", options, format_func=head_name, key="focus_pick")


def _clicked_head(state) -> Head | None:
    """(layer, head) from the overview's selection state: the customdata of a clicked tile centre."""
    selection = state.get("selection", {}) if isinstance(state, dict) else getattr(state, "selection", None)
    points = (selection.get("points") if isinstance(selection, dict) else getattr(selection, "points", None)) or []
    for point in points:
        data = point.get("customdata") if isinstance(point, dict) else None
        if data is not None and len(data) == 2:
            return int(data[0]), int(data[1])
    return None


def focused_head(tokens: list[str], att: torch.Tensor, head: Head, off: bool) -> None:
    layer, h = head
    fig = plotting.head_figure(att[layer, h], tokens, head_name(head), off=off, size=460, colorbar=True)
    st.plotly_chart(fig, width="stretch", key="focused_fig")


# -- compare ------------------------------------------------------------------------------------------------
def compare(model: Model, model_name: str, run: AttentionRun, tokens: list[str], att: torch.Tensor,
            hide_special: bool, merge: bool) -> None:
    options = [head_name((layer, head)) for layer in range(model.n_layers) for head in range(model.n_heads)]
    default = [o for o in st.session_state.get("compare", []) if o in options][:MAX_COMPARE] or options[:2]
    st.session_state["compare_pick"] = [o for o in st.session_state.get("compare_pick", default) if o in options] \
        or default
    picked = st.multiselect(f"Heads to compare (2–{MAX_COMPARE}, any layers)", options, key="compare_pick",
                            max_selections=MAX_COMPARE)
    st.session_state["compare"] = picked
    if len(picked) < 1:
        st.info("Pick at least one head.")
        return
    heads = [parse_head(p) for p in picked]
    zmax = max(float(att[layer, head].max()) for layer, head in heads) or 1.0
    st.caption(f"Same colour scale for all: 0 to {zmax:.2f} (the largest weight among these heads).")
    _compare_row(heads, tokens, att, [(h in off_set(model_name)) for h in heads], zmax, "", "cmp_row")
    if len(heads) >= 2:
        first = heads[0]
        cols = st.columns(len(heads) - 1)
        for col, other in zip(cols, heads[1:]):
            with col:
                diff = att[other] - att[first]  # (Q, K)
                st.plotly_chart(plotting.diff_figure(diff, tokens, f"{head_name(other)} − {head_name(first)}"),
                                width="stretch", key=f"cmpdiff|{other}")
        distance = analysis.js_divergence(att[heads[0]], att[heads[1]]).mean()
        st.caption(f"Mean Jensen-Shannon divergence between {picked[0]} and {picked[1]} over query rows: "
                   f"{float(distance):.3f} bits (0 = identical patterns, 1 = no overlap).")

    st.markdown("**The same heads on a second sentence**")
    other_text = st.text_input("Second sentence", key="second_text",
                               placeholder="Type another sentence to see these heads on it")
    if other_text.strip():
        try:
            other = get_run(model_name, other_text[:20_000], tuple(sorted(off_set(model_name))))
        except Exception as err:
            st.warning(_md_safe(str(err)))
            return
        other_tokens, other_att = display(other, hide_special, merge)
        _compare_row(heads, other_tokens, other_att, [False] * len(heads), zmax, ", second sentence", "cmp_row2")


def _compare_row(heads: list[Head], tokens: list[str], att: torch.Tensor, off: list[bool], zmax: float,
                 suffix: str, key: str) -> None:
    """The chosen heads side by side in one figure, on one colour scale, each as large as the page allows."""
    patterns = torch.stack([att[layer, head] for layer, head in heads])  # (N, Q, K)
    fig = plotting.heads_row_figure(patterns, tokens, [head_name(h) + suffix for h in heads], off, zmax=zmax,
                                    height=int(900 / max(len(heads), 2)))
    st.plotly_chart(fig, width="stretch", key=key)


# -- ablation effects ----------------------------------------------------------------------------------------
def effects(model: Model, model_name: str, text: str, base: AttentionRun, run: AttentionRun) -> None:
    kind = model.info.kind
    heads_off = tuple(sorted(off_set(model_name)))
    if base.logits is not None:
        positions = list(range(len(base.tokens)))
        default = prediction_position(model, base)
        if kind == "masked-lm":
            st.caption(f"Masked LM: put {getattr(model, 'mask_token', None) or 'the mask token'} in the sentence "
                       "to predict that word; its predictions before and after ablation are compared.")
        if default is None:
            default = len(positions) - 1
        position = st.selectbox(
            "Prediction at position", positions, index=default,
            format_func=lambda i: f"{i}: {base.tokens[i]!r}", key="pred_pos",
            help="For a causal LM, position i predicts token i+1; the last position predicts what comes next.",
        )
        kl = analysis.next_token_kl(base.logits, run.logits, position)
        before, after = _top(model, base.logits[position]), _top(model, run.logits[position])
        c1, c2 = st.columns([1, 2])
        with c1:
            st.metric("KL(all on ‖ heads off)", f"{kl:.4f} nats")
            rows = [{"rank": i + 1, "before": f"{_md_safe(w)} ({p:.1%})", "after": f"{_md_safe(a)} ({q:.1%})"}
                    for i, ((w, p), (a, q)) in enumerate(zip(before, after))]
            st.table(rows)
        with c2:
            st.plotly_chart(plotting.predictions_figure(before, after, f"Top-5 at position {position}"),
                            width="stretch", key="pred_fig_fx")
    else:
        cos = analysis.cosine_change(base.output, run.output)
        st.metric("Cosine similarity of sentence embedding (before vs after)", f"{cos:.5f}")
    if not heads_off:
        st.info("All heads are on, so nothing differs yet. Switch heads off in the layer view, or compute the "
                "importance map below.")
    else:
        shift = analysis.pattern_shift(base.attentions, run.attentions)  # (L, H)
        st.plotly_chart(plotting.layer_head_map(shift, "How much each head's pattern moved (mean JS over query rows)",
                                                "JS (bits)", off=set(heads_off)),
                        width="stretch", key="shift_map")
        options = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
        top = int(shift.flatten().argmax())
        pick = st.selectbox("Head to inspect", options, index=top, format_func=head_name, key="shift_pick")
        layer, head = pick
        c1, c2, c3 = st.columns(3)
        zmax = float(max(base.attentions[layer, head].max(), run.attentions[layer, head].max()))
        c1.plotly_chart(plotting.head_figure(base.attentions[layer, head], base.tokens, f"{head_name(pick)} all on",
                                             zmax=zmax, size=340), width="stretch", key="fx_base")
        c2.plotly_chart(plotting.head_figure(run.attentions[layer, head], run.tokens, f"{head_name(pick)} heads off",
                                             zmax=zmax, size=340), width="stretch", key="fx_abl")
        c3.plotly_chart(plotting.diff_figure(run.attentions[layer, head] - base.attentions[layer, head], base.tokens,
                                             f"{head_name(pick)} change"), width="stretch", key="fx_diff")
    importance_section(model, model_name, text, heads_off)


def importance_section(model: Model, model_name: str, text: str, heads_off: tuple[Head, ...]) -> None:
    st.markdown("**Head importance for this input**")
    measure = effect_measure(model)
    st.caption(f"Each head is switched off alone (on top of the heads already off) and the output change is "
               f"measured as {'KL of the next-token distribution at the last position' if measure == 'KL' else '1 − cosine similarity of the sentence embedding'}. "
               "One batched forward pass per chunk of heads.")
    key = (model_name, text, heads_off)
    store = st.session_state.setdefault("importance", {})
    if st.button("Compute head importance", key="imp_btn"):
        bar = st.progress(0.0, text="Ablating one head at a time...")
        store.clear()
        store[key] = head_importance(model, text, frozenset(heads_off),
                                     progress=lambda f: bar.progress(f, text=f"Ablating heads... {f:.0%}"))
        bar.empty()
    if key in store:
        st.plotly_chart(plotting.layer_head_map(store[key], "Output change when each head alone is off", measure,
                                                off=set(heads_off), fmt=".4f"),
                        width="stretch", key="imp_map")


# -- similarity and scores ----------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=16)
def _distance(_att: torch.Tensor, key: tuple) -> tuple[np.ndarray, np.ndarray]:
    dist = analysis.head_distance(_att)  # (N, N)
    order = analysis.similarity_order(dist)  # (N,)
    return dist.numpy(), order.numpy()


def similarity(model: Model, att: torch.Tensor, cache_key: tuple) -> None:
    dist, order = _distance(att, cache_key)
    n_heads = model.n_heads
    names = [f"L{i // n_heads} H{i % n_heads}" for i in order]
    ordered = dist[np.ix_(order, order)]
    import plotly.graph_objects as go

    fig = go.Figure(go.Heatmap(z=ordered.astype(np.float32), x=names, y=names, colorscale="Viridis_r",
                               colorbar=dict(title=dict(text="JS (bits)")),
                               hovertemplate="%{y} vs %{x}<br>mean JS: %{z:.3f}<extra></extra>"))
    fig.update_layout(template="none", height=min(900, 200 + 6 * len(names)), yaxis=dict(autorange="reversed"),
                      margin=dict(l=60, r=10, t=30, b=60), title="Head-to-head pattern distance (similar heads sit together)")
    # Plotly reports no clicks on heatmap cells (only on scatter points), and an overlay of N^2 points would be
    # 73k for SmolLM2: a pair is picked below instead; hover names the pair under the pointer.
    st.plotly_chart(fig, width="stretch", key="sim_map")
    c1, c2 = st.columns(2)
    a = c1.selectbox("Or pick two heads", names, key="sim_a")
    b = c2.selectbox("and", names, index=min(1, len(names) - 1), key="sim_b")
    ia, ib = names.index(a), names.index(b)
    st.caption(f"Mean JS divergence between {a} and {b}: {ordered[ia, ib]:.3f} bits.")
    st.button("Compare these two", key="sim_cmp", on_click=_go_compare, args=(a, b))


def _go_compare(a: str, b: str) -> None:
    # A callback: it runs before the page is drawn, so it may set the View radio's own state.
    st.session_state["compare_pick"] = [a, b]
    st.session_state["compare"] = [a, b]
    st.session_state["view"] = "Compare"


def scores_table(model: Model, run: AttentionRun) -> dict[str, torch.Tensor]:
    causal = model.info.kind == "causal-lm"
    special = analysis.special_mask(run.tokens, run.special)
    ids = torch.tensor(run.token_ids) if run.token_ids else None
    scores = analysis.pattern_scores(run.attentions, ids, special, causal)
    base = analysis.uniform_baselines(len(run.tokens), causal, ids, special)
    st.caption("Measured on this input: the share of each head's attention that goes to each kind of position, "
               "averaged over query rows; the last row is what uniform attention would give. These are "
               "measurements, not roles: run them over several sentences to see how much they vary.")
    rows = []
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            rows.append({"head": head_name((layer, head)),
                         **{name: _fmt(scores[name][layer, head]) for name in analysis.SCORE_NAMES}})
    rows.append({"head": "uniform baseline", **{name: _fmt(torch.tensor(v)) for name, v in base.items()}})
    st.dataframe(rows, hide_index=True, height=320)
    return scores


def _fmt(value: torch.Tensor) -> float | None:
    v = float(value)
    return None if v != v else round(v, 3)


def scores_across(model: Model, model_name: str, sentences: list[str]) -> None:
    if not st.button(f"Run the scores over {len(sentences)} example sentences", key="scores_multi"):
        return
    causal = model.info.kind == "causal-lm"
    stack = {name: [] for name in analysis.SCORE_NAMES}
    bar = st.progress(0.0, text="Scoring...")
    for i, text in enumerate(sentences):
        run = get_run(model_name, text, ())
        special = analysis.special_mask(run.tokens, run.special)
        ids = torch.tensor(run.token_ids) if run.token_ids else None
        for name, value in analysis.pattern_scores(run.attentions, ids, special, causal).items():
            stack[name].append(value)
        bar.progress((i + 1) / len(sentences))
    bar.empty()
    rows = []
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            row = {"head": head_name((layer, head))}
            for name in ("previous", "first", "self", "special", "entropy"):
                values = torch.stack(stack[name])[:, layer, head]  # (S,)
                values = values[~values.isnan()]
                row[name] = f"{float(values.mean()):.2f} ± {float(values.std()):.2f}" if len(values) > 1 else "—"
            rows.append(row)
    st.caption(f"Mean ± standard deviation over {len(sentences)} sentences. A large spread means the pattern "
               "depends on the input.")
    st.dataframe(rows, hide_index=True, height=320)


# -- rollout and norm view -----------------------------------------------------------------------------------
def rollout_and_norms(model: Model, model_name: str, text: str, run: AttentionRun, layer: int) -> None:
    heads_off = frozenset(off_set(model_name))
    keep = torch.ones(model.n_layers, model.n_heads)  # (L, H)
    for l, h in heads_off:
        keep[l, h] = 0
    rolled = analysis.rollout(run.attentions, keep)  # (L, Q, K)
    st.markdown(f"**Attention rollout through layer {layer}** (Abnar & Zuidema 2020)")
    st.caption("Rollout multiplies the head-averaged attention of every layer up to this one, with the residual "
               "connection counted as half, to estimate how much each input token flows into each position. "
               "It ignores value vectors and MLPs: an estimate, not a measurement of importance.")
    c1, c2 = st.columns(2)
    c1.plotly_chart(plotting.head_figure(run.attentions[layer].mean(0), run.tokens, f"L{layer} raw, mean of heads",
                                         size=380), width="stretch", key="roll_raw")
    c2.plotly_chart(plotting.head_figure(rolled[layer], run.tokens, f"rollout through L{layer}", size=380),
                    width="stretch", key="roll_fig")
    st.markdown("**Value-weighted norms** ‖α_ij f(x_j)‖ (Kobayashi et al. 2020)")
    st.caption("Weights each attention arrow by the size of what it carries: the value vector of token j passed "
               "through this head's slice of the output projection. A large weight on a token whose vector is "
               "small moves little.")
    inputs = _norm_inputs(model_name, text, tuple(sorted(heads_off)))
    if inputs is None:
        st.info("The norm view is not available for this architecture (its output projection was not found).")
        return
    values, w_o = inputs
    head = st.selectbox("Head", range(model.n_heads), format_func=lambda h: f"L{layer} H{h}", key="norm_head")
    norms = analysis.norm_view(run.attentions[layer], values[layer], w_o[layer])  # (H, Q, K)
    c1, c2 = st.columns(2)
    c1.plotly_chart(plotting.head_figure(run.attentions[layer, head], run.tokens, f"L{layer} H{head} weights α",
                                         size=380), width="stretch", key="norm_raw")
    c2.plotly_chart(plotting.head_figure(norms[head], run.tokens, f"L{layer} H{head} ‖α f(x)‖", size=380,
                                         colorbar=True), width="stretch", key="norm_fig")


@st.cache_resource(show_spinner=False, max_entries=8)
def _norm_inputs(model_name: str, text: str, heads_off: tuple[Head, ...]):
    model = get_model(model_name)
    fn = getattr(model, "norm_inputs", None)
    return None if fn is None else fn(text, heads_off)


# -- trained vs untrained ------------------------------------------------------------------------------------
def twins(text: str, layer: int) -> None:
    st.caption("The same architecture and the same sentence: on the left the weights after training, on the right "
               "the seeded initialisation they started from. Structure in the patterns comes from learning.")
    try:
        trained = get_run("tiny", text, ())
        untrained = get_run("tiny-untrained", text, ())
    except Exception as err:
        st.warning(str(err))
        return
    n_layers = trained.attentions.shape[0]
    layer = min(layer, n_layers - 1)
    for name, run in (("trained", trained), ("untrained", untrained)):
        st.markdown(f"**tiny {name}, layer {layer}**")
        n_heads = run.attentions.shape[1]
        fig = plotting.heads_row_figure(run.attentions[layer], run.tokens, [f"L{layer} H{h}" for h in range(n_heads)],
                                        [False] * n_heads, height=int(900 / max(n_heads, 1)))
        st.plotly_chart(fig, width="stretch", key=f"twin|{name}")


# -- export --------------------------------------------------------------------------------------------------
def export(model: Model, run: AttentionRun, scores: dict | None = None) -> None:
    att = run.attentions.numpy()  # (L, H, Q, K)
    buf = io.BytesIO()
    np.savez_compressed(buf, attentions=att, tokens=np.array(run.tokens, dtype=object).astype(str),
                        ablated=np.array(sorted(run.ablated), dtype=np.int64).reshape(-1, 2))
    c1, c2, c3 = st.columns(3)
    c1.download_button("Attention (NPZ)", buf.getvalue(), file_name="attention.npz", mime="application/octet-stream")
    table = _csv(run)
    if table is None:
        c2.caption(f"CSV is offered up to {CSV_MAX_CELLS:,} weights; this run has {run.attentions.numel():,}. "
                   "Use the NPZ (numpy.load) instead.")
    else:
        c2.download_button("Attention (CSV, long format)", table, file_name="attention.csv", mime="text/csv")
    payload = {"model": model.info.name, "tokens": run.tokens, "ablated": sorted(run.ablated),
               "shape": "layer, head, query, key"}
    if att.size <= CSV_MAX_CELLS:
        payload["attentions"] = np.round(att, 5).tolist()
    else:
        payload["attentions_note"] = "too large for JSON; download the NPZ"
    if scores:
        payload["scores"] = {name: [[None if v != v else round(v, 4) for v in row] for row in value.tolist()]
                             for name, value in scores.items()}
    c3.download_button("Attention and scores (JSON)", json.dumps(payload), file_name="attention.json",
                       mime="application/json")
    st.caption("Every heatmap also has a camera button (top right, on hover) that saves it as PNG.")


CSV_MAX_CELLS = 2_000_000  # past this a CSV is hundreds of MB; the NPZ holds the same numbers compactly


def _csv(run: AttentionRun) -> str | None:
    att = run.attentions  # (L, H, Q, K)
    if att.numel() > CSV_MAX_CELLS:
        return None
    n_layers, n_heads, nq, nk = att.shape
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["layer", "head", "query_pos", "query_token", "key_pos", "key_token", "weight"])
    flat = att.reshape(-1).tolist()
    i = 0
    for layer in range(n_layers):
        for head in range(n_heads):
            for q in range(nq):
                for k in range(nk):
                    writer.writerow([layer, head, q, run.tokens[q], k, run.tokens[k], round(flat[i], 6)])
                    i += 1
    return out.getvalue()


# -- ground truth (in-repo tiny model) ------------------------------------------------------------------------
def ground_truth_panel(run: AttentionRun) -> None:
    """For the tiny model: where the generator's grammar says the relations are in this text, and how much
    attention each head puts there, next to what uniform attention would put there."""
    from . import probes
    from .corpus import ground_truth

    truth = ground_truth(run.tokens)
    st.markdown("**Ground truth on this sentence** (the tiny model's corpus grammar knows where the relations are)")
    measures = [probes.previous_token_score(run.attentions)] if len(run.tokens) > 2 else []
    described = ["from each token to the one before it"]
    if truth.subjects:
        measures.append(probes.subject_score(run.attentions, list(truth.subjects)[-1]))
        subject, verb = truth.subjects[-1]
        described.append(_md_safe(f"from '{run.tokens[verb - 1]}' (where '{run.tokens[verb]}' is predicted) "
                                  f"to its subject '{run.tokens[subject]}'"))
    if truth.repeats:
        measures.append(probes.induction_score(run.attentions, list(truth.repeats)))
        described.append("from a repeated word to the word that followed its first mention")
    if len(measures) < 2:
        st.caption("No agreement clause or repeated word of the corpus's vocabulary in this text: try one of the "
                   "example buttons.")
    rows = []
    for measure, where in zip(measures, described):
        (layer, head), value = measure.best()
        rows.append({"relation": measure.relation, "attention measured": where,
                     "top head": head_name((layer, head)), "its attention there": f"{value:.0%}",
                     "uniform attention": f"{measure.baseline:.0%}"})
    if rows:
        st.table(rows)
        st.caption("Measured on this input only. The tests measure the same heads on held-out generated texts "
                   "(tests/test_probes.py) and check causally, by ablation, that the subject heads are used.")
