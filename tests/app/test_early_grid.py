"""The Layer grid's element sent while the run computes (views/layer.early_grid): once the forward has made the
layer on screen, the page is sent that layer, named by its own digest, the layers below it by theirs and the ones
above by None; the element after the view (grid_rest) completes it with the run's names and brings the rest.
Checked through AppTest (the page's path): when it is sent (before the forward hands the layers above over), what
it carries, and that what the page then holds is the run, for a new sentence and for toggles below and above the
layer on screen. A rerun the cache answers (a layer tab) sends the grid as before, whole."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest
from test_head_grid import Page, _assert_shows

from mha_viz import analysis
from mha_viz.app.components import head_grid
from mha_viz.app.views import layer as view
from mha_viz.web.payload import grid_data as whole_data

from helpers import APP, grid_data, loaded
from page_steps import send_sentence, set_layer

N_LAYERS = 6  # all-MiniLM-L6-v2, the default model


class _Spy(list):
    """Each grid element mounted: (its data, the layers the forward had handed over by then, since `clear`)."""

    def __init__(self):
        super().__init__()
        self.handed: list[int] = []

    def clear(self) -> None:
        super().clear()
        self.handed.clear()


def _spy(monkeypatch) -> _Spy:
    mounted = _Spy()
    handed = mounted.handed
    real_add, real_grid = head_grid.AsMade.add, view.head_grid
    monkeypatch.setattr(head_grid.AsMade, "add", lambda self, layer, w: handed.append(layer) or
                        real_add(self, layer, w))
    monkeypatch.setattr(view, "head_grid", lambda data, **k: mounted.append((data, list(handed))) or
                        real_grid(data, **k))
    return mounted



def _check_early(data: dict, handed: list[int], layer: int, rest: list[int]) -> None:
    assert data["digest"].startswith("early-") and data["layer"] == layer
    assert handed == list(range(layer + 1)), f"sent once layer {layer} was made, not after: {handed}"
    assert all(d is not None for d in data["digests"][:layer + 1])
    assert data["digests"][layer + 1:] == [None] * (N_LAYERS - layer - 1)
    assert data["rest"] == rest, "the layers the page lacks, or that are not known yet"


def test_a_new_sentence_sends_the_layer_on_screen_before_the_layers_above_are_made(monkeypatch):
    mounted = _spy(monkeypatch)
    from mha_viz.app import effect_panel

    running, real_running = [], effect_panel.running
    monkeypatch.setattr(effect_panel, "running", lambda layer, first: running.append(
        (layer, [l for d, _ in mounted for l in [d["layer"]]])) or real_running(layer, first))
    model = loaded("minilm")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    set_layer(at, "minilm", 2)
    page = Page()
    page.receive(grid_data(at))
    mounted.clear()
    running.clear()
    text = "An early grid: the layer on screen goes before the layers above it are made."
    send_sentence(at, text)
    (early, handed), = mounted
    _check_early(early, handed, 2, [0, 1, 3, 4, 5])
    assert sorted(head_grid.unpack(early["att"])) == [2], "the element carries the layer on screen only"
    run = model.run(text)
    want, _ = whole_data(early["tokens"], run.attentions, 0, (), 1, False, {})
    assert early["digests"][:3] == want["digests"][:3] and early["scale"][:3 * 12] == want["scale"][:3 * 12]
    whole = (*analysis.run_scores(run, model.causal), analysis.run_support(run, model.causal))
    assert early["badges"] == {f"2,{h}": analysis.badge_caption(*whole, 2, h, n=2) for h in range(12)}
    # Once the grid went, the summary's place said the run goes on; the summary then replaced it.
    assert running == [(2, [2])], running
    texts = [m.value for m in at.markdown]
    assert any("All heads are on" in t for t in texts) and not any("Running the model" in t for t in texts)
    data = grid_data(at)  # completed by the second element, as the page completes it
    assert data["early"] == early["digest"] and data["digest"] == want["digest"] and data["scale"] == want["scale"]
    page.receive(data)
    _assert_shows(page.weights(data), run.attentions)


def test_toggles_below_and_above_the_layer_on_screen_are_sent_early_too(monkeypatch):
    mounted = _spy(monkeypatch)
    model = loaded("minilm")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    text = "Toggles below and above the layer on screen, each sent early."
    page = Page()
    page.receive(grid_data(at))
    send_sentence(at, text)
    page.receive(grid_data(at))
    set_layer(at, "minilm", 3)
    page.receive(grid_data(at))
    for head, off in [((1, 4), {(1, 4)}), ((4, 0), {(1, 4), (4, 0)})]:
        mounted.clear()
        # As the grid's switch in another layer's tab does (layer.toggled): the page's state, then a rerun.
        at.session_state["off"] = {"minilm": set(off)}
        at.run()
        assert not at.exception, at.exception
        (early, handed), = mounted
        # The layers above the toggled one may have moved; those above the layer on screen are not known yet.
        _check_early(early, handed, 3, [l for l in range(N_LAYERS) if l != 3 and (l > head[0] or l > 3)])
        data = grid_data(at)
        # Only the layers above the toggled one moved: the page is sent those (the one on screen among them, if so).
        assert page.receive(data) == [l for l in range(N_LAYERS) if l > head[0]]
        _assert_shows(page.weights(data), model.run(text, ablate=off).attentions)


def test_a_rerun_the_cache_answers_sends_the_grid_whole(monkeypatch):
    mounted = _spy(monkeypatch)
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    send_sentence(at, "A layer tab after an early grid.")
    mounted.clear()
    set_layer(at, "minilm", 4)
    (data, handed), = mounted
    assert not data["digest"].startswith("early-") and None not in data["digests"] and handed == []
