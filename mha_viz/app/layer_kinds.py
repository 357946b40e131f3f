"""Layer, for a model with cross-attention: a switch between its Encoder, Decoder and Cross attention above the same
browser grid (views/layer.py), and under it the decoder's next-token prediction at every target position with the
heads that are off.

Each kind's grid numbers its layers from 0; the page keeps every kind's heads off in its one set (web/kinds.py:
encoder layers, then the decoder's, then each cross-attention layer), which `cache.get_run` splits into `ablate`
and `ablate_cross`. A cross-attention heatmap has the target's tokens as rows and the source's as columns."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import state
from mha_viz.app.common import md_safe
from mha_viz.app.components.head_grid import encode_soon, grid_rest, head_grid, held, payload
from mha_viz.app.context import ViewContext
from mha_viz.app.names import token_label
from mha_viz.names import head_name
from mha_viz.web import kinds

KIND_KEY = state.KIND_KEY  # the switch's key: the kind shown, the same for every model with cross-attention
KEPT = state.KIND_KEPT  # the kind kept while the switch is not drawn (another view), as the link carries it


def current_kind() -> str:
    """The kind to show; call before the switch is drawn (a switch clicked off again, None, keeps the last kind)."""
    kind = st.session_state.get(KIND_KEY)
    if kind not in kinds.KINDS:
        kind = st.session_state.get(KEPT) if st.session_state.get(KEPT) in kinds.KINDS else kinds.ENCODER
    st.session_state[KIND_KEY] = st.session_state[KEPT] = kind
    return kind


def grid(ctx: ViewContext, labels_for) -> None:
    """The kind switch, then the grid of that kind (`labels_for`: the Layer view's badges, measured on this run's
    encoder or decoder self-attention; cross-attention heads show none, and the caption says why), its switches,
    and the decoder's predictions along the target."""
    model, name, n_heads = ctx.model, ctx.name, ctx.model.n_heads
    kind = current_kind()
    st.segmented_control("Attention", kinds.KINDS, key=KIND_KEY,
                         help="Encoder: the source reading itself. Decoder: the target reading its earlier tokens. "
                              "Cross: each target token (row) reading the source (columns).")
    n_layers, start = kinds.n_layers(model, kind), kinds.set_offset(model, kind)
    layer = min(ctx.layer, n_layers - 1)
    if kind == kinds.ENCODER:  # the page's display (special tokens hidden, word pieces merged) applies
        tokens, att, queries, badges = [token_label(t) for t in ctx.tokens], ctx.att, None, labels_for(model, ctx.run)
    else:
        shown = kinds.view(ctx.run, kind)
        tokens, att = [token_label(t) for t in shown.keys], shown.att
        queries = None if shown.queries is None else [token_label(t) for t in shown.queries]
        badges = _readings(ctx, kind, labels_for)
    st.caption(f"{kind}: {kinds.ABOUT[kind]}." + ("" if kind == kinds.ENCODER else
               " Every token is shown (the sidebar's hiding and merging apply to the encoder's grid).") +
               (f" {kinds.NO_READINGS[kind]}" if kind in kinds.NO_READINGS else ""))
    off = {(l - start, h) for l, h in ctx.heads_off if start <= l < start + n_layers}
    codes = encode_soon(tokens, att, ctx.shared_scale, queries)
    key = f"grid|{name}|{kind}"
    unknown = list(ctx.run.unknown) if kind == kinds.ENCODER and len(ctx.tokens) == len(ctx.run.tokens) else []
    data = payload(tokens, att, layer, off, ctx.n_cols, ctx.shared_scale, badges, unknown=unknown, controls=True,
                   encoded=codes, held=held(key))
    head_grid(data, key=key, on_toggle=lambda l, h, on: _toggled(name, start, l, h, on),
              on_layer=lambda l: state.set_layer(name, l),
              on_bulk=lambda l, action, h: _bulk(name, n_heads, start, l, action, h))
    with st.expander(f"Switches for the heads of {kind} layer {layer} (the same as in each head's corner above)",
                     key=f"switches|{name}|{kind}"):
        for head in range(n_heads):
            _switch(name, kind, start, layer, head)
    along_target(ctx)
    grid_rest(data, codes, key)


def _readings(ctx: ViewContext, kind: str, labels_for) -> dict:
    """The badges under each head of `kind`, measured on this run: the decoder's self-attention read as a causal
    run over the target (the measures hold there as over any one text); none for cross-attention (NO_READINGS)."""
    stack = kinds.one_stack(ctx.run, kind)
    if stack is None:
        return {}
    run, causal = stack
    # Keyed by what else shapes the decoder's attention: the source it reads and the cross heads off.
    return labels_for(ctx.model, run, causal=causal, n_layers=kinds.n_layers(ctx.model, kind),
                      key=(kind, tuple(ctx.run.tokens), tuple(sorted(getattr(ctx.run, "ablated_cross", ())))))


def _toggled(name: str, start: int, layer: int, head: int, on: bool) -> None:
    state.set_layer(name, layer)
    state.set_head(name, start + layer, head, on)


def _bulk(name: str, n_heads: int, start: int, layer: int, action: str, head: int | None) -> None:
    state.set_layer(name, layer)
    if action in ("off", "on"):
        state.layer_off(name, start + layer, n_heads, action == "off")
    elif action == "only" and head is not None:
        state.only_head(name, start + layer, n_heads, head)
    elif action == "reset":
        state.reset(name)


def _switch(name: str, kind: str, start: int, layer: int, head: int) -> None:
    key = state.toggle_key(name, start + layer, head)
    st.session_state[key] = (start + layer, head) not in state.off_set(name)
    st.toggle(f"{kind} {head_name((layer, head))}", key=key, on_change=state.on_toggle,
              args=(name, start + layer, head),
              help="On: the head contributes. Off: its output is replaced, by 0 or by its mean (the sidebar's "
                   "'Switching a head off')." + (_CROSS_OFF if kind == kinds.CROSS else ""))


_CROSS_OFF = " A cross-attention head is switched off at its slice of the cross-attention's output projection."


def along_target(ctx: ViewContext) -> None:
    """The decoder's top next-token prediction at every target position, all heads on and now, with the KL
    between the two: what the heads that are off (of every kind) change along the target."""
    rows = kinds.along_target(ctx.model, ctx.base, ctx.run)
    if not rows:
        return
    ablate, cross = kinds.split(ctx.model, ctx.heads_off)
    n_off = len(ablate) + len(cross)
    st.markdown("**The decoder's next-token prediction along the target**" +
                (f" ({n_off} head{'s' if n_off != 1 else ''} off)" if n_off else " (all heads on)"))
    st.dataframe([{"position": r["position"], "reads": token_label(r["token"]),
                   "all heads on": f"{token_label(r['before'][0])} {r['before'][1]:.0%}",
                   "now": f"{token_label(r['after'][0])} {r['after'][1]:.0%}",
                   "KL (nats)": float(f"{r['kl']:.3g}")} for r in rows], hide_index=True, key="along_target")
    if not n_off:
        st.caption("Switch heads off (any kind) to see their effect at every target position.")
    else:
        changed = sum(r["before"][0] != r["after"][0] for r in rows)
        st.caption(md_safe(f"The top prediction changed at {changed} of {len(rows)} target positions."))
