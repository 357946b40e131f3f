"""The page frame: the sidebar (sidebar.py), link consent (link.py), the sentence (text.py), then a fragment with
the views' navigation, the effect of the heads that are off (heads_off.py) around the chosen view (views/),
and the URL, written once at the end. `main()` lays the page out from small functions."""
from __future__ import annotations

import sys
from contextlib import nullcontext

import streamlit as st

from mha_viz.app import heads_off as off_panel
from mha_viz.app import reconnect, sidebar, state
from mha_viz.app.cache import get_model, get_run
from mha_viz.app.common import METRIC_ROOM, display, display_notes, encoded_run, md_safe
from mha_viz.app.components import figure_font
from mha_viz.app.components.head_grid import AsMade
from mha_viz.app.components.nav import nav
from mha_viz.app.context import ViewContext
from mha_viz.app.link import load_or_explain
from mha_viz.app.memory import memory_scope
from mha_viz.app.text import DEFAULT_TEXT, kept_text, text_input, token_strip
from mha_viz.app.threads import set_threads
from mha_viz.app.views import NOT_ABOUT_THIS_RUN, VIEWS, navigation
from mha_viz.app.views import layer as layer_view
from mha_viz.app.views.layer import FIRST_GRID
from mha_viz.contract import InputError, Model
from mha_viz.models import BUILTIN
from mha_viz.settings import SettingsError, settings
from mha_viz.web.kinds import all_layers

__all__ = ["DEFAULT_TEXT", "main", "warm_up"]
# Streamlit's main column starts 6rem down (room for its toolbar): 2.5rem keeps the toolbar clear and gives the
# heads that space on the first screen.
_COMPACT = ("<style>[data-testid='stMainBlockContainer']{padding-top:4rem}"
            "[data-testid='stSidebarUserContent']{padding-top:0.5rem}"
            # A row of controls in a `wrap` container folds onto a second line before a label would be cut.
            ".st-key-wrap [data-testid='stHorizontalBlock']{flex-wrap:wrap;row-gap:0.4rem}"
            ".st-key-wrap [data-testid='stColumn']{min-width:5.5rem}"
            ".st-key-wrap [data-testid='stColumn']:has([data-testid='stSelectbox']){min-width:9.5rem}"
            ".st-key-wrap [data-testid='stColumn']:first-child{min-width:10rem}"
            # A row of metrics (common.metric_row) folds the same way before a value is cut ("+1…" for +1.048):
            # each column keeps the room its row's longest value needs; labels wrap instead of ending in "…".
            + "".join(f"[class*='st-key-mrow{w}_'] [data-testid='stHorizontalBlock']{{flex-wrap:wrap;row-gap:0.6rem}}"
                      f"[class*='st-key-mrow{w}_'] [data-testid='stColumn']{{min-width:{w}rem}}" for w in METRIC_ROOM)
            + "[data-testid='stMetricLabel'] *"
            "{white-space:normal!important;overflow-wrap:anywhere;text-overflow:clip!important}"
            # The heads-off summary's box has one height (heads_off.SUMMARY_PX); its lines stay one line each, cut
            # with an ellipsis on a narrow page (the full text is in the panel below the view) rather than wrapping
            # out of the box.
            ".st-key-heads_off_summary [data-testid='stMarkdown'] p"
            "{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}</style>")
# Views that draw their own token strip (the Layer grid's): the page's strip would show the tokens twice.
OWN_STRIP = {"Layer"}
SWITCHES = {"Layer"}  # views that draw every head's on/off switch (the grid's corners); the others point to it
# Views that draw the run itself as the head grid: the fragment makes their run, the grid's codes made as the forward
# goes (_made) and its element sent once the layer on screen is made (views/layer.early_grid).
GRID = {"Layer"}
# Views that bring their own input (each Lesson step has one the student replaces): the page's sentence box above
# them would be a second box, and a student could not tell which one drives what is drawn.
OWN_INPUT = {"Lesson"}
# On those views the sidebar's model, display and switching-off controls act on nothing (the Lesson runs its own
# models, and says which in each step): hidden, not dropped, so their values are there again on the other views.
_OWN_INPUT_SIDEBAR = (
    "<style>" + ",".join(f"[data-testid='stSidebarUserContent'] .st-key-{key}" for key in (
        "model_choice", "custom_id", "n_cols", "scale", "hide_special", "merge", "fig_format", "ablation"))
    + ",[data-testid='stSidebarUserContent'] [data-testid='stElementContainer']:has([data-testid='stHeading'])"
    ",[data-testid='stSidebarUserContent'] [data-testid='stElementContainer']:has([data-testid='stCaptionContainer'])"
    "{display:none}</style>")


