"""Helpers any view may use: head names, Markdown escaping, predictions, display transforms, the KL panel."""
from __future__ import annotations

import re
import time

import streamlit as st
import torch

from mha_viz import analysis, plotting
from mha_viz.app import state
from mha_viz.app.cache import logit_row
from mha_viz.app.markdown import md_safe  # the views' one import of it (state.py imports markdown)
from mha_viz.app.names import distinct_labels, head_name, layer_name, marked_tokens, parse_head, quoted, token_label
from mha_viz.contract import Ablation, AttentionRun, EncodedText, Model

LEARNED_NOTE = (
    "Each heatmap is one head's **learned** attention pattern on this sentence. Heads are not labeled modules: "
    "nobody assigned them roles, and a pattern that looks like grammar or copying is a measurement on this "
    "input, not an explanation. Switch heads off to test what they actually contribute."
)
WRITTEN_NOTE = (
    "This model was **written, not learned**: a RASP program compiled by Tracr set every head, so here each head is "
    "a labeled module, and the Layer view shows the program line behind it. It is the opposite case to every "
    "trained model in the app: compare its census with the tiny model's seeds, where the same roles land on other "
    "heads and mix."
)

# What "off" means, worded for the page (Model.run's `ablation`). The mean is over the model's example sentences.
# The wording of each meaning of "off", read from the typed value (contract.Ablation): one class per meaning.
ABLATION_LABELS = {a.key: f"{a.label}: its output {a.describe}" for a in Ablation.kinds()}
ABLATION_SHORT = {a.key: a.adjective for a in Ablation.kinds()}

visible = token_label  # the one way to write a token (names.py); the short name every view already uses
# A compiled program's output where it has no value (Tracr decodes None there: an induction program before a token
# has appeared twice), and the words that say so beside a table or line of outputs.
NO_VALUE = "–"
NO_VALUE_NOTE = f"{NO_VALUE}: the program has no value at that position"


def program_value(value) -> str:
    """One position's program output as the page writes it: NO_VALUE where the program has none."""
    return NO_VALUE if value is None else str(value)
__all__ = ["distinct_labels", "head_name", "md_safe", "parse_head", "quoted", "visible"]


def top_predictions(model: Model, logits: torch.Tensor, k: int = 5) -> list[tuple[str, float]]:
    """The k most likely tokens of one row of logits (V,), decoded, with their probabilities."""
    probs, ids = analysis.topk_predictions(logits, k)
    return [(model.decode(int(i)), float(p)) for p, i in zip(probs, ids)]


def where(model: Model, run: AttentionRun, position: int) -> str:
    """Words for a prediction position, e.g. "the last position (the next token)"."""
    target = getattr(run, "target_tokens", None)  # an encoder-decoder run predicts along its target
    if target:
        return f"the decoder's target position {position}, {md_safe(quoted(target[position], 20))} (the next token)"
    token = md_safe(quoted(run.tokens[position], 20))
    if model.info.kind == "masked-lm" and run.tokens[position] == model.mask_token:
        return f"the masked position {position}"
    if model.causal and position == len(run.tokens) - 1:
        return f"the last position, {token} (the next token)"
    if model.causal:
        return f"position {position}, {token} (the token after it)"
    return f"position {position}, {token}"


# Room per column of a metric row, in rem (page.py's CSS has one rule per width): a value of n characters at the
# metric's 2.25rem font needs about 1.3 n rem.
METRIC_ROOM = (7, 10, 13)


def metric_row(key: str, metrics: list[tuple], where=None) -> None:
    """Metrics side by side, each (label, value, *st.metric's other arguments) or a dict of st.metric's keyword
    arguments, in a row that folds onto more lines before a value would be cut: Streamlit cuts a value wider than
    its column with an ellipsis, and on a 1000 px page three metrics in half the main column showed "+1…". Each
    column keeps the room the row's longest value needs (page.py's `mrow<rem>_` rule); labels wrap."""
    args = [m if isinstance(m, dict) else dict(zip(("label", "value", "delta", "delta_color", "help"), m))
            for m in metrics]
    longest = max(len(str(m["value"])) for m in args)
    room = next((w for w in METRIC_ROOM if 1.3 * longest + 0.5 <= w), METRIC_ROOM[-1])
    columns = (where or st).container(key=f"mrow{room}_{key}").columns(len(args))
    for column, m in zip(columns, args):
        column.metric(**m)


