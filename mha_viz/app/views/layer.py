"""Layer: every head of the chosen layer side by side, each with its on/off switch and its measured scores.

The heads are drawn by the browser component in app/components/head_grid (every layer held in the page, and sent
again only when it changed: switching layer, hovering a token and opening a head large stay in the page). The
layer's heading and its bulk switches are drawn by the component too, so a layer tab changes every one of them in
the browser, with the link, in the click's own task. The grid tells the page once that drawing is on screen
(web/grid/tabs.js, tellLayer), and the fragment's rerun redraws what the server draws for the layer: the same
switches as Streamlit widgets in an expander (for the keyboard and for AppTest, which cannot run the component's
JavaScript), their label and bulk buttons. A switch or bulk switch clicked before then names its layer, and the
navigation sends the link's."""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Callable

import streamlit as st
import torch

from mha_viz import analysis, measures
from mha_viz.analysis.agreement import agreement, census_heads
from mha_viz.app import cache, continuation, state
from mha_viz.app.common import NO_VALUE_NOTE, display, encoded_run, program_value
from mha_viz.app.components.head_grid import AsMade, early_payload, encode_soon, grid_rest, head_grid, held, payload
from mha_viz.app.context import ViewContext
from mha_viz.app.names import column_names, head_name, layer_name, token_label
from mha_viz.contract import AttentionRun, EncodedText, Model

ONLY_PROMPT = "Only one on…"
# Set once this process has sent a page its first grid (the first heatmaps drawn): the server's warm-up waits for
# it before work no first page needs (the saved figures' font, page.warm_up), which would otherwise hold the GIL
# while that page measures its badges and encodes its grid.
FIRST_GRID = threading.Event()
BADGES = 2  # scores named under each head, strongest first


def render(ctx: ViewContext) -> None:
    grid(ctx)


def grid(ctx: ViewContext) -> None:
    """Every head of every layer in the browser component, the page's layer sent and shown first (the other layers
    the page lacks follow at the end of the view); under it the same switches for that layer as Streamlit
    toggles. Heatmaps show the display transform (`ctx.att`); scores are always measured on the run itself. A
    layer tab clicked in the grid comes back as the page's layer (the heading, the bulk switches, the views and the
    URL follow it). A model with cross-attention: layer_kinds.grid (Encoder, Decoder and Cross)."""
    if ctx.model.has_cross_attention:
        from mha_viz.app import layer_kinds

        return layer_kinds.grid(ctx, labels_for)
    tokens = [token_label(t) for t in ctx.tokens]
    codes = encode_soon(tokens, ctx.att, ctx.shared_scale)  # beside the badges' measuring, not after it
    # The layer on screen's captions go with its heads; every layer's follow with the layers off screen (SmolLM2 at
    # 128 tokens: measuring all 270 heads held the first drawing of a new sentence about 25 ms).
    labels = stack_labels(ctx.model, ctx.run, (ctx.layer,))
    key = _key(ctx.name)
    data = payload(tokens, ctx.att, ctx.layer, ctx.heads_off, ctx.n_cols, ctx.shared_scale, labels,
                   unknown=_shown_unknown(ctx), controls=True, encoded=codes, held=held(key))
    if ctx.early is None:  # else sent while the run computed (early_grid): this data names the run for grid_rest
        _mount(data, ctx.name, ctx.model.n_heads)
    # The badges are already under each head in the grid, so the switches come without them; one per line, no
    # columns: a toggle's rerun sends each element again, and columns cost a message apiece (28 messages for
    # MiniLM's 12 heads in rows of 4, 13 stacked). Keyed, so an open expander stays open when a tab renames it.
    with st.expander(f"Switches for the heads of {layer_name(ctx.layer)} (the same as in each head's corner above)",
                     key=f"switches|{ctx.name}"):
        controls(ctx.model, ctx.name, ctx.layer)
        for head in range(ctx.model.n_heads):
            switch(ctx.name, ctx.layer, head)
    written(ctx)
    against_census(ctx)
    continuation.panel(ctx, lambda l, h, on: toggled(ctx.name, l, h, on), lambda l: state.set_layer(ctx.name, l))
    # The layers not on screen and every layer's captions, after everything above has gone to the page.
    grid_rest(data, codes, key, badges=stack_labels(ctx.model, ctx.run, range(ctx.model.n_layers)),
              completes=None if ctx.early is None else ctx.early["digest"])
    FIRST_GRID.set()


