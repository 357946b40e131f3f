"""Link consent and model loading: a link may name any model, but only a model that ships with the app loads on
open; any other is described (id, where it would come from, its size when it can be estimated offline) and loaded
when the visitor confirms. A saved-training-step name at a step that was not saved says which steps exist."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import state
from mha_viz.app.cache import get_model
from mha_viz.app.common import md_safe
from mha_viz.contract import Model, ModelLoadError
from mha_viz.models import BUILTIN, checkpoints, spec
from mha_viz.settings import settings


def load_or_explain(name: str) -> Model | None:
    if name == st.session_state.get(state.LINK_MODEL):
        explain_link_model(name)  # not loaded until the visitor confirms
        return None
    try:
        # The registry's note for a built-in that is slow the first time (never a comparison of names here).
        found = spec(name)
        note = found.load_note if found is not None and found.load_note else (
            f"Loading {name}..." if found is not None else
            f"Loading {name} (a model's first start on this server can take a while: weights may be read or "
            "downloaded)...")
        with st.spinner(note):
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
    """A link named a model that is not built in: say what it asks for and offer to load it. Opening a link must
    never make the server download or load a model the visitor did not choose, nor look anything up for it: a
    preview that said whether a path exists ("exists but is not a model folder") would let any link probe this
    server's files, so the wording is the same for every name until the visitor confirms. Then the loader checks
    the name, the folder and the size cap (MHA_VIZ_MAX_PARAMS) before any weights load."""
    step = unsaved_step(name)
    if step:
        st.warning(step, icon="🔗")
        st.button(f"Use {name.rpartition('@')[0]} instead", key="link_model_decline", on_click=_decline_link_model,
                  args=(name.rpartition("@")[0],))
        return
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


def _decline_link_model(instead: str | None = None) -> None:
    st.session_state.pop(state.LINK_MODEL, None)
    st.session_state["model_choice"] = instead or next(iter(BUILTIN))