FONT_AFTER_S = 30.0  # warm_up makes the font this long after the model, when no page has drawn a grid by then


def warm_up() -> None:
    """Load the default model and run the default sentence before any visitor asks (app.py calls this in a thread
    when the server starts). Goes through the same caches the page uses, whose locks make a visitor who arrives
    meanwhile wait for this load instead of starting a second one. A failure is left for the page to explain."""
    name = next(iter(BUILTIN))  # the sidebar's first choice
    try:
        set_threads()
        read = get_model(name).encode_text(DEFAULT_TEXT)
        get_run(name, read, logits_at=off_panel.logits_at(get_model(name), read, "Layer"))
    except Exception as err:  # the page shows the same error, with its advice, to the first visitor
        print(f"mha-viz: warming up {name!r} failed ({type(err).__name__}: {err}); the page will say why",
              file=sys.stderr)
    # The saved figures' font after the first page's grid is sent, or a while with no visitor: subsetting is a
    # second of pure Python that held the GIL against torch's import, then against the first page's badges and
    # encoding (a page that comes first starts it itself: figure_font.font_for).
    FIRST_GRID.wait(timeout=FONT_AFTER_S)
    figure_font.warm()


@memory_scope  # the runs of a page hold their share of the process's memory budget until it is drawn
def main() -> None:
    st.set_page_config(page_title="mha-viz: attention heads, side by side", layout="wide")
    try:
        settings()
    except SettingsError as err:
        st.error(f"This server's settings are wrong: {md_safe(str(err))}")
        return
    set_threads()
    st.html(_COMPACT)  # a style only: Streamlit gives it no room on the page
    notices = state.read_url_once(list(VIEWS))
    reconnect.say_if_rebuilt()  # a session its server process lost, rebuilt from the link: say so
    st.sidebar.markdown("### mha-viz\nEvery attention head as its own heatmap: compare heads, switch them off, "
                        "watch what changes.")
    for notice in notices:  # before loading: a link naming a model that fails to load still explains itself
        st.warning(f"Link: {notice}")
    name = sidebar.model_picker()
    if name is None:
        st.info("Type a Hugging Face model id or a local folder in the sidebar, or pick a built-in model.")
        return
    model = load_or_explain(name)
    if model is None:
        return
    # Links name heads of every kind an encoder-decoder model has (web/kinds.py's one set).
    for notice in state.apply_pending(name, all_layers(model), model.n_heads, model=model):
        st.warning(f"Link: {notice}")
    n_cols, shared_scale, hide_special, merge = sidebar.display_options(model)
    ablation = sidebar.ablation(model)
    sidebar.learned_note(model)
    boxed = state.current_view(list(VIEWS)) not in OWN_INPUT
    if not boxed:
        st.html(_OWN_INPUT_SIDEBAR)
        st.sidebar.markdown("The model, display and switching-off settings of the other views are hidden here: "
                           "each Lesson step names the model it runs.")
    text = text_input(model) if boxed else kept_text()
    view = state.current_view(list(VIEWS))
    try:
        with st.spinner("Running the model..."):  # the LM head where the open view reads it, as the views ask
            read = model.encode_text(text)  # checked once: the positions and the run read this value
            if view not in GRID:  # the grid's view runs it in the fragment, to send the layer on screen early
                get_run(name, read, logits_at=off_panel.logits_at(model, read, view))
    except InputError as err:
        st.warning(md_safe(str(err)))
        return
    heads_and_views(model, name, text, n_cols, shared_scale, hide_special, merge, ablation, boxed)


def _made(view: str, shared_scale: bool, hide_special: bool, merge: bool) -> AsMade | None:
    """Where the open view draws the run as the head grid, with nothing hidden or merged (the grid then draws
    the run's own attention): its codes, made layer by layer as the forward computes each (head_grid.AsMade)."""
    return AsMade(shared_scale) if view in GRID and not (hide_special or merge) else None