def _key(name: str) -> str:
    return f"grid|{name}"


def _mount(data: dict, name: str, n_heads: int) -> None:
    head_grid(data, key=_key(name), on_toggle=lambda layer, head, on: toggled(name, layer, head, on),
              on_layer=lambda layer: state.set_layer(name, layer),
              on_bulk=lambda layer, action, head: bulk(name, n_heads, layer, action, head))


def early_grid(model: Model, name: str, read: EncodedText, layer: int, heads_off: frozenset, ablation: str,
               n_cols: int, made: AsMade, box) -> tuple[Callable[[int, torch.Tensor], None], dict]:
    """The grid's element sent while the run computes, as soon as the forward has made the layer on screen:
    -> (on_layer for the run (made.add, and this), the element's data once sent, else {}). Drawn into `box`, where
    the view draws; the view (`grid`, with ViewContext.early) then sends the rest of the run after it. For the run's
    own attention only (`made`: nothing hidden or merged). The page draws the layer on screen while the forward
    computes the layers above it (benchmarks/RESULTS.md, "The layer on screen sent while the forward computes")."""
    sent: dict = {}
    L, H = model.n_layers, model.n_heads

    def on_layer(j: int, weights: torch.Tensor) -> None:
        made.add(j, weights)
        if j != layer or sent:
            return
        # A run of this one layer (every layer index reads these weights: only `layer` is measured), for the
        # captions of the layer on screen, kept under the same key as the finished run's (`stack_labels`).
        partial = encoded_run(read, weights[None].expand(L, *weights.shape), heads_off, ablation)  # (L, H, Q, K)
        tokens, _ = display(model, partial, False, False)
        data = early_payload([token_label(t) for t in tokens], (L, H, *weights.shape[1:]), made.known(layer), layer,
                             heads_off, n_cols, made.shared, stack_labels(model, partial, (layer,)),
                             unknown=list(partial.unknown), controls=True, held=held(_key(name)))
        with box:
            _mount(data, name, H)
        sent.update(data)

    return on_layer, sent


def against_census(ctx: ViewContext) -> None:
    """Where a census of the model was made (the Census view), one line per role it names a head of this layer for:
    whether this input agrees, or has too few queries to say (`analysis.agreement`)."""
    census = cache.census_made(ctx.name)
    if census is None:
        return
    scores, _ = analysis.run_scores(ctx.run, ctx.model.causal, names=measures.BADGES)
    support = analysis.run_support(ctx.run, ctx.model.causal, names=measures.BADGES)
    lines = [agreement(census, m, scores, support) for m in measures.BADGES
             if any(h[0] == ctx.layer for h in census_heads(census, m))]
    if lines:
        st.caption(f"Against the census of this model (many inputs), for the roles it names in "
                   f"{layer_name(ctx.layer)}: " + " ".join(lines))


def toggled(model_name: str, layer: int, head: int, on: bool) -> None:
    """A head's switch clicked in the grid: its layer is the one on screen, which a tab may have changed without
    telling the page (web/grid/tabs.js, layerFor), so it becomes the page's too."""
    state.set_layer(model_name, layer)
    state.set_head(model_name, layer, head, on)


def written(ctx: ViewContext) -> None:
    """A compiled program's readout (its output at every position) and the program line that wrote each head."""
    heads = ctx.model.written_heads()
    output = ctx.model.program_output(ctx.run)
    if output is None:
        return
    shown = " ".join(f"`{token_label(t)}→{program_value(o)}`" for t, o in zip(ctx.run.tokens, output))
    if None in output:
        shown += f" ({NO_VALUE_NOTE})"
    off = " (with the heads that are off)" if ctx.run.ablated else ""
    if not heads:  # a learned twin: it reads out a program's output values, but no head of it was written
        st.markdown(f"**The program's output, as this learned model reads it out**{off}: {shown}")
        st.caption("Learned, not written: the in-repo stack trained on what a compiled program outputs; no program "
                   "set its heads (the Census view sets them beside the written ones).")
        return
    st.markdown(f"**The program's output** at each position{off}: {shown}")
    st.caption("Written, not learned: a program compiled by Tracr set every head below. Heads a layer has beyond "
               "the program's are zero (Tracr pads the layer).")
    # A table, not a dataframe: the program's text stays readable and selectable on the page, whole.
    st.table([{"head": head_name(lh), "the program wrote": w.text, "source line": w.source_line or "—",
               "each query selects": w.selects.removeprefix("each query selects ")}
              for lh, w in sorted(heads.items())])


