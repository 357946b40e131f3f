"""UI state: which heads are off (per model, in the session) and the URL, which carries the model, text, layer,
heads off and what "off" means (an `Ablation` key), compared heads, the selected token and the open view.

Parsed once per browser session (so the user's later changes win), written back on every run. Anything in the
URL that does not parse or is out of range is dropped with a notice, never a traceback.
"""
from __future__ import annotations

import streamlit as st

from mha_viz.app import continue_link, reconnect
from mha_viz.app.cache import TARGET
from mha_viz.app.markdown import md_safe
from mha_viz.app.names import head_name, link_heads, parse_link_heads
from mha_viz.contract import ABLATIONS, Head
from mha_viz.models import BUILTIN, is_shipped
from mha_viz.web import kinds

MAX_PARAM_CHARS = 4000  # longer values are ignored: nobody shares a link that long on purpose
MAX_TEXT_IN_URL = 1500
LINK_MODEL = "_link_model"  # a custom model named by the link, not yet confirmed by the visitor
EXTRA_MODELS = "_extra_models"  # shipped models a link opened that the picker does not list (a saved training step)
LESSON_VIEW = "Lesson"
LESSON_KEY = "lesson"  # the Lesson's step, 1-based, as `?lesson=` carries it
LESSON_MODEL_KEY = "lesson_model"  # the learned model the Lesson runs on, as `?lesson_model=` carries it
LESSON_TYPED_KEY = "lesson_typed"  # {step: what the student typed into its box}, as `?lesson_text_N=` carries it
LESSON_PICKS_KEY = "lesson_picks"  # {question: its first pick}, as `?lesson_pick_KEY=` carries it
# A model with cross-attention: the kind its Layer grid shows (the switch's key, and the kind kept while the switch
# is not drawn: Streamlit drops a widget's state on a run without it), as `?kind=` carries it, and its target box,
# as `?target=` carries the target sent from it (cache.TARGET).
KIND_KEY = "grid_kind"
KIND_KEPT = "grid_kind_kept"
TARGET_BOX = "target_box"


def _quoted(value: str, limit: int = 30) -> str:
    """A value from the link, quoted for a notice: cut short and Markdown-escaped, so it shows as typed."""
    return md_safe(repr(str(value)[:limit]))


def _first(value) -> str:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return str(value)


