"""mha-viz: streamlit run app.py"""
import streamlit as st

from mha_viz import ui, ui_state, ui_views
from mha_viz.contract import InputError

VIEWS = ["Layer", "All layers", "Compare", "Ablation effects", "Similarity & scores", "Rollout & norms",
         "Trained vs untrained", "Notes & export"]


def main() -> None:
    ui.set_threads()
    st.set_page_config(page_title="mha-viz: attention heads, side by side", layout="wide")
    notices = ui_state.read_url_once(VIEWS)
    st.title("mha-viz")
    st.caption("Every attention head as its own heatmap. Compare heads, switch them off, watch what changes.")

    for notice in notices:  # before loading: a link naming a model that fails to load still explains itself
        st.warning(f"Link: {notice}")
    name = ui.sidebar()
    if name is None:
        st.info("Type a Hugging Face model id or a local folder in the sidebar, or pick a built-in model.")
        return
    model = ui.load_or_explain(name)
    if model is None:
        return
    for notice in ui_state.apply_pending(name, model.n_layers, model.n_heads):
        st.warning(f"Link: {notice}")
    st.sidebar.caption(f"{model.info.title}: {model.n_layers} layers x {model.n_heads} heads"
                       + (f" ({model.info.n_kv_heads} key/value heads shared)" if model.info.n_kv_heads else ""))
    layer = st.sidebar.selectbox("Layer", range(model.n_layers), format_func=lambda i: f"L{i}", key=f"layer|{name}")
    st.sidebar.header("Display")
    n_cols = st.sidebar.slider("Heatmaps per row", 2, 6, 4, key="n_cols")
    scale = st.sidebar.radio("Colour scale", ["each head's own max", "shared 0–1"], key="scale")
    hide_special = st.sidebar.checkbox("Hide special tokens", key="hide_special",
                                       help="Drops [CLS]/[SEP]-like tokens and renormalises each row.")
    merge = st.sidebar.checkbox("Merge word pieces into words", key="merge",
                                help="Sum over a word's pieces as keys, mean over them as queries.")

    ui.learned_note()
    text = ui.text_input(name)
    try:
        with st.spinner("Running the model..."):
            base = ui.get_run(name, text, ())
    except InputError as err:
        st.warning(str(err))
        return
    ui.token_strip(base, model)
    heads_and_views(model, name, text, layer, n_cols, scale, hide_special, merge)


@st.fragment
def heads_and_views(model, name: str, text: str, layer: int, n_cols: int, scale: str, hide_special: bool,
                    merge: bool) -> None:
    """Everything a head toggle changes. A fragment, so a toggle reruns this part only, not the whole page."""
    heads_off = tuple(sorted(ui.off_set(name)))
    with st.spinner("Running the model with these heads off..."):
        base = ui.get_run(name, text, ())
        run = ui.get_run(name, text, heads_off) if heads_off else base
    ui.off_summary(name)
    # A fixed container: whether or not the panel has content, the elements below keep their place in the page,
    # so the browser updates them instead of redrawing every heatmap.
    with st.container():
        ui.effect_panel(model, base, run)

    view = st.radio("View", VIEWS, horizontal=True, key="view", label_visibility="collapsed")
    ui_state.write_url(name, text, layer, set(heads_off), view)
    tokens, att = ui_views.display(run, hide_special, merge)
    ui_views.display_notes(run, hide_special, merge)

    if view == "Layer":
        st.subheader(f"Layer {layer}: all {model.n_heads} heads")
        ui.layer_controls(model, name, layer)
        ui.layer_grid(model, name, run, layer, n_cols, scale, tokens=tokens, att=att)
    elif view == "All layers":
        focus = ui_views.overview(model, name, tokens, att)
        ui_views.focused_head(tokens, att, focus, focus in ui.off_set(name))
    elif view == "Compare":
        ui_views.compare(model, name, run, tokens, att, hide_special, merge)
    elif view == "Ablation effects":
        ui_views.effects(model, name, text, base, run)
    elif view == "Similarity & scores":
        ui_views.similarity(model, att, (name, text, heads_off, hide_special, merge))
        if name.startswith("tiny"):
            ui_views.ground_truth_panel(run)
        ui_views.scores_table(model, run)
        ui_views.scores_across(model, name, [t for _, t, _ in ui.examples_for(name)] + [text])
    elif view == "Rollout & norms":
        ui_views.rollout_and_norms(model, name, text, run, layer)
    elif view == "Trained vs untrained":
        ui_views.twins(text, layer)
    else:
        ui.notes_page()
        ui_views.export(model, run)

main()
