"""Compare: 2-4 heads from any layers, large, on one colour scale, with difference maps and a second sentence."""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz import analysis, plotting
from mha_viz.app.cache import get_run
from mha_viz.app.common import chart_config, display, fitted_chart, head_name, md_safe, parse_head
from mha_viz.app.context import ViewContext
from mha_viz.app.text import read_text
from mha_viz.contract import Head, Model

MAX_COMPARE = 4


def render(ctx: ViewContext) -> None:
    compare(ctx.model, ctx.name, ctx.tokens, ctx.att, ctx.heads_off, ctx.hide_special, ctx.merge, ctx.ablation)


def compare(model: Model, model_name: str, tokens: list[str], att: torch.Tensor, heads_off: frozenset[Head],
            hide_special: bool, merge: bool, ablation: str = "zero") -> None:
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
    st.caption(f"Same colour scale for all: 0 to {zmax:.2f} (the largest weight among these heads), with square-root "
               "contrast as in the Layer grid: a weight a quarter of the top is drawn half dark, so the weak weights "
               "beside one strong cell stay visible. Hover a cell for its weight.")
    _compare_row(heads, tokens, att, [h in heads_off for h in heads], zmax, "", "cmp_row")
    if len(heads) >= 2:
        first = heads[0]
        diffs = [att[other] - att[first] for other in heads[1:]]  # each (Q, K)
        bound = max(float(d.abs().max()) for d in diffs) or 1e-6  # one scale for every difference map
        st.caption(f"Differences from {head_name(first)}, all on one scale: −{bound:.2f} (blue, less attention) to "
                   f"+{bound:.2f} (red, more).")
        for col, other, diff in zip(st.columns(len(heads) - 1), heads[1:], diffs):
            with col:
                fitted_chart(plotting.diff_figure(diff, tokens, f"{head_name(other)} − {head_name(first)}",
                                                  bound=bound), f"cmpdiff|{other}", width="content")
        distance = analysis.js_divergence(att[heads[0]], att[heads[1]]).mean()
        st.caption(f"Mean Jensen-Shannon divergence between {picked[0]} and {picked[1]} over query rows: "
                   f"{float(distance):.3f} bits (0 = identical patterns, 1 = no overlap).")

    st.markdown("**The same heads on a second sentence**")
    other_text = read_text(st.text_input("Second sentence", key="second_text",
                                         placeholder="Type another sentence to see these heads on it"))
    if other_text.strip():
        try:
            other = get_run(model_name, other_text[:20_000], heads_off, ablation)
        except Exception as err:
            st.warning(md_safe(str(err)))
            return
        other_tokens, other_att = display(model, other, hide_special, merge)
        _compare_row(heads, other_tokens, other_att, [False] * len(heads), zmax, ", second sentence", "cmp_row2")


def _compare_row(heads: list[Head], tokens: list[str], att: torch.Tensor, off: list[bool], zmax: float,
                 suffix: str, key: str) -> None:
    """The chosen heads side by side in one figure, on one colour scale, each as large as the page allows."""
    patterns = torch.stack([att[layer, head] for layer, head in heads])  # (N, Q, K)
    fig = plotting.heads_row_figure(patterns, tokens, [head_name(h) + suffix for h in heads], off, zmax=zmax,
                                    height=int(900 / max(len(heads), 2)), colorbar=True, contrast="sqrt")
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config())