def read_url_once(views: list[str]) -> list[str]:
    """Apply the URL's state to the session on its first run. Returns notices about what was ignored."""
    if st.session_state.get("_url_read"):
        return []
    st.session_state["_url_read"] = True
    notices = []
    params = {key: st.query_params.get_all(key) for key in st.query_params.keys()}
    for key, values in params.items():
        if len(values) > 1:
            notices.append(f"{_quoted(key)} appears {len(values)} times in the link; the first one is used.")
    get = {key: _first(values) for key, values in params.items()}
    for key, value in list(get.items()):
        if len(value) > MAX_PARAM_CHARS:
            notices.append(f"{_quoted(key)} in the link is {len(value):,} characters long and was ignored.")
            del get[key]
    model = get.get("model", "").strip()
    if model:
        if model in BUILTIN:
            st.session_state["model_choice"] = model
        elif is_shipped(model):  # tiny@N: a saved training step that ships with the app, nothing to confirm
            st.session_state[EXTRA_MODELS] = [model]  # the picker lists it under its own name, not as "your own"
            st.session_state["model_choice"] = model
        elif len(model) <= 300:
            st.session_state["model_choice"] = "custom"
            st.session_state["custom_id"] = model
            # Anyone can send a link naming any model: the page shows what it asks for and loads it only when
            # the visitor confirms (page.load_or_explain), never on open.
            st.session_state[LINK_MODEL] = model
    if "text" in get and get["text"].strip():
        st.session_state["text"] = get["text"]
        # A rebuilt session leaves the box to the browser, which resends the last sentence sent from it: newer than
        # the link's when it was sent as the old process died (reconnect.py). text.text_input runs that one.
        if not reconnect.rebuilt():
            st.session_state["text_box"] = get["text"]
    if "target" in get:  # the decoder's text of a model with cross-attention; ignored by a model that reads one text
        st.session_state[TARGET] = get["target"]
        if not reconnect.rebuilt():  # as the source's box: a rebuilt session leaves the box to the browser
            st.session_state[TARGET_BOX] = get["target"]
    if "kind" in get:  # range-checked here: the kinds are the same for every model with cross-attention
        if kinds.canonical(get["kind"]):  # in any case: kind=cross opens the Cross grid
            st.session_state[KIND_KEY] = st.session_state[KIND_KEPT] = kinds.canonical(get["kind"])
        else:
            notices.append(f"kind={_quoted(get['kind'], 20)} in the link is not one of {', '.join(kinds.KINDS)} "
                           "and was ignored.")
    pending = {}
    if "layer" in get:
        try:
            pending["layer"] = int(get["layer"])
        except ValueError:
            notices.append(f"layer={_quoted(get['layer'], 20)} in the link is not a number and was ignored.")
    if "off" in get:  # read against the loaded model (apply_pending): "Cross L0 H3" needs its layer counts
        pending["off_link"] = get["off"]
    if "compare" in get:
        heads, bad = parse_link_heads(get["compare"])
        notices += _not_heads("compare", bad)
        pending["compare"] = heads
    if "token" in get:  # range-checked by the token views, against the text's own tokens
        try:
            st.session_state["token"] = int(get["token"])
        except ValueError:
            notices.append(f"token={_quoted(get['token'], 20)} in the link is not a position and was ignored.")
    if "ablation" in get:
        if get["ablation"] in ABLATIONS:
            st.session_state["ablation"] = get["ablation"]
        else:
            notices.append(f"ablation={_quoted(get['ablation'], 20)} in the link is not one of "
                           f"{', '.join(ABLATIONS)} and was ignored; heads off are zeroed.")
    if "lesson" in get:  # range-checked by the Lesson view, against its steps
        try:
            st.session_state[LESSON_KEY] = int(get["lesson"])
        except ValueError:
            notices.append(f"lesson={_quoted(get['lesson'], 20)} in the link is not a step number and was ignored.")
    if "lesson_model" in get and get["lesson_model"].strip():  # checked by the Lesson view against its models
        st.session_state[LESSON_MODEL_KEY] = get["lesson_model"].strip()
    for key, value in get.items():  # what the student typed into a Lesson step's box, by step
        if key.startswith("lesson_text_") and key[12:].isdigit():
            st.session_state.setdefault(LESSON_TYPED_KEY, {})[int(key[12:])] = value
        if key.startswith("lesson_pick_") and len(value) <= 20:  # the Lesson checks it against its question
            st.session_state.setdefault(LESSON_PICKS_KEY, {})[key[12:]] = value
    continue_link.read_link(get)  # ?write=N&sample=1&temp=T&seed=S: checked where it is written, like typed settings
    if "view" in get:
        if get["view"] in views:
            st.session_state["view"] = get["view"]
        else:
            notices.append(f"view={_quoted(get['view'])} in the link is not a view of this app and was ignored.")
    st.session_state["_url_pending"] = pending
    return notices


def _not_heads(key: str, bad: list[str]) -> list[str]:
    return [f"{key}: {', '.join(_quoted(b, 20) for b in bad[:5])} in the link are not heads like 'L0H3' and were "
            "ignored."] if bad else []


def apply_pending(model_name: str, n_layers: int, n_heads: int, model=None) -> list[str]:
    """Range-check the URL's layer and heads against the loaded model, then apply them. `model`: the loaded model,
    whose kinds of attention the heads off may name ("Cross L0 H3"); None reads them as one stack's."""
    pending = st.session_state.pop("_url_pending", None)
    if not pending:
        return []
    notices = []
    if "off_link" in pending:
        raw = pending.pop("off_link")
        heads, bad = kinds.parse_set_link_heads(model, raw) if model is not None else parse_link_heads(raw)
        notices += _not_heads("off", bad)
        pending["off"] = heads
    if "layer" in pending:
        layer = pending["layer"]
        if 0 <= layer < n_layers:
            set_layer(model_name, layer)
        else:
            notices.append(f"layer {layer} does not exist in this model (0–{n_layers - 1}); showing layer 0.")
    for key in ("off", "compare"):
        heads = pending.get(key)
        if heads is None:
            continue
        valid = [h for h in heads if 0 <= h[0] < n_layers and 0 <= h[1] < n_heads]
        if len(valid) < len(heads):
            notices.append(f"{len(heads) - len(valid)} head(s) in '{key}' do not exist in this model and were ignored.")
        if key == "off":
            st.session_state.setdefault("off", {})[model_name] = set(valid)
        else:
            names = [head_name(h) for h in dict.fromkeys(valid)][:4]
            st.session_state["compare"] = names
            st.session_state["compare_pick"] = names
    return notices


