"""Link consent and model loading: a link may name any model, but only a model that ships with the app loads on
open; any other is described (id, where it would come from, its size when it can be estimated offline) and loaded
when the visitor confirms. A saved-training-step name at a step that was not saved says which steps exist."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import state
from mha_viz.app.cache import get_model
from mha_viz.app.common import md_safe
from mha_viz.contract import Model, ModelLoadError
from mha_viz.models import BUILTIN, checkpoints, preview_custom


def load_or_explain(name: str) -> Model | None:
    if name == st.session_state.get(state.LINK_MODEL):
        explain_link_model(name)  # not loaded until the visitor confirms
        return None
    try:
        # Said for every model, never by comparing names: a first start may convert or download weights.
        with st.spinner(f"Loading {name} (a model's first start on this server can take about 30 s: some convert "
                        "their weights once)..."):
            return get_model(name)
    except ModelLoadError as err:
        st.error(md_safe(str(err)))  # the id may come from a link: show it as text, never as Markdown
    except Exception as err:  # an unexpected library error must not take the page down
        st.error(md_safe(f"Could not load '{name}': {type(err).__name__}: {str(err)[:300]}"))
    return None


def unsaved_step(name: str) -> str | None:
    """For "model@N" where the model is built in and saved at training steps but not at N: the sentence that says
    which steps exist. None for any other name."""
    base, at, step = name.strip().rpartition("@")
    if not at or base not in BUILTIN or not step.isdigit():
        return None
    steps = checkpoints(base)
    if not steps or int(step) in steps:
        return None
    return (f"{md_safe(base)} was not saved at training step {int(step):,}. The saved steps are "
            f"{', '.join(f'{s:,}' for s in steps)}: open one with model={md_safe(base)}@STEP, or pick "
            f"{md_safe(base)} in the sidebar for its last step.")


def explain_link_model(name: str) -> None:
    """A link named a model that is not built in: say what it asks for, found offline (the id, a folder or a hub
    id, its size from a config already on this machine), and offer to load it. Opening a link must never make
    the server download or load a model the visitor did not choose."""
    step = unsaved_step(name)
    if step:
        st.warning(step, icon="🔗")
        st.button(f"Use {name.rpartition('@')[0]} instead", key="link_model_decline", on_click=_decline_link_model,
                  args=(name.rpartition("@")[0],))
        return
    try:
        preview = preview_custom(name)
    except ModelLoadError as err:  # refused before anything loads: custom models off, a bad name, over the cap
        st.error(md_safe(str(err)))
        return
    where = ("a folder on this server" if preview.kind == "folder"
             else "a Hugging Face id, downloaded from the hub when loaded (if this server can reach it)")
    size = (f"about {preview.params / 1e6:,.1f}M parameters, {preview.where}" if preview.params
            else f"size unknown: {preview.where}")
    st.info(f"This link asks for a model that is not built in: **{md_safe(name)}**, {where}; {size}. "
            "It is loaded only if you confirm.", icon="🔗")
    c1, c2 = st.columns(2)
    c1.button("Load this model", type="primary", key="link_model_load", on_click=_confirm_link_model)
    c2.button(f"Use {next(iter(BUILTIN))} instead", key="link_model_decline", on_click=_decline_link_model)


def _confirm_link_model() -> None:
    st.session_state.pop(state.LINK_MODEL, None)


def _decline_link_model(instead: str | None = None) -> None:
    st.session_state.pop(state.LINK_MODEL, None)
    st.session_state["model_choice"] = instead or next(iter(BUILTIN))