def predictions_panel(model: Model, base: AttentionRun, run: AttentionRun, position: int, key: str,
                      table: bool = False, chart: bool = True, changed: str = "with heads off") -> None:
    """KL between the two runs' predictions at `position` and their top-5 side by side: a plotly chart, or
    (chart=False, the panel every toggle reruns) HTML bars, which need no plotly.js in the browser."""
    a, b = logit_row(base, position), logit_row(run, position)  # (V,) each: runs may hold only some positions
    kl = analysis.next_token_kl(a, b)
    before, after = top_predictions(model, a), top_predictions(model, b)
    label = where(model, base, position)
    # As the bars and token strips label tokens: a space-only token reads ␣, a newline ↵ (not a quoted blank).
    metric_row(f"kl_{key}", [("KL(before ‖ after) of the prediction, nats", f"{kl:.4f}"),
                             ("Top prediction before", visible(before[0][0], 9)),
                             ("Top prediction after", visible(after[0][0], 9))])
    if table:
        st.table([{"rank": i + 1, "before": f"{visible(w, 24)} ({p:.1%})", "after": f"{visible(a, 24)} ({q:.1%})"}
                  for i, ((w, p), (a, q)) in enumerate(zip(before, after))])
    st.caption(f"Predictions at {label}.")
    if not chart:
        st.markdown(prediction_bars(before, after, changed), unsafe_allow_html=True)
        return
    st.plotly_chart(plotting.predictions_figure(before, after, "Top-5 predictions, before and after", changed),
                    width="stretch", key=key, config=chart_config())


def prediction_bars(before: list[tuple[str, float]], after: list[tuple[str, float]],
                    changed: str = "with heads off") -> str:
    """The top predictions before and after as two bars per token (every token of either top list), escaped
    HTML: what `plotting.predictions_figure` draws, without plotly."""
    import html

    b, a = dict(before), dict(after)
    words = list(dict.fromkeys([w for w, _ in before] + [w for w, _ in after]))
    # Bars are scaled to the largest probability shown, so a flat distribution (all under 1%) still shows its
    # shape; each bar carries its number.
    top = max([p for _, p in before + after] + [1e-9])
    rows = []
    for w in words:
        label = html.escape(visible(w, 24))
        bars = "".join(
            f"<div style='display:flex;align-items:center;gap:4px'><div style='width:{max(p / top, 0.004) * 60:.1f}%;"
            f"height:9px;background:{color}'></div><small>{p:.1%}</small></div>"
            for p, color in ((b.get(w, 0.0), "#4c72b0"), (a.get(w, 0.0), "#c44e52")))
        rows.append(f"<div style='display:grid;grid-template-columns:9em 1fr;align-items:center;margin:2px 0' "
                    f"title='{label}: {b.get(w, 0.0):.2%} before, {a.get(w, 0.0):.2%} after'>"
                    f"<code>{label}</code><div>{bars}</div></div>")
    legend = ("<small><span style='color:#4c72b0'>■</span> all heads on &nbsp; "
              f"<span style='color:#c44e52'>■</span> {html.escape(changed)} &nbsp; "
              "(bars to scale of the largest shown, "
              f"{top:.1%})</small>")
    return f"<div data-testid='prediction-bars'>{''.join(rows)}{legend}</div>"


