"""mha-viz: streamlit run app.py"""
import streamlit as st

from mha_viz import ui
from mha_viz.contract import InputError


def main() -> None:
    st.set_page_config(page_title="mha-viz: attention heads, side by side", layout="wide")
    st.title("mha-viz")
    st.caption("Every attention head as its own heatmap. Compare heads, switch them off, watch what changes.")

    name = ui.sidebar()
    if name is None:
        st.info("Type a Hugging Face model id or a local folder in the sidebar, or pick a built-in model.")
        return
    model = ui.load_or_explain(name)
    if model is None:
        return
    st.sidebar.caption(f"{model.info.title}: {model.n_layers} layers x {model.n_heads} heads"
                       + (f" ({model.info.n_kv_heads} key/value heads shared)" if model.info.n_kv_heads else ""))
    layer = st.sidebar.selectbox("Layer", range(model.n_layers), format_func=lambda i: f"L{i}", key=f"layer|{name}")
    n_cols = st.sidebar.slider("Heatmaps per row", 2, 6, 4, key="n_cols")
    scale = st.sidebar.radio("Colour scale", ["each head's own max", "shared 0–1"], key="scale")

    ui.learned_note()
    text = ui.text_input(name)
    heads_off = tuple(sorted(ui.off_set(name)))
    try:
        with st.spinner("Running the model..."):
            base = ui.get_run(name, text, ())
            run = ui.get_run(name, text, heads_off) if heads_off else base
    except InputError as err:
        st.warning(str(err))
        return
    ui.token_strip(run, model)
    ui.off_summary(name)
    ui.effect_panel(model, base, run)

    st.subheader(f"Layer {layer}: all {model.n_heads} heads")
    ui.layer_controls(model, name, layer)
    ui.layer_grid(model, name, run, layer, n_cols, scale)


main()
