"""Similarity & scores: heads x heads pattern distance, every measured score in a table, their spread over
example sentences, and (where the model's training data defines them) the relations' ground truth."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from mha_viz import analysis, measures
from mha_viz.analysis import pairs
from mha_viz.app.cache import get_run
from mha_viz.app.common import chart_config, head_name, md_safe, quoted
from mha_viz.app.context import ViewContext
from mha_viz.contract import AttentionRun, Model


def render(ctx: ViewContext) -> None:
    similarity(ctx.model, ctx.att, (ctx.name, ctx.text, tuple(sorted(ctx.heads_off)), ctx.hide_special, ctx.merge))
    ground_truth_panel(ctx.model, ctx.run)
    scores_table(ctx.model, ctx.run)
    scores_across(ctx.model, ctx.name, [text for _, text, _ in ctx.model.examples()] + [ctx.text])


@st.cache_data(show_spinner=False, max_entries=16)
def _distance(_att: torch.Tensor, key: tuple) -> tuple[np.ndarray, np.ndarray]:
    dist = analysis.head_distance(_att)  # (N, N)
    order = analysis.similarity_order(dist)  # (N,)
    return dist.numpy(), order.numpy()


def similarity(model: Model, att: torch.Tensor, cache_key: tuple) -> None:
    dist, order = _distance(att, cache_key)
    n_heads = model.n_heads
    names = [head_name((int(i) // n_heads, int(i) % n_heads)) for i in order]
    ordered = dist[np.ix_(order, order)]
    fig = go.Figure(go.Heatmap(z=ordered.astype(np.float32), x=names, y=names, colorscale="Viridis_r",
                               colorbar=dict(title=dict(text="JS (bits)")),
                               hovertemplate="%{y} vs %{x}<br>mean JS: %{z:.3f}<extra></extra>"))
    fig.update_layout(template="none", height=min(900, 200 + 6 * len(names)), yaxis=dict(autorange="reversed"),
                      margin=dict(l=60, r=10, t=30, b=60),
                      title="Head-to-head pattern distance (similar heads sit together)")
    # Plotly reports no clicks on heatmap cells (only on scatter points), and an overlay of N^2 points would be
    # 73k for SmolLM2: a pair is picked below instead; hover names the pair under the pointer.
    st.plotly_chart(fig, width="stretch", key="sim_map", config=chart_config())
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


def shown_scores(model: Model) -> list[str]:
    """The scores the tables show: every score, but "next token" for a causal model, whose tokens cannot look at
    a later one (its column would be 0% for every head, a number that measures nothing)."""
    return [name for name in analysis.SCORE_NAMES if not (model.causal and name == "next")]


def scores_table(model: Model, run: AttentionRun) -> dict[str, torch.Tensor]:
    scores, base = analysis.run_scores(run, model.causal)
    names = shown_scores(model)
    st.caption("Measured on this input: the share of each head's attention that goes to each kind of position, "
               "averaged over query rows; the last row is what uniform attention would give. These are "
               "measurements, not roles: run them over several sentences to see how much they vary."
               + (" No \"next token\" column: a causal model's token cannot attend to a later one."
                  if model.causal else ""))
    rows = []
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            rows.append({"head": head_name((layer, head)),
                         **{name: _fmt(scores[name][layer, head]) for name in names}})
    rows.append({"head": "uniform baseline", **{name: _fmt(torch.tensor(base[name])) for name in names}})
    st.dataframe(rows, hide_index=True, height=320, column_config=score_columns(names))
    return scores


def score_columns(names: list[str] | None = None) -> dict:
    """Each score under the one name the badges use, shares of attention as percentages; spread as 0-1."""
    return {name: st.column_config.NumberColumn(
        measures.get(name).column, format="percent" if measures.get(name).is_share else "%.2f",
        help=f"{measures.get(name).meaning}. {measures.get(name).citation}")
        for name in (analysis.SCORE_NAMES if names is None else names)}


def _fmt(value: torch.Tensor) -> float | None:
    v = float(value)
    return None if v != v else round(v, 3)


def scores_across(model: Model, model_name: str, sentences: list[str]) -> None:
    if not st.button(f"Run the scores over {len(sentences)} example sentences", key="scores_multi"):
        return
    names = shown_scores(model)
    stack = {name: [] for name in names}
    bar = st.progress(0.0, text="Scoring...")
    for i, text in enumerate(sentences):
        run = get_run(model_name, text)
        for name, value in analysis.run_scores(run, model.causal)[0].items():
            if name in stack:
                stack[name].append(value)
        bar.progress((i + 1) / len(sentences))
    bar.empty()
    rows = []
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            row = {"head": head_name((layer, head))}
            for name in names:
                values = torch.stack(stack[name])[:, layer, head]  # (S,)
                values = values[~values.isnan()]
                unit = "{:.0%}" if measures.get(name).is_share else "{:.2f}"  # as in the table above: shares in %
                row[name] = (f"{unit.format(float(values.mean()))} ± {unit.format(float(values.std()))}"
                             if len(values) > 1 else "—")
            rows.append(row)
    st.caption(f"Mean ± standard deviation over {len(sentences)} sentences. A large spread means the pattern "
               "depends on the input.")
    st.dataframe(rows, hide_index=True, height=320, column_config={
        name: st.column_config.TextColumn(measures.get(name).column) for name in names})


def ground_truth_panel(model: Model, run: AttentionRun) -> None:
    """Where the model's training grammar says the relations are in this text (the tiny model), and how much
    attention each head puts there, next to what uniform attention would put there."""
    truth = model.ground_truth(run.tokens)
    if truth is None:
        return
    st.markdown("**Ground truth on this sentence** (the tiny model's corpus grammar knows where the relations are)")
    relations = [pairs.previous_token_score(run.attentions)] if len(run.tokens) > 2 else []
    described = ["from each token to the one before it"]
    if truth.subjects:
        relations.append(pairs.subject_score(run.attentions, list(truth.subjects)[-1]))
        subject, verb = truth.subjects[-1]
        described.append(md_safe(f"from {quoted(run.tokens[verb - 1])} (where {quoted(run.tokens[verb])} is "
                                  f"predicted) to its subject {quoted(run.tokens[subject])}"))
    if truth.repeats:
        relations.append(pairs.induction_score(run.attentions, list(truth.repeats)))
        described.append("from a repeated word to the word that followed its first mention")
    if len(relations) < 2:
        st.caption("No agreement clause or repeated word of the corpus's vocabulary in this text: try one of the "
                   "example buttons.")
    rows = []
    for relation, where in zip(relations, described):
        (layer, head), value = relation.best()
        rows.append({"relation": relation.label, "attention measured": where,
                     "top head": head_name((layer, head)), "its attention there": f"{value:.0%}",
                     "uniform attention": f"{relation.baseline:.0%}"})
    if rows:
        st.table(rows)
        st.caption("Measured on this input only. The tests measure the same heads on held-out generated texts "
                   "(tests/models/tiny/test_probes.py) and check causally, by ablation, that the subject heads are "
                   "used.")