def encoded_run(read: EncodedText, attentions: torch.Tensor, ablated=frozenset(),
                ablation: str = "zero") -> AttentionRun:
    """A run as far as its text's encoding goes (tokens, ids, special and unknown positions, what was dropped), with
    `attentions` standing in for the forward's: what the page draws of a run before its forward ends (the token
    count, the captions of the layer on screen). No output (an empty tensor), no logits."""
    enc = read.encoded
    return AttentionRun(tokens=list(enc.labels), attentions=attentions, ablated=frozenset(ablated),
                        output=torch.empty(0), token_ids=list(enc.ids), truncated=enc.dropped, unknown=enc.unknown,
                        special=enc.special, ablation=ablation if ablated else "zero")


def display(model: Model, run: AttentionRun, hide_special: bool, merge: bool) -> tuple[list[str], torch.Tensor]:
    """Tokens and attentions (L, H, Q, K) as the user asked to see them. The model run itself is unchanged."""
    tokens, att = list(run.tokens), run.attentions  # (L, H, Q, K)
    positions = list(range(len(tokens)))
    unknown = set(run.unknown)
    if hide_special and run.special and len(run.special) < len(tokens):
        keep = torch.ones(len(tokens), dtype=torch.bool)  # (T,)
        keep[list(run.special)] = False
        att = analysis.hide_positions(att, keep)  # (L, H, Q', K')
        positions = [i for i in positions if keep[i]]
        tokens = [run.tokens[i] for i in positions]
    if merge:
        special = [j for j, i in enumerate(positions) if i in set(run.special)]
        groups = analysis.word_groups(tokens, special=special)
        if len(groups) < len(tokens):
            att = analysis.merge_word_pieces(att, groups)  # (L, H, W, W)
            labels = _word_labels(model, run, positions, tokens, groups)
            marked = {j for j, g in enumerate(groups) if any(positions[i] in unknown for i in g)}
            return marked_tokens(labels, marked), att
    return marked_tokens(tokens, {j for j, i in enumerate(positions) if i in unknown}), att


def _word_labels(model: Model, run: AttentionRun, positions: list[int], tokens: list[str],
                 groups: list[list[int]]) -> list[str]:
    """A word's label is the model's decoding of its ids (so a character split across pieces is whole again);
    a one-piece word keeps its run label, which can differ from the decoding (the tiny model's typed words)."""
    if not run.token_ids:
        return analysis.word_labels(tokens, groups)
    return [tokens[g[0]] if len(g) == 1 else model.decode_ids([run.token_ids[positions[i]] for i in g])
            for g in groups]


def display_notes(hide_special: bool, merge: bool, run: AttentionRun) -> None:
    notes = []
    if hide_special and run.special:
        notes.append("special tokens are hidden and each row is renormalised over the tokens shown, so weights "
                     "are shares of the attention that went to visible tokens")
    if merge:
        notes.append("word pieces are merged into words: attention to a word is the sum over its pieces, "
                     "attention from a word the mean over its pieces (Clark et al. 2019)")
    if notes:
        st.caption("Display: " + "; ".join(notes) + ".")


def trained_here(name: str) -> str:
    """The model whose training the Training view and the notes show: the page's model (its family: "tiny" for
    tiny@400) when it was saved at training steps, otherwise the first built-in that was."""
    from mha_viz.models import SPECS, checkpoints, spec

    own = spec(name)
    if own is not None and own.steps is not None and checkpoints(name):
        return own.family or own.name
    return next(s.family or s.name for s in SPECS if s.steps is not None)


# -- the selected token (Inside a head, Follow a token; in the URL as ?token=) --------------------------------
TOKEN_KEY = "token"  # the selection itself: outlives the picker widget, which exists only in the views that draw it
PILLS_UP_TO = 80  # longer texts get a selectbox: hundreds of pills would bury the view


def default_token(run: AttentionRun) -> int:
    """The last position that is neither a special token ([SEP]) nor whitespace only (a final "␣" or "↵" that a
    byte-level tokenizer makes of a trailing space or newline): the last word of the sentence, which for a causal
    LM is its next-token position when the text ends in a word."""
    special = set(run.special)
    words = [i for i, tok in enumerate(run.tokens) if i not in special and tok.strip()]
    plain = words or [i for i in range(len(run.tokens)) if i not in special]
    return plain[-1] if plain else len(run.tokens) - 1


