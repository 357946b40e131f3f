"""The grid's codes made layer by layer as the forward hands each layer over (head_grid.AsMade, the engine's
`on_layer`): they equal the codes made from the whole run, on the page's path too. The page takes them for a new
sentence and for a toggle (each run its own call computes), and not where the grid draws something else than the
run's own attention (special tokens hidden) or a run the cache answered."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.app.components import head_grid
from mha_viz.models import interventions
from mha_viz.web.payload import grid_data as whole_data

from helpers import APP, grid_data, loaded
from page_steps import send_sentence


@pytest.mark.parametrize("shared", [False, True])
def test_codes_made_layer_by_layer_equal_the_whole_runs(shared):
    model = loaded("minilm")
    interventions._EARLIER.clear()
    made = head_grid.AsMade(shared)
    run = model.run("The parts of a run, made one layer at a time.", on_layer=made.add)
    made.filed(run.attentions)
    tokens = list(run.tokens)
    want, want_codes = whole_data(tokens, run.attentions, 0, (), 1, shared, {})
    got, codes = whole_data(tokens, run.attentions, 0, (), 1, shared, {}, parts=made.parts(run.attentions, shared))
    assert codes == want_codes and got == want
    assert made.parts(run.attentions, not shared) is None, "codes of the other scale are not these"
    enc = head_grid._encoded(tokens, run.attentions, shared)
    assert enc.codes == want_codes and enc.data == want and id(run.attentions) not in head_grid._MADE


def test_a_run_the_cache_answered_files_nothing():
    model = loaded("minilm")
    made = head_grid.AsMade(False)
    run = model.run("Nothing handed over.")
    made.filed(run.attentions)
    assert id(run.attentions) not in head_grid._MADE


def _spy(monkeypatch) -> list[bool]:
    """Each encoding of a run for the grid: whether it took codes made as the forward went."""
    took, real = [], head_grid.grid_data
    monkeypatch.setattr(head_grid, "grid_data", lambda *a, parts=None, **k: took.append(parts is not None) or
                        real(*a, parts=parts, **k))
    return took



def test_the_page_draws_codes_made_as_the_forward_went(monkeypatch):
    took = _spy(monkeypatch)
    model = loaded("minilm")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    took.clear()
    text = "A sentence no test ran before, for codes made as the forward went."
    send_sentence(at, text)
    assert took == [True], "a new sentence's run is encoded from its layers as they were made"
    data = grid_data(at)
    want, _ = whole_data(data["tokens"], model.run(text).attentions, 0, (), 1, False, {})
    assert data["digests"] == want["digests"] and data["scale"] == want["scale"]
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    assert not at.exception, at.exception
    assert took == [True, True], "a toggle's run too (layers taken over, then the ones computed)"
    data = grid_data(at)
    run = model.run(text, ablate={(0, 3)})
    want, _ = whole_data(data["tokens"], run.attentions, 0, (), 1, False, {})
    assert data["digests"] == want["digests"] and data["scale"] == want["scale"]  # digests: of codes and scales


def test_special_tokens_hidden_encode_the_grid_from_what_it_draws(monkeypatch):
    took = _spy(monkeypatch)
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.checkbox(key="hide_special").check().run()
    took.clear()
    send_sentence(at, "Another sentence no test ran before, with its special tokens hidden.")
    assert took == [False], "the grid draws the hidden-token view, not the run's own attention"