@st.fragment
@memory_scope  # a toggle's rerun holds its share of the process's memory budget until it is drawn
def heads_and_views(model: Model, name: str, text: str, n_cols: int, shared_scale: bool, hide_special: bool,
                    merge: bool, ablation: str = "zero", boxed: bool = True) -> None:
    """Everything a head toggle, a layer tab or the navigation changes. A fragment, so they rerun this part only,
    not the whole page. `boxed`: whether the page's run drew the sentence box (the open view has no input of its
    own)."""
    heads_off = frozenset(state.off_set(name))
    n_layers = max(model.n_layers, model.decoder_layers())  # the most any kind has: a layer is within the grid's kind
    layer = state.current_layer(name, n_layers)
    view = state.current_view(list(VIEWS))
    if boxed == (view in OWN_INPUT):  # the navigation crossed into or out of a view with its own input
        st.rerun(scope="app")  # the box is outside this fragment: only the whole page can draw or drop it
    nav(navigation(), view, key="nav", on_view=state.set_view,
        on_layer=lambda l: state.set_layer(name, l) if 0 <= l < n_layers else None)
    # The grid's view: what goes above the view (the summary, the notes) and the view itself get their places now,
    # so the grid can be sent into its place while the run still computes, before what is drawn above it.
    above, below = (st.container(), st.container()) if view in GRID else (nullcontext(), nullcontext())
    summary_box = above.empty() if view in GRID else None  # the summary's place, "running" meanwhile (_running)
    try:
        with above, st.spinner("Running the model with these heads off..." if heads_off else "Running the model..."):
            read = model.encode_text(text)  # checked once: the positions and both runs read this value
            at = off_panel.logits_at(model, read, view)  # the positions this view reads the logits of
            made = _made(view, shared_scale, hide_special, merge)
            on_layer, early = (made.add if made else None), {}
            if made is not None and not model.has_cross_attention:  # the layer on screen sent once the run has it
                on_layer, early = _running(model, read, layer, summary_box, *layer_view.early_grid(
                    model, name, read, layer, heads_off, ablation, n_cols, made, below))
            base = get_run(name, read, logits_at=at, on_layer=None if heads_off else on_layer)
            run = get_run(name, read, heads_off, ablation, logits_at=at, on_layer=on_layer) if heads_off else base
            if made:
                made.filed(run.attentions)
    except InputError as err:  # e.g. mean ablation for a model with no example sentences
        st.warning(md_safe(str(err)))
        return
    about_run = view not in NOT_ABOUT_THIS_RUN
    tokens, att = display(model, run, hide_special, merge)
    ctx = ViewContext(model=model, name=name, text=text, layer=layer, base=base, run=run, tokens=tokens, att=att,
                      heads_off=heads_off, hide_special=hide_special, merge=merge, n_cols=n_cols,
                      shared_scale=shared_scale, ablation=ablation, early=early or None)
    try:
        _above_and_view(ctx, view, above, below, about_run, summary_box)
        if about_run:
            off_panel.effect_panel(ctx)
    finally:  # the URL is written here only, after the view chose its defaults (the selected token)
        state.write_url(name, text, layer, set(heads_off), view, two_texts=model.has_cross_attention,
                        model=model)


def _running(model: Model, read, layer: int, summary_box, grid_on_layer, sent: dict):
    """-> (on_layer, the grid's early data): the grid's `on_layer` (views/layer.early_grid), and once it has sent
    the grid, the summary's place says the run goes on (heads_off.running) until the summary replaces it: the
    numbers above the grid are never the last sentence's beside this one's grid."""
    def on_layer(j: int, weights) -> None:
        had = bool(sent)
        grid_on_layer(j, weights)
        if sent and not had:
            with summary_box.container():
                off_panel.running(layer, lambda: token_strip(encoded_run(read, weights), model, chips=False))

    return on_layer, sent


def _above_and_view(ctx: ViewContext, view: str, above, below, about_run: bool, summary_box=None) -> None:
    model, base = ctx.model, ctx.base
    with above:
        if about_run:
            with summary_box.container() if summary_box is not None else nullcontext():
                if view not in OWN_STRIP:
                    token_strip(base, model)  # the chips and the token count, once
                    off_panel.summary(ctx, switches_here=view in SWITCHES)
                else:  # the view draws the chips itself: only the token count, in the summary's box
                    off_panel.summary(ctx, lambda: token_strip(base, model, chips=False),
                                      switches_here=view in SWITCHES)
            display_notes(ctx.hide_special, ctx.merge, ctx.run)
    with below:
        VIEWS[view](ctx)
