"""What the heads that are off changed, for the open sentence: a view in all but name, drawn by the page around
every view about this run. `summary` is a box of fixed height above the view (so a toggle never moves the heads
under the pointer), used with every head on as well; `effect_panel` is the full panel below the view."""
from __future__ import annotations

import streamlit as st

from mha_viz import analysis
from mha_viz.app.cache import logit_row
from mha_viz.app.common import (
    ABLATION_LABELS,
    ABLATION_SHORT,
    NO_VALUE_NOTE,
    md_safe,
    metric_row,
    predictions_panel,
    program_value,
    quoted,
    top_predictions,
)
from mha_viz.app.context import ViewContext
from mha_viz.app.names import layer_name, token_label
from mha_viz.app.text import chip
from mha_viz.contract import EncodedText, Model
from mha_viz.web.kinds import set_head_name

# Views that read no logits of the page's runs beyond this panel's, at the prediction position: their runs compute
# the LM head there only (`logits_at`). A view not named here gets every position's (the Ablation effects view
# predicts at any position, Patching measures at any), so a new view is right before it is fast.
PREDICTION_ONLY = {"Layer", "All layers", "Compare", "Inside a head", "Follow a token", "Similarity & scores",
                   "Rollout & norms"}


def logits_at(model: Model, text: str | EncodedText, view: str) -> tuple[int, ...] | None:
    """The positions whose logits the page's runs need for `view`: the prediction position this panel reads
    (`Model.prediction_position`, read off the text's tokens before any run; none when there is none, such as a
    masked LM's text without a mask), or None (every position) for a view outside PREDICTION_ONLY and for a
    model with cross-attention (its logits are over the target, which the run makes). A model without an LM head
    (an encoder such as MiniLM, a program) predicts nowhere: None, so its runs share the other views' key and a text
    is kept once."""
    if view not in PREDICTION_ONLY or model.has_cross_attention or model.info.kind not in ("causal-lm", "masked-lm"):
        return None
    tokens = model.encode_text(text).encoded.labels
    # prediction_position reads a run's tokens, and whether it has logits at all (a placeholder here: the run's
    # logits are what this decides), so it answers before the run as it will after it
    position = model.prediction_position(_Tokens(tokens))
    return () if position is None else (position,)


class _Tokens:
    """What `Model.prediction_position` reads of a run, before the run exists."""
    logits = ()

    def __init__(self, tokens):
        self.tokens = tokens


SUMMARY_PX = 92  # the summary's reserved height: the same with no head off, one, or many


def running(layer: int, first) -> None:
    """The summary's box while the forward computes the layers above the one on screen, which the grid below
    already draws (views/layer.early_grid): `first()` (the token count) and what follows. The summary's height,
    so nothing below moves when the summary replaces it."""
    with st.container(height=SUMMARY_PX, border=False, gap="xsmall"):
        first()
        st.markdown(f"**Running the model…** {layer_name(layer)} is drawn below; the layers above it, the top "
                    "prediction and what a head off changes follow when the last layer is done.")


def summary(ctx: ViewContext, first=None, switches_here: bool = False) -> None:
    """Two lines in a box of fixed height: which heads are off and what that changed, or, with every head on,
    where the switches are and what a switch will be measured against (the box is the same size either way, so it
    is never blank space held for later). `first()` draws a line before them (the token count) in the same box;
    `switches_here`: the view has the heads' switches (the Layer grid)."""
    with st.container(height=SUMMARY_PX, border=False, gap="xsmall", key="heads_off_summary"):
        if first is not None:
            first()
        model, base, run = ctx.model, ctx.base, ctx.run
        position = model.prediction_position(base)
        off_means = f"Off means {ABLATION_LABELS[ctx.ablation]} (sidebar) · "  # short: one line at 1000 px
        if not ctx.heads_off:
            where = "in its corner" if switches_here else "in the Layer view"
            st.markdown(f"**All heads are on.** Switch one off {where} to see what it changes.")
            if position is not None:
                now, p = top_predictions(model, logit_row(base, position), 1)[0]
                measure = (f"top prediction now {md_safe(quoted(now, 16))} ({p:.0%}) · a head off shows the KL "
                           "from it and the new top prediction here")
            elif not model.causal:
                measure = "a head off shows the cosine of the sentence embedding to this one here"
            else:
                measure = "a head off shows each token's change"
            st.caption(off_means + measure + ", in full below the view")
            return
        parts = []
        if position is not None:
            a, b = logit_row(base, position), logit_row(run, position)  # (V,) each
            kl = analysis.next_token_kl(a, b)
            before, after = top_predictions(model, a, 1)[0][0], top_predictions(model, b, 1)[0][0]
            parts.append(f"KL {kl:.4f} nats · top prediction {md_safe(quoted(before, 16))} → "
                         f"{md_safe(quoted(after, 16))}")
        elif not model.causal:
            parts.append(f"embedding cosine {analysis.cosine_change(base.output, run.output):.5f}")
        names = ", ".join(f"`{set_head_name(model, h)}`" for h in sorted(ctx.heads_off)[:12])  # kind named
        more = f" and {len(ctx.heads_off) - 12} more" if len(ctx.heads_off) > 12 else ""
        st.markdown(f"**Heads off:** {names}{more}")
        st.caption(off_means + " · ".join(parts + ["in full below the view"]))