def write_url(model_name: str, text: str, layer: int, off: set, view: str, two_texts: bool = False,
              model=None) -> None:
    """The one place the URL is written: once per run of the page, after the view has drawn (so a view's default,
    such as the selected token, is in it). The browser components never write it themselves. `two_texts`: the
    model has cross-attention, so the link also carries its target and the kind its grid shows (the layer is
    numbered within that kind). `model`: the loaded model, so heads off read as the page names them ("Cross L0
    H3"); None writes them as one stack's."""
    state = {"model": model_name, "layer": str(layer), "view": view}
    if len(text) <= MAX_TEXT_IN_URL:
        state["text"] = text
    if two_texts:
        target = str(st.session_state.get(TARGET, "") or "")
        if target.strip() and len(target) <= MAX_TEXT_IN_URL:
            state["target"] = target
        kind = st.session_state.get(KIND_KEPT)
        if kind in kinds.KINDS and kind != kinds.ENCODER:  # the Encoder is the default: such links stay as they were
            state["kind"] = kind
    if off:
        state["off"] = kinds.set_link_heads(model, off) if model is not None else link_heads(off)
    compare = st.session_state.get("compare")
    if compare:
        state["compare"] = ",".join(c.replace(" ", "") for c in compare)  # head_name()s without the space
    token = st.session_state.get("token")
    if isinstance(token, int):
        state["token"] = str(token)
    if view == LESSON_VIEW:  # the student's place: a reload opens the same step on the same model
        state[LESSON_KEY] = str(st.session_state.get(LESSON_KEY, 1))
        if st.session_state.get(LESSON_MODEL_KEY, "tiny") != "tiny":
            state[LESSON_MODEL_KEY] = str(st.session_state[LESSON_MODEL_KEY])
        for step, typed in sorted(st.session_state.get(LESSON_TYPED_KEY, {}).items()):
            if len(typed) <= MAX_TEXT_IN_URL:
                state[f"lesson_text_{step}"] = typed
        for question, pick in sorted(st.session_state.get(LESSON_PICKS_KEY, {}).items()):
            state[f"lesson_pick_{question}"] = str(pick)
    if view == "Layer":  # the continuation under the Layer grid: a reload writes the same again
        state.update(continue_link.link_params())
    if st.session_state.get("ablation", "zero") != "zero":  # zero is the default: links without it stay as they were
        state["ablation"] = st.session_state["ablation"]
    current = {key: st.query_params.get(key) for key in st.query_params.keys()}
    if current != state:
        st.query_params.from_dict(state)


# -- the layer shown, per model: one state for the grid's tabs, the heading, the bulk switches, the views' layer
# picker and the URL. A plain session key, not a widget's: a widget's state is dropped on a run that does not draw
# it, and the Layer view draws no layer widget (its tabs are in the browser grid).
def layer_key(model_name: str) -> str:
    return f"layer|{model_name}"


def current_layer(model_name: str, n_layers: int) -> int:
    layer = st.session_state.get(layer_key(model_name), 0)
    if not isinstance(layer, int) or not 0 <= layer < n_layers:
        layer = 0
    st.session_state[layer_key(model_name)] = layer
    return layer


def set_layer(model_name: str, layer: int) -> None:
    st.session_state[layer_key(model_name)] = int(layer)


# -- the open view -------------------------------------------------------------------------------------------
VIEW_KEY = "view"


def current_view(views: list[str]) -> str:
    view = st.session_state.get(VIEW_KEY)
    if view not in views:
        view = views[0]
        st.session_state[VIEW_KEY] = view
    return view


def set_view(view: str) -> None:
    st.session_state[VIEW_KEY] = view


# -- heads off, per model, in this session -------------------------------------------------------------------
def off_set(model_name: str) -> set[Head]:
    store = st.session_state.setdefault("off", {})
    return store.setdefault(model_name, set())


def toggle_key(model_name: str, layer: int, head: int) -> str:
    return f"tg|{model_name}|{layer}|{head}"


def on_toggle(model_name: str, layer: int, head: int) -> None:
    heads = off_set(model_name)
    if st.session_state[toggle_key(model_name, layer, head)]:
        heads.discard((layer, head))
    else:
        heads.add((layer, head))


def set_head(model_name: str, layer: int, head: int, on: bool) -> None:
    """A head switched on or off from the browser's head grid (the same state the toggles keep)."""
    heads = off_set(model_name)
    if on:
        heads.discard((layer, head))
    else:
        heads.add((layer, head))


def layer_off(model_name: str, layer: int, n_heads: int, off: bool) -> None:
    heads = off_set(model_name)
    layer_heads = {(layer, h) for h in range(n_heads)}
    if off:
        heads.update(layer_heads)
    else:
        heads.difference_update(layer_heads)


def only_head(model_name: str, layer: int, n_heads: int, keep: int) -> None:
    heads = off_set(model_name)
    heads.update((layer, h) for h in range(n_heads) if h != keep)
    heads.discard((layer, keep))


def reset(model_name: str) -> None:
    off_set(model_name).clear()