def _picked() -> None:
    choice = st.session_state.get("token_pick")
    if choice is None:  # clicking the selected pill again deselects it: keep the token, show it selected
        st.session_state["token_pick"] = st.session_state.get(TOKEN_KEY)
    else:
        st.session_state[TOKEN_KEY] = int(choice)


def token_picker(run: AttentionRun, label: str) -> int:
    """A clickable strip of the run's tokens (a selectbox for long texts). Returns the selected position, kept in
    the session (and the URL) so both token views and a shared link agree on it."""
    n = len(run.tokens)
    token = st.session_state.get(TOKEN_KEY)
    if not isinstance(token, int) or not 0 <= token < n:
        if isinstance(token, int):
            st.caption(f"Token {token} does not exist in this text ({n} tokens); showing position "
                       f"{default_token(run)}.")
        token = default_token(run)
        st.session_state[TOKEN_KEY] = token
    st.session_state["token_pick"] = token  # the page writes it to the URL after the view (state.write_url)
    options = list(range(n))
    # Streamlit's pills find the option clicked by its label: equal labels would all pick the last of them, so a
    # repeated token carries its position ("the₁", "the₄").
    labels = distinct_labels(run.tokens)
    if n <= PILLS_UP_TO:
        st.pills(label, options, format_func=labels.__getitem__, selection_mode="single", key="token_pick",
                 on_change=_picked)
    else:
        st.selectbox(label, options, format_func=lambda i: f"{i}: {labels[i]}", key="token_pick", on_change=_picked)
    return token


# -- the layer, for the views that show one layer (the Layer view's grid has its own tabs, on the same state) ------
def _layer_picked(model_name: str) -> None:
    state.set_layer(model_name, st.session_state[f"layer_pick|{model_name}"])


def layer_picker(model: Model, model_name: str, layer: int, where=st) -> int:
    """A layer select on the page's one layer state (state.current_layer); returns the layer shown."""
    key = f"layer_pick|{model_name}"
    st.session_state[key] = layer
    return where.selectbox("Layer", range(model.n_layers), format_func=layer_name, key=key,
                           on_change=_layer_picked, args=(model_name,))


# -- saving figures --------------------------------------------------------------------------------------------
FIG_FORMAT = "fig_format"  # the sidebar's "Save figures as": what every plotly figure's camera button writes


def chart_config() -> dict:
    """Every plotly figure's config: no plotly logo, and the camera button (top right, on hover) saves the
    figure as SVG (vector: paper-ready, text as text) or PNG at twice its size, as the sidebar says."""
    fmt = st.session_state.get(FIG_FORMAT, "svg")
    return {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "scale": 2 if fmt == "png" else 1,
                                                           "filename": "mha-viz-figure"}}


def fitted_chart(fig, key: str, where=None, **kwargs):
    """`st.plotly_chart` for a figure whose plot keeps its aspect (a square heatmap, the tiled overview): its height
    follows the width the browser gives it. Plotly keeps a square square by shrinking it inside a figure of fixed
    height, so in a narrow window's column (1000x800: Rollout's ~260 px) a 196 px square stood over ~200 px of
    white. Here the chart's box gets a CSS height from its column's width (container query units), by the
    figure's `layout.meta["fit"]` (plotting._square_layout, tiled_figure): at most the planned height, less
    where the column is narrower; the chart is drawn at that height (height="stretch"). A figure without `fit` is
    drawn as it is."""
    where = where if where is not None else st
    fit = (fig.layout.meta or {}).get("fit") if isinstance(fig.layout.meta, dict) else None
    if not fit:
        return where.plotly_chart(fig, key=key, config=chart_config(), **kwargs)
    box_key = "fit_" + re.sub(r"[^A-Za-z0-9_-]", "_", key)
    box = where.container(key=box_key)
    height = (f"min({fit['height']:.0f}px, calc({fit['fixed_v']:.0f}px + (100cqw - {fit['fixed_h']:.0f}px) * "
              f"{fit['ratio']:.6f}))")
    box.html(f"<style>.st-key-{box_key}{{container-type:inline-size}}"
             f".st-key-{box_key} [data-testid='stPlotlyChart']{{height:{height} !important}}</style>")
    return box.plotly_chart(fig, key=key, height="stretch", config=chart_config(), **kwargs)


