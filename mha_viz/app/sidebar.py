"""The sidebar: which model, how to draw the heads, what switching a head off means. Each function returns plain
values; the layer is not here but in the page (one state for the grid's tabs and every view, state.current_layer)."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import state
from mha_viz.app.common import ABLATION_LABELS, FIG_FORMAT, LEARNED_NOTE, WRITTEN_NOTE
from mha_viz.contract import Ablation, Model
from mha_viz.models import BUILTIN

CUSTOM = "custom"
SHARED_SCALE = "shared 0–1"


def model_label(choice: str) -> str:
    if choice == CUSTOM:
        return "your own: a Hugging Face id or a local folder"
    if choice in BUILTIN:
        return BUILTIN[choice]
    base, _, step = choice.rpartition("@")
    return f"{base} at training step {step} (saved with the app)"


def model_picker() -> str | None:
    """Model picker. Returns the model name to load, or None when the custom box is empty."""
    st.sidebar.header("Model")
    choices = list(BUILTIN) + list(st.session_state.get(state.EXTRA_MODELS, [])) + [CUSTOM]
    choice = st.sidebar.selectbox("Model", choices, format_func=model_label, key="model_choice")
    if choice == CUSTOM:
        custom = st.sidebar.text_input(
            "Model id or folder", key="custom_id", placeholder="e.g. prajjwal1/bert-tiny or /path/to/model",
            help="Loaded with eager attention, safetensors weights only, never remote code.",
        ).strip()
        return custom or None
    return choice


def display_options(model: Model) -> tuple[int, bool, bool, bool]:
    """(heatmaps per row, shared colour scale, hide special tokens, merge word pieces)."""
    st.sidebar.caption(f"{model.info.title}: {model.n_layers} layers x {model.n_heads} heads"
                       + (f" ({model.info.n_kv_heads} key/value heads shared)" if model.info.n_kv_heads else ""))
    st.sidebar.header("Display")
    n_cols = st.sidebar.slider("Heatmaps per row", 2, 6, 4, key="n_cols",
                               help="At most: a long text gets fewer, so each token keeps 3 px (the grid says so).")
    scale = st.sidebar.radio("Colour scale", ["each head's own max", SHARED_SCALE], key="scale")
    hide_special = st.sidebar.checkbox("Hide special tokens", key="hide_special",
                                       help="Drops [CLS]/[SEP]-like tokens and renormalises each row.")
    merge = st.sidebar.checkbox("Merge word pieces into words", key="merge",
                                help="Sum over a word's pieces as keys, mean over them as queries.")
    st.sidebar.radio("Save figures as", ["svg", "png"], format_func=str.upper, horizontal=True, key=FIG_FORMAT,
                     help="What each figure's camera button (top right, on hover) writes: SVG is vector (text stays "
                          "text), PNG is drawn at twice the figure's size. The Layer grid has its own SVG and PNG "
                          "buttons.")
    return n_cols, scale == SHARED_SCALE, hide_special, merge


def ablation(model) -> str:
    """What switching a head off means: one of `Ablation.kinds()` by its key (Model.run's `ablation`); carried in
    the URL. The choices and their help are each meaning's own words, as they hold for `model` (`help_for`)."""
    st.sidebar.header("Switching a head off")
    return st.sidebar.radio(
        "Sets the head's output to", list(ABLATION_LABELS), format_func=ABLATION_LABELS.get, key="ablation",
        help="A head's output is its slice of the output projection's input.\n\n"
             + "\n\n".join(f"**{a.label}**: {a.help_for(model)}" for a in Ablation.kinds())
             + "\n\nSee the Patching view's notes.",
    )


def learned_note(model) -> None:
    """What a heatmap is and is not, kept in view without pushing the heads down the page: learned patterns, or,
    on a model a program wrote, the one case where a head is a labeled module."""
    from mha_viz.app.views.notes import notes_text

    st.sidebar.info(WRITTEN_NOTE if model.written_heads() else LEARNED_NOTE, icon="ℹ️")
    with st.sidebar.expander("More: what a head is, and what a heatmap can and cannot tell you"):
        notes_text()
