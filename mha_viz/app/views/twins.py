"""Trained vs untrained: the in-repo tiny model after training and at its seeded initialisation, same sentence."""
from __future__ import annotations

import streamlit as st

from mha_viz import plotting
from mha_viz.app.cache import get_run
from mha_viz.app.common import head_name, md_safe
from mha_viz.app.context import ViewContext


def render(ctx: ViewContext) -> None:
    twins(ctx.text, ctx.layer)


def twins(text: str, layer: int) -> None:
    st.caption("The same architecture and the same sentence: on the left the weights after training, on the right "
               "the seeded initialisation they started from. Structure in the patterns comes from learning.")
    try:
        trained = get_run("tiny", text, ())
        untrained = get_run("tiny-untrained", text, ())
    except Exception as err:
        st.warning(md_safe(str(err)))
        return
    n_layers = trained.attentions.shape[0]
    layer = min(layer, n_layers - 1)
    for name, run in (("trained", trained), ("untrained", untrained)):
        st.markdown(f"**tiny {name}, layer {layer}**")
        n_heads = run.attentions.shape[1]
        fig = plotting.heads_row_figure(run.attentions[layer], run.tokens, [head_name((layer, h)) for h in range(n_heads)],
                                        [False] * n_heads, height=int(900 / max(n_heads, 1)))
        st.plotly_chart(fig, width="stretch", key=f"twin|{name}")