def _shown_unknown(ctx: ViewContext) -> list[int]:
    """Positions of the unknown token among the tokens shown (none once word pieces are merged or specials are
    hidden: positions no longer line up, and the page's caption still names them)."""
    return list(ctx.run.unknown) if len(ctx.tokens) == len(ctx.run.tokens) else []


def badge_text(badges, layer: int, head: int) -> str:
    """A head's caption: its two strongest measured scores on this input, each with how many queries it averaged
    over (two, so a band along the diagonal shows as `nearby` beside the special tokens that the same head also
    rests on); `analysis.badge_caption`, the one wording both hosts use."""
    scores, baselines, support = badges
    return analysis.badge_caption(scores, baselines, support, layer, head, n=BADGES)


def switch(model_name: str, layer: int, head: int) -> None:
    key = state.toggle_key(model_name, layer, head)
    st.session_state[key] = (layer, head) not in state.off_set(model_name)
    st.toggle(head_name((layer, head)), key=key, on_change=state.on_toggle, args=(model_name, layer, head),
              help="On: the head contributes. Off: its output is replaced, by 0 or by its mean (the sidebar's "
                   "'Switching a head off').")


def labels_for(model: Model, run: AttentionRun, causal: bool | None = None, n_layers: int | None = None,
               key: tuple = ()) -> dict:
    """{(layer, head): its caption} for every head of the run, once per run: a layer tab's rerun sends the same
    captions again. Keyed by what shapes the run's attention: its tokens, the heads off and what "off" meant (zero
    and mean ablation of the same heads attend differently), and `key`, whatever else does (a decoder's
    self-attention: its source and the cross-attention heads off). `causal` and `n_layers` default to the model's;
    a decoder's run over its target gives its own (web/kinds.one_stack). One stack's grid: `stack_labels`."""
    return _labels(model.info.name, tuple(run.tokens), run.ablated, str(run.ablation), run,
                   model.causal if causal is None else causal, n_layers or model.n_layers, model.n_heads, key)


@st.cache_resource(show_spinner=False, max_entries=64)
def _labels(name: str, tokens: tuple, ablated: frozenset, ablation: str, _run: AttentionRun, causal: bool,
            n_layers: int, n_heads: int, key: tuple = ()) -> dict:
    return _captions(_run, causal, tuple(range(n_layers)), n_heads)


def _captions(run: AttentionRun, causal: bool, layers: tuple[int, ...], n_heads: int) -> dict:
    """{(layer, head): caption} of `layers`, measured on those layers' attention alone (each measure reads one
    layer's heads at a time); {} where measuring fails (badges are an extra: they never block the grid)."""
    if layers != tuple(range(run.attentions.shape[0])):
        run = dataclasses.replace(run, attentions=run.attentions[list(layers)])  # (len(layers), H, Q, K)
    try:
        badges = (*analysis.run_scores(run, causal, names=measures.BADGES),  # the captions read badges only
                  analysis.run_support(run, causal, names=measures.BADGES))
    except Exception:
        return {}
    return {(layer, head): badge_text(badges, i, head) for i, layer in enumerate(layers) for head in range(n_heads)}


# One stack's captions, one entry per layer: layer j's attention, so its captions, depends on the text and on the
# heads switched off below j only, since layer j's weights come before its heads' outputs. A toggle in
# layer l measures the layers above l alone; the others keep the entries of the run before. Shared by every
# session (keyed by content, not by session), bounded.
_LAYER_CAPTIONS: OrderedDict = OrderedDict()
_LAYER_CAPTIONS_MAX = 2048  # layers: SmolLM2's 30 for about 68 runs
_LAYER_CAPTIONS_LOCK = threading.Lock()


