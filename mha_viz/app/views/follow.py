"""Follow a token: where one token's attention goes in every head of the layer (or of every layer), drawn on the
sentence itself, one row and one colour per head."""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.app.common import chart_config, head_name, layer_picker, md_safe, quoted, token_picker
from mha_viz.app.context import ViewContext


def render(ctx: ViewContext) -> None:
    model, run = ctx.model, ctx.run
    st.subheader("Follow a token")
    query = token_picker(run, "Token to follow (click one)")
    c1, c2 = st.columns([1, 5], vertical_alignment="bottom")
    every = c2.checkbox("Every layer", key="follow_all",
                        help=f"All {model.n_layers * model.n_heads} heads of the model, one row each.")
    layer = ctx.layer if every else layer_picker(model, ctx.name, ctx.layer, c1)
    layers = range(model.n_layers) if every else [layer]
    rows = torch.cat([run.attentions[layer, :, query, :] for layer in layers])  # (R, K): the token's row per head
    heads = [(layer, h) for layer in layers for h in range(model.n_heads)]
    token = quoted(run.tokens[query], 24)
    where = "every layer" if every else f"layer {layer}"
    scale_word = "one 0–1 scale" if ctx.shared_scale else "each head to its own max"
    fig = plotting.follow_figure(run.tokens, rows, [head_name(h) for h in heads], [h for _, h in heads],
                                 [h in ctx.heads_off for h in heads], query,
                                 f"Where {token} (position {query}) looks, {where} ({scale_word})",
                                 shared_scale=ctx.shared_scale)
    thinned = fit_labels(fig, query)
    words = fig.data[0].text  # the cells' words: each token's label, or that label cut to its cell
    cut = words is not None and list(words[0]) != [plotting.safe_label(t) for t in run.tokens]
    st.plotly_chart(fig, width="stretch", key="follow_fig", config=chart_config())
    scale = ("shared 0–1 scale: full colour = all of the token's attention" if ctx.shared_scale else
             "each head's own maximum: full colour = where that head looks most (hover for the weight)")
    st.caption(f"Each row is one head; each cell a token of the sentence, shaded in the head's colour by how much "
               f"of {md_safe(token)}'s attention it gets ({scale}). The outlined column is the token itself."
               + (" A causal model's token cannot look at later tokens: they stay white." if model.causal else "")
               + " Switched-off heads are grey: their pattern is still computed. Positions are the model's own "
               "tokens; the sidebar's hide/merge options do not apply here."
               + (f" With {len(run.tokens)} tokens one in {thinned} is labelled (and the followed token, in "
                  "bold); hover a cell for its token." if thinned > 1 else "")
               + (" A word longer than its cell (in a window 1000 px wide) is cut with “…”; hover the cell for the "
                  "whole token." if cut else ""))
    top = rows.argmax(dim=-1)  # (R,)
    summary = ", ".join(f"{head_name(h)} → {md_safe(quoted(run.tokens[int(k)], 16))} ({float(rows[i, k]):.0%})"
                        for i, (h, k) in enumerate(zip(heads, top)) if not every)
    if summary:
        st.caption("Where each head looks most: " + summary + ". A measurement on this input, not a role.")


LABELS_UP_TO = 32  # token labels across the top: at 1000 px wide each still gets ~14 px, room for 10 px text


def fit_labels(fig, query: int) -> int:
    """Long texts: the figure writes no words in the cells, and labels the keys along the top, turned upright.
    Label every k-th token (k chosen so at most LABELS_UP_TO show, and always the followed one) at a readable size,
    and give the title room of its own above them, so the two never overlap. Returns k (1: every token)."""
    xaxis = fig.layout.xaxis
    if not xaxis.showticklabels:  # short text: the words are in the cells
        return 1
    labels = list(fig.data[0].x)
    step = -(-len(labels) // LABELS_UP_TO)  # ceil
    shown = sorted(set(range(0, len(labels), step)) | {query})
    if step > 1:  # a neighbour of the followed token would crowd it
        shown = [i for i in shown if i == query or abs(i - query) >= step]
    longest = max((len(labels[i].replace("\u200b", "")) for i in shown), default=1)  # repeats carry zero-width spaces
    label_px = 8 + 6 * min(longest, 16)  # upright 10 px text: about 6 px per character
    fig.update_xaxes(tickmode="array", tickvals=[labels[i] for i in shown],
                     ticktext=[f"<b>{labels[i]}</b>" if i == query else labels[i] for i in shown],
                     tickfont=dict(size=10))
    fig.update_layout(margin=dict(t=label_px + 34), title=dict(yref="container", y=1.0, yanchor="top",
                                                               pad=dict(t=8)),
                      height=fig.layout.height + label_px)
    return step