# -- long steps: the exact maps of Ablation effects and Patching ------------------------------------------------
def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 2 else "1–2 s"


def _running_key(button_key: str) -> str:
    return f"_running|{button_key}"


def exact_map_step(button_key: str, job, n_heads: int, seconds: float, compute, doing: str, model_name: str):
    """The button of a long exact map, labelled with what it will cost before it is pressed (`seconds`, measured on
    this server: estimates.exact_seconds), then a Stop, a progress bar that counts heads, and the work itself:
    `compute(progress)` under `threads.long_job` (idle cores may be borrowed). Returns what `compute` returned, or
    None when the button was not pressed. `job` identifies the work (model, text, ...): a job stopped mid-way (any
    click on the page ends the script run, Stop included) is still marked as running on the next run, which says
    so; nothing of it is kept. A finished map of `model_name` tells the next estimate how far off this one was
    (estimates.exact_finished)."""
    from mha_viz.app.estimates import exact_finished
    from mha_viz.app.threads import long_job

    running = _running_key(button_key)
    if st.session_state.pop(running, None) == job:
        st.info("Stopped before every head was measured: nothing was kept. Press the button to start again.")
    # Drawn at the page's full width: in a half column at 1000 px the label, and the cost in it, would be cut.
    label = f"Compute the exact map ({n_heads} heads, about {duration(seconds)} on this server)"
    if not st.button(label, key=button_key, help="The time is measured on this server: one forward pass of this "
                     "text, times the heads, times the share of layers each head's pass recomputes, at one torch "
                     "thread (faster when the server is idle and lends its other cores), corrected by how long the "
                     "last exact map of this model took here. Any click on the page "
                     "(e.g. Stop) stops it."):
        return None
    st.button("Stop", key=f"{button_key}_stop", help="Stops the computation; nothing is kept.")
    st.session_state[running] = job
    bar = st.progress(0.0, text=f"{doing}: 0 of {n_heads} heads")
    start = time.perf_counter()
    with long_job() as tick:
        def progress(fraction: float) -> None:
            bar.progress(fraction, text=f"{doing}: {round(fraction * n_heads)} of {n_heads} heads")
            tick()

        result = compute(progress)
    exact_finished(model_name, seconds, time.perf_counter() - start)
    st.session_state.pop(running, None)
    bar.empty()
    return result


# -- a head clicked in a chart (All layers' tiles, the Census map and scatter) ------------------------------------
def clicked_head(chart_state) -> tuple[int, int] | None:
    """(layer, head) from a plotly chart's selection state (st.session_state[chart key]): the customdata
    [layer, head] of the first clicked point that carries one."""
    selection = chart_state.get("selection", {}) if isinstance(chart_state, dict) else getattr(chart_state,
                                                                                              "selection", None)
    points = (selection.get("points") if isinstance(selection, dict) else getattr(selection, "points", None)) or []
    for point in points:
        data = point.get("customdata") if isinstance(point, dict) else None
        if data is not None and len(data) == 2:
            return int(data[0]), int(data[1])
    return None


def pick_clicked_head(clicked, options: list, pick_key: str, seen_key: str) -> None:
    """Put a clicked head into the select `pick_key`, once per click: a chart's selection lingers across reruns,
    and must not undo a head picked in the select afterwards. Runs before the select is drawn."""
    if clicked in options and clicked != st.session_state.get(seen_key):
        st.session_state[seen_key] = clicked
        st.session_state[pick_key] = clicked