def stack_labels(model: Model, run: AttentionRun, layers) -> dict:
    """{(layer, head): its caption} for `layers` of a one-stack model's run (the Layer grid), each layer measured
    once for what shapes it (see _LAYER_CAPTIONS): the text, and the heads off below it, with what "off" meant.
    Equal to `labels_for` on the same run."""
    layers = [l for l in layers if 0 <= l < run.attentions.shape[0]]
    if run.patched:  # what a patched head takes depends on a source text the run does not name: measured afresh
        return _captions(run, model.causal, tuple(layers), model.n_heads)

    def key(j: int) -> tuple:
        below = frozenset(h for h in run.ablated if h[0] < j)
        return model.info.name, tuple(run.token_ids), tuple(run.tokens), below, str(run.ablation) if below else "", j

    keys = {j: key(j) for j in layers}
    with _LAYER_CAPTIONS_LOCK:
        kept = {j: _LAYER_CAPTIONS.get(keys[j]) for j in layers}
        for j in layers:
            if kept[j] is not None:
                _LAYER_CAPTIONS.move_to_end(keys[j])  # used last: let go last
    missing = tuple(j for j in layers if kept[j] is None)
    if missing:
        fresh = _captions(run, model.causal, missing, model.n_heads)
        with _LAYER_CAPTIONS_LOCK:
            for j in missing:
                kept[j] = {head: fresh.get((j, head), "") for head in range(model.n_heads)}
                if fresh:  # a failed measure is not kept: the next run tries again
                    _LAYER_CAPTIONS[keys[j]] = kept[j]
            while len(_LAYER_CAPTIONS) > _LAYER_CAPTIONS_MAX:
                _LAYER_CAPTIONS.popitem(last=False)
    return {(j, head): text for j in layers for head, text in kept[j].items()}


def bulk(model_name: str, n_heads: int, layer: int, action: str, head: int | None) -> None:
    """A bulk switch clicked in the grid, on the layer the grid showed: that layer becomes the page's (it is
    already the one on screen), then its heads switch."""
    state.set_layer(model_name, layer)
    if action in ("off", "on"):
        state.layer_off(model_name, layer, n_heads, action == "off")
    elif action == "only" and head is not None:
        state.only_head(model_name, layer, n_heads, head)
    elif action == "reset":
        state.reset(model_name)


def _only(model_name: str, layer: int, n_heads: int) -> None:
    key = f"only|{model_name}|{layer}"
    choice = st.session_state.get(key, ONLY_PROMPT)
    if choice != ONLY_PROMPT:
        state.only_head(model_name, layer, n_heads, int(choice[1:]))
    st.session_state[key] = ONLY_PROMPT  # a callback may reset its own widget: it runs before the script


def controls(model: Model, model_name: str, layer: int) -> None:
    """The bulk switches as Streamlit widgets (the grid draws the same ones above the heads), on one row.
    Callbacks, not st.rerun: they change state before the page is drawn, so one run suffices."""
    n, name = model.n_heads, layer_name(layer)
    row = st.container(key="wrap")  # the page's style lets this row fold onto two lines on a narrow screen
    head, c1, c2, c3, c4 = row.columns([1.5, 1, 1, 1.6, 1], vertical_alignment="center")
    head.markdown(f"{name}:")
    c1.button("All off", width="stretch", on_click=state.layer_off, args=(model_name, layer, n, True),
              key=f"layer_off|{model_name}", help=f"Switch every head of {name} off.")
    c2.button("All on", width="stretch", on_click=state.layer_off, args=(model_name, layer, n, False),
              key=f"layer_on|{model_name}", help=f"Switch every head of {name} on.")
    c3.selectbox("Only this head on", [ONLY_PROMPT] + column_names(n), key=f"only|{model_name}|{layer}",
                 label_visibility="collapsed", on_change=_only, args=(model_name, layer, n),
                 help=f"Switch off every other head of {name}.")
    c4.button("Reset", width="stretch", on_click=state.reset, args=(model_name,), key=f"reset|{model_name}",
              help="Every head of every layer on.")
