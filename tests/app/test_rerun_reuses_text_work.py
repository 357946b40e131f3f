"""A toggle's rerun does only what the toggle changed (issue 54): the Layer grid's codes and captions of a layer
depend on the text and on the heads off below that layer, so a head switched off in layer l leaves layers 0..l as
they were, and the rerun makes neither their codes (head_grid.AsMade, under views/layer.early_grid's key) nor their
captions (views/layer.stack_labels) again; a toggle back on, which the run cache answers, makes none. Counted through
AppTest, on the page's path, with spies on the two functions that make them; what the page is sent is still the
run's (tests/app/test_early_grid.py, test_grid_codes_as_made.py)."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from mha_viz.app.components import head_grid
from mha_viz.app.views import layer as view
from mha_viz.web.payload import grid_data as whole_data

from helpers import APP, grid_data, loaded
from page_steps import send_sentence, set_layer

N_LAYERS = 6  # all-MiniLM-L6-v2, the default model


def _spies(monkeypatch) -> tuple[list[int], list[int]]:
    """(the layers whose grid codes were made, the layers whose captions were measured), in call order."""
    coded, captioned = [], []
    real_part, real_captions = head_grid.layer_part, view._captions
    monkeypatch.setattr(head_grid, "layer_part", lambda weights, shared: coded.append(len(coded)) or
                        real_part(weights, shared))
    monkeypatch.setattr(view, "_captions", lambda run, causal, layers, n_heads: captioned.extend(layers) or
                        real_captions(run, causal, layers, n_heads))
    return coded, captioned


def _toggle(at, off: set) -> None:
    """As the grid's switch does (layer.toggled): the page's heads off, then a rerun."""
    at.session_state["off"] = {"minilm": set(off)}
    at.run()
    assert not at.exception, at.exception


def test_a_toggle_makes_again_only_the_codes_and_captions_of_the_layers_it_moved(monkeypatch):
    coded, captioned = _spies(monkeypatch)
    model = loaded("minilm")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    set_layer(at, "minilm", 4)
    coded.clear()
    captioned.clear()
    text = "Only what a toggle moved is made again: the layers above the head switched off."
    send_sentence(at, text)
    assert len(coded) == N_LAYERS and sorted(set(captioned)) == list(range(N_LAYERS)), "a new text: every layer"
    # A head off in layer 2, then one in layer 3 beside it: each moves the layers above its own.
    for off, switched in (({(2, 5)}, 2), ({(2, 5), (3, 1)}, 3)):
        coded.clear()
        captioned.clear()
        _toggle(at, off)
        moved = list(range(switched + 1, N_LAYERS))
        assert len(coded) == len(moved), f"codes made for {len(coded)} layers, {moved} moved (heads off {off})"
        assert sorted(set(captioned)) == moved, f"captions measured for {captioned}, {moved} moved"
        data = grid_data(at)
        want, _ = whole_data(data["tokens"], model.run(text, ablate=off).attentions, 0, (), 1, False, {})
        assert data["digests"] == want["digests"] and data["scale"] == want["scale"]
    coded.clear()
    captioned.clear()
    _toggle(at, set())  # every head on again: the run of the new sentence, kept
    assert coded == [] and captioned == [], "a toggle back on makes no codes and measures no captions"
