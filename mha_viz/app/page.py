"""The page frame: sidebar (model, layer, display options), text box, token strip, the effect of the heads that
are off, then the chosen view (views/). `main()` lays the page out from small functions."""
from __future__ import annotations

import html
import sys

import streamlit as st

from mha_viz import analysis
from mha_viz.app import reconnect, state
from mha_viz.app.cache import get_model, get_run, memory_scope, set_threads
from mha_viz.app.common import (ABLATION_LABELS, ABLATION_SHORT, LEARNED_NOTE, display, display_notes, head_name,
                                md_safe, notes_text, predictions_panel, visible)
from mha_viz.app.context import ViewContext
from mha_viz.app.views import VIEWS
from mha_viz.contract import AttentionRun, InputError, Model, ModelLoadError
from mha_viz.models import BUILTIN
from mha_viz.settings import SettingsError, settings

CUSTOM = "custom"
DEFAULT_TEXT = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."
MAX_TEXT_CHARS = 200_000  # longer text is cut before tokenizing, and the page says so
LONG_STRIP = 80  # a strip of more tokens folds into an expander, so it does not push the heatmaps off screen
SHARED_SCALE = "shared 0–1"

def warm_up() -> None:
    """Load the default model and run the default sentence before any visitor asks (app.py calls this in a thread
    when the server starts). Goes through the same caches the page uses, whose locks make a visitor who arrives
    meanwhile wait for this load instead of starting a second one. A failure is left for the page to explain."""
    name = next(iter(BUILTIN))  # the sidebar's first choice
    try:
        set_threads()
        get_run(name, DEFAULT_TEXT)
    except Exception as err:  # the page shows the same error, with its advice, to the first visitor
        print(f"mha-viz: warming up {name!r} failed ({type(err).__name__}: {err}); the page will say why",
              file=sys.stderr)


@memory_scope  # the runs of a page hold their share of the process's memory budget until it is drawn
def main() -> None:
    st.set_page_config(page_title="mha-viz: attention heads, side by side", layout="wide")
    try:
        settings()
    except SettingsError as err:
        st.error(f"This server's settings are wrong: {md_safe(str(err))}")
        return
    set_threads()
    notices = state.read_url_once(list(VIEWS))
    st.title("mha-viz")
    st.caption("Every attention head as its own heatmap. Compare heads, switch them off, watch what changes.")
    reconnect.say_if_rebuilt()  # a session its server process lost, rebuilt from the link: say so
    for notice in notices:  # before loading: a link naming a model that fails to load still explains itself
        st.warning(f"Link: {notice}")
    name = sidebar_model()
    if name is None:
        st.info("Type a Hugging Face model id or a local folder in the sidebar, or pick a built-in model.")
        return
    model = load_or_explain(name)
    if model is None:
        return
    for notice in state.apply_pending(name, model.n_layers, model.n_heads):
        st.warning(f"Link: {notice}")
    layer, n_cols, shared_scale, hide_special, merge = sidebar_display(model, name)
    ablation = sidebar_ablation()
    learned_note()
    text = text_input(model)
    try:
        with st.spinner("Running the model..."):
            base = get_run(name, text)
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    token_strip(base, model)
    heads_and_views(model, name, text, layer, n_cols, shared_scale, hide_special, merge, ablation)


@st.fragment
@memory_scope  # a toggle's rerun holds its share of the process's memory budget until it is drawn
def heads_and_views(model: Model, name: str, text: str, layer: int, n_cols: int, shared_scale: bool,
                    hide_special: bool, merge: bool, ablation: str = "zero") -> None:
    """Everything a head toggle changes. A fragment, so a toggle reruns this part only, not the whole page."""
    heads_off = frozenset(state.off_set(name))
    try:
        with st.spinner("Running the model with these heads off..."):
            base = get_run(name, text)
            run = get_run(name, text, heads_off, ablation) if heads_off else base
    except InputError as err:  # e.g. mean ablation for a model with no example sentences
        st.warning(md_safe(str(err)))
        return
    off_summary(heads_off, ablation)
    # A fixed container: whether or not the panel has content, the elements below keep their place in the page,
    # so the browser updates them instead of redrawing every heatmap.
    with st.container():
        effect_panel(model, base, run)
    view = st.radio("View", list(VIEWS), horizontal=True, key="view", label_visibility="collapsed")
    state.write_url(name, text, layer, set(heads_off), view)
    tokens, att = display(model, run, hide_special, merge)
    display_notes(hide_special, merge, run)
    ctx = ViewContext(model=model, name=name, text=text, layer=layer, base=base, run=run, tokens=tokens, att=att,
                      heads_off=heads_off, hide_special=hide_special, merge=merge, n_cols=n_cols,
                      shared_scale=shared_scale, ablation=ablation)
    VIEWS[view](ctx)