def effect_panel(ctx: ViewContext) -> None:
    """What the heads that are off changed: predictions for language models, the embedding for encoders."""
    model, base, run = ctx.model, ctx.base, ctx.run
    if not run.ablated and not getattr(run, "ablated_cross", None):  # cross-attention heads count as off too
        return
    st.subheader(f"What changed with these heads off ({ABLATION_SHORT[run.ablation]})")
    if len(run.ablated) == model.n_layers * model.n_heads:
        st.warning("Every head is off: no token can read any other token, so each position sees only itself "
                   "through the residual stream. The output below is what is left.")
    before = model.program_output(base)
    if before is not None:  # a compiled program: its readout is its decoded output at every position
        after = model.program_output(run)
        changed = sum(a != b for a, b in zip(before, after))
        rows = zip(base.tokens, before, after)
        st.dataframe([{"position": i, "token": token_label(t), "program output": program_value(a),
                       "with these heads off": program_value(b), "changed": "yes" if a != b else ""}
                      for i, (t, a, b) in enumerate(rows)], hide_index=True)
        no_value = f" ({NO_VALUE_NOTE})" if None in before + after else ""
        st.caption(f"The program's output changed at {changed} of {len(before)} positions{no_value}.")
    position = model.prediction_position(base)
    if position is not None:
        predictions_panel(model, base, run, position, key="pred_fig", chart=False)  # no plotly on a toggle
    elif model.info.kind == "masked-lm":
        st.caption(f"Put {md_safe(model.mask_token or 'the mask token')} in the sentence to compare the masked "
                   "word's predictions before and after.")
    change = analysis.token_change(base.output, run.output, relative=True)
    largest = ("Largest per-token change of final hidden state", f"{float(change.max()):.2%}")
    if model.causal:  # mean-pooled embeddings are an encoder's output; a causal LM's is its prediction
        st.metric(*largest)  # one metric: no empty column beside it
    else:
        cos = analysis.cosine_change(base.output, run.output)
        metric_row("heads_off_fx", [("Cosine similarity of sentence embedding (before vs after)", f"{cos:.5f}",
                                     f"{cos - 1:.5f}", "inverse" if cos < 1 else "off"), largest])
    with st.expander("Change of each token's final hidden state", expanded=False):
        st.markdown(change_strip(base.tokens, change), unsafe_allow_html=True)


def change_strip(tokens, change) -> str:
    """Each token shaded by the relative change of its final hidden state, the value in its label. HTML, not a
    plotly bar chart: a toggle reruns this panel, and the first plotly chart on a page makes the browser load and
    start plotly.js (about 0.8 s measured on a head's first toggle, benchmarks/RESULTS.md)."""
    values = [float(v) for v in change]
    top = max(values + [1e-12])
    chips = [chip(tok, f"position {i}: {v:.2%}", f"background:rgba(196,78,82,{0.08 + 0.8 * v / top:.2f})",
                  f"{v:.1%}") for i, (tok, v) in enumerate(zip(tokens, values))]
    return (f"<div data-testid='change-strip'>{''.join(chips)}</div>"
            "<small>Relative change ‖after − before‖ / ‖before‖ of each position's final hidden state; darker is "
            "larger.</small>")