# -- sidebar -------------------------------------------------------------------------------------------------
def sidebar_model() -> str | None:
    """Model picker. Returns the model name to load, or None when the custom box is empty."""
    st.sidebar.header("Model")
    choices = list(BUILTIN) + [CUSTOM]
    labels = {**BUILTIN, CUSTOM: "your own: a Hugging Face id or a local folder"}
    choice = st.sidebar.selectbox("Model", choices, format_func=labels.get, key="model_choice")
    if choice == CUSTOM:
        custom = st.sidebar.text_input(
            "Model id or folder", key="custom_id", placeholder="e.g. prajjwal1/bert-tiny or /path/to/model",
            help="Loaded with eager attention, safetensors weights only, never remote code.",
        ).strip()
        return custom or None
    return choice


def sidebar_display(model: Model, name: str) -> tuple[int, int, bool, bool, bool]:
    """(layer, heatmaps per row, shared colour scale, hide special tokens, merge word pieces)."""
    st.sidebar.caption(f"{model.info.title}: {model.n_layers} layers x {model.n_heads} heads"
                       + (f" ({model.info.n_kv_heads} key/value heads shared)" if model.info.n_kv_heads else ""))
    layer = st.sidebar.selectbox("Layer", range(model.n_layers), format_func=lambda i: f"L{i}", key=f"layer|{name}")
    st.sidebar.header("Display")
    n_cols = st.sidebar.slider("Heatmaps per row", 2, 6, 4, key="n_cols")
    scale = st.sidebar.radio("Colour scale", ["each head's own max", SHARED_SCALE], key="scale")
    hide_special = st.sidebar.checkbox("Hide special tokens", key="hide_special",
                                       help="Drops [CLS]/[SEP]-like tokens and renormalises each row.")
    merge = st.sidebar.checkbox("Merge word pieces into words", key="merge",
                                help="Sum over a word's pieces as keys, mean over them as queries.")
    return layer, n_cols, scale == SHARED_SCALE, hide_special, merge


def sidebar_ablation() -> str:
    """What switching a head off means: "zero" or "mean" (Model.run's `ablation`); carried in the URL."""
    st.sidebar.header("Switching a head off")
    return st.sidebar.radio(
        "Sets the head's output to", list(ABLATION_LABELS), format_func=ABLATION_LABELS.get, key="ablation",
        help="A head's output is its slice of the output projection's input. Zero is a value the head never "
             "produces, so zero ablation can overstate its role; the mean over reference text (the example "
             "sentences) removes what the head says about this input while keeping its typical output. "
             "See the Patching view's notes.",
    )


def load_or_explain(name: str) -> Model | None:
    if name == st.session_state.get(state.LINK_MODEL):
        explain_link_model(name)  # not loaded until the visitor confirms
        return None
    try:
        if name == "smollm2":
            with st.spinner("Loading SmolLM2 (the first start converts its GGUF file, about 30 s)..."):
                return get_model(name)
        with st.spinner(f"Loading {name}..."):
            return get_model(name)
    except ModelLoadError as err:
        st.error(md_safe(str(err)))  # the id may come from a link: show it as text, never as Markdown
    except Exception as err:  # an unexpected library error must not take the page down
        st.error(md_safe(f"Could not load '{name}': {type(err).__name__}: {str(err)[:300]}"))
    return None


def explain_link_model(name: str) -> None:
    """A link named a model that is not built in: say what it asks for and offer to load it. Opening a link must
    never make the server download or load a model the visitor did not choose, nor look anything up for it: a
    preview that said whether a path exists ("exists but is not a model folder") would let any link probe this
    server's files, so the wording is the same for every name until the visitor confirms. Then the loader checks
    the name, the folder and the size cap (MHA_VIZ_MAX_PARAMS) before any weights load."""
    if not settings().allow_custom:  # refused from the settings alone, before asking
        st.error("Custom models are turned off on this server (MHA_VIZ_ALLOW_CUSTOM=0). Pick a built-in model.")
        return
    if ".." in name or name.startswith(("http://", "https://")):  # refused from the name alone, as the loader would
        st.error("A link cannot name a model by a URL or a path with '..': use a Hugging Face id like "
                 "'owner/name', or open the page and type a folder in the sidebar.")
        return
    st.info(f"This link asks for a model that is not built in: **{md_safe(name)}**, a folder on this server or a "
            "Hugging Face id (downloaded from the hub when loaded, if this server can reach it). Nothing is looked "
            "up or loaded unless you confirm; then its size is estimated from its config and checked against this "
            "server's limits before any weights load.", icon="🔗")
    c1, c2 = st.columns(2)
    c1.button("Load this model", type="primary", key="link_model_load", on_click=_confirm_link_model)
    c2.button(f"Use {next(iter(BUILTIN))} instead", key="link_model_decline", on_click=_decline_link_model)


def _confirm_link_model() -> None:
    st.session_state.pop(state.LINK_MODEL, None)


def _decline_link_model() -> None:
    st.session_state.pop(state.LINK_MODEL, None)
    st.session_state["model_choice"] = next(iter(BUILTIN))


# -- text ----------------------------------------------------------------------------------------------------
def _set_text(text: str) -> None:
    st.session_state["text_box"] = text
    st.session_state["text"] = text


def _submit_text() -> None:
    st.session_state["text"] = st.session_state.get("text_box", "")


def text_input(model: Model) -> str:
    st.session_state.setdefault("text", DEFAULT_TEXT)
    st.session_state.setdefault("text_box", st.session_state["text"])
    with st.form("text_form", border=False):
        st.text_area("Sentence", key="text_box", height=80, max_chars=None,
                     help="Any text; it is cut at the model's token limit and the page says how much was dropped.")
        st.form_submit_button("Show attention", type="primary", on_click=_submit_text)
    examples = model.examples() or [("agreement", DEFAULT_TEXT, DEFAULT_TEXT)]
    cols = st.columns(min(len(examples), 4))
    for i, (label, text, hint) in enumerate(examples[:8]):
        cols[i % len(cols)].button(label, key=f"ex{i}", on_click=_set_text, args=(text,), help=f"{hint} — “{text}”",
                                   width="stretch")
    text = st.session_state["text"]
    if len(text) > MAX_TEXT_CHARS:
        st.info(f"The text has {len(text):,} characters; only the first {MAX_TEXT_CHARS:,} are tokenized.")
        text = text[:MAX_TEXT_CHARS]
    return text


def chip(token: str, title: str, style: str = "", note: str = "") -> str:
    """One token as an HTML chip (the token strip, the change strip): escaped, `title` on hover, `note` small
    after it. `title`, `style` and `note` are ours, never user text."""
    after = f" <small>{note}</small>" if note else ""
    return (f"<span style='display:inline-block;border:1px solid #ccc;border-radius:4px;padding:0 4px;margin:1px;"
            f"font-family:monospace;font-size:12px;{style}' title='{title}'>{html.escape(visible(token))}{after}"
            "</span>")


def token_strip(run: AttentionRun, model: Model) -> None:
    unknown = set(run.unknown)
    chips = [chip(tok, f"position {i}", "background:#fde2e1;border-color:#c44e52" if i in unknown else "")
             for i, tok in enumerate(run.tokens)]
    strip = f"<div data-testid='token-strip'>{''.join(chips)}</div>"
    if len(chips) > LONG_STRIP:
        with st.expander(f"Tokens ({len(chips)})"):
            st.markdown(strip, unsafe_allow_html=True)
    else:
        st.markdown(strip, unsafe_allow_html=True)
    notes = [f"{len(run.tokens)} tokens"]
    if run.truncated:
        notes.append(
            f"**{run.truncated} tokens were dropped**: the text is longer than the {model.info.max_tokens} tokens "
            "this view handles, so only the start is shown"
        )
    if unknown:
        words = ", ".join(sorted({visible(run.tokens[i]) for i in unknown}))
        notes.append(f"{len(unknown)} position(s) map to the unknown token (highlighted; the model does not know: "
                     f"{md_safe(words[:200])})")
    st.caption(" · ".join(notes))


# -- notes ---------------------------------------------------------------------------------------------------
def learned_note() -> None:
    st.info(LEARNED_NOTE, icon="ℹ️")
    with st.expander("More: what a head is, and what a heatmap can and cannot tell you"):
        notes_text()


def off_summary(heads_off: frozenset, ablation: str = "zero") -> None:
    if heads_off:
        st.markdown("**Heads off:** " + ", ".join(f"`{head_name(h)}`" for h in sorted(heads_off)))
        st.caption(f"Off means {ABLATION_LABELS[ablation]} (sidebar: Switching a head off).")
    else:
        st.caption("All heads are on. Switch a head off with the toggle under its heatmap.")


# -- effect of the heads that are off ------------------------------------------------------------------------
def effect_panel(model: Model, base: AttentionRun, run: AttentionRun) -> None:
    """What the heads that are off changed: predictions for language models, the embedding for encoders."""
    if not run.ablated:
        return
    st.subheader(f"What changed with these heads off ({ABLATION_SHORT[run.ablation]})")
    if len(run.ablated) == model.n_layers * model.n_heads:
        st.warning("Every head is off: no token can read any other token, so each position sees only itself "
                   "through the residual stream. The output below is what is left.")
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
        c1, c2 = st.columns(2)
        cos = analysis.cosine_change(base.output, run.output)
        c1.metric("Cosine similarity of sentence embedding (before vs after)", f"{cos:.5f}",
                  delta=f"{cos - 1:.5f}", delta_color="inverse" if cos < 1 else "off")
        c2.metric(*largest)
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
