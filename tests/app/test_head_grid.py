"""The Layer view's browser grid through AppTest: the bytes it is sent decode to the attention the page shows, for
every layer; heads switched off, the sidebar's layer and the measured badges arrive with them."""
from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from mha_viz import analysis, measures
from mha_viz.app.common import display
from mha_viz.app.components.head_grid import unpack
from mha_viz.app.page import DEFAULT_TEXT

from helpers import APP, grid_data, grid_layers, grid_weights, loaded
from page_steps import set_layer


class Page:
    """What the browser keeps of the grid's messages: every layer received, under its digest (web/grid/layers.js)."""

    def __init__(self):
        self.held: dict[str, bytes] = {}

    def receive(self, data: dict) -> list[int]:
        """Keep the layers one run sent; -> those layers, in order."""
        sent = grid_layers(data)
        for layer, codes in sent.items():
            self.held[data["digests"][layer]] = codes
        return sorted(sent)

    def weights(self, data: dict) -> torch.Tensor:
        """(L, H, T, T): the run the page draws, from what it holds; fails if it lacks a layer."""
        missing = [l for l, d in enumerate(data["digests"]) if d not in self.held]
        assert not missing, f"the page holds no codes for layers {missing}"
        return grid_weights(data, {l: self.held[d] for l, d in enumerate(data["digests"])})


def _assert_shows(got: torch.Tensor, att: torch.Tensor) -> None:
    """One byte per weight, each head on its own maximum: within half a step of 1/255 of it."""
    step = att.flatten(2).amax(-1)[..., None, None] / 255  # (L, H, 1, 1)
    assert torch.all((got - att).abs() <= step / 2 + 1e-6)


def test_grid_is_sent_every_layer_of_the_run_the_page_shows():
    """The page holds every layer of the run it shows: the first run sends each layer once (the layer on screen
    with the grid, the others in the second element); a toggle in layer 0 sends the layers whose codes changed; a
    layer tab sends none."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    page, model = Page(), loaded("minilm")
    first = grid_data(at)
    assert sorted(unpack(first["att"])) == [first["layer"]] == [0]  # the layer on screen rides with the grid
    assert page.receive(first) == list(range(model.n_layers)) and first["rest"] == list(range(1, model.n_layers))
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    page.receive(grid_data(at))
    set_layer(at, "minilm", 2)
    assert not at.exception, at.exception
    data = grid_data(at)
    assert page.receive(data) == [] and data["rest"] == [], "a tab's rerun sends no layer: the page holds them"
    run = model.run(DEFAULT_TEXT, ablate={(0, 3)})
    tokens, att = display(model, run, False, False)
    assert (data["L"], data["H"], data["T"]) == (model.n_layers, model.n_heads, len(tokens))
    assert data["layer"] == 2 and data["off"] == [[0, 3]]
    got = page.weights(data)  # (L, H, T, T)
    _assert_shows(got, att)
    # A downstream head's pattern moved when L0 H3 went off: the grid shows the ablated run, not the base one.
    base = display(model, model.run(DEFAULT_TEXT), False, False)[1]
    step = att.flatten(2).amax(-1)[..., None, None] / 255  # (L, H, 1, 1)
    assert (att[5] - base[5]).abs().max() > 10 * step.max()
    scores, baselines = analysis.run_scores(run, model.causal)
    support = analysis.run_support(run, model.causal)
    for layer, head in [(0, 0), (2, 5), (5, 11)]:
        top = analysis.top_badges(scores, baselines, layer, head, n=1, support=support)
        assert data["badges"][f"{layer},{head}"].startswith("measured: " + (f"{top[0][1]:.0%}" if top else "no"))
    # The grid's own element carries the layer on screen's captions, so its drawing waits for no other layer's
    # measuring; the second element carries every head's, each the caption of the whole run's measures.
    assert set(data["own_badges"]) == {f"2,{h}" for h in range(model.n_heads)}
    assert len(data["badges"]) == model.n_layers * model.n_heads
    whole = (scores, baselines, support)
    for key, caption in data["badges"].items():
        layer, head = (int(x) for x in key.split(","))
        assert caption == analysis.badge_caption(*whole, layer, head, n=2), key


def test_a_toggle_sends_only_the_layers_it_moved():
    """A head switched off in layer 3 cannot change layers 0-3's attention (layer 3's weights are computed before
    its heads' outputs): the toggle's messages carry layers 4 and 5 only, and the page then holds the ablated run.
    A second page (a session of its own) is sent every layer."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    page, model = Page(), loaded("minilm")
    page.receive(grid_data(at))
    set_layer(at, "minilm", 3)
    page.receive(grid_data(at))
    at.toggle(key="tg|minilm|3|5").set_value(False).run()
    assert not at.exception, at.exception
    data = grid_data(at)
    assert page.receive(data) == [4, 5] and unpack(data["att"]) == {}, "layer 3, on screen, did not move"
    tokens, att = display(model, model.run(DEFAULT_TEXT, ablate={(3, 5)}), False, False)
    _assert_shows(page.weights(data), att)
    other = AppTest.from_file(APP, default_timeout=180)
    other.run()
    assert Page().receive(grid_data(other)) == list(range(model.n_layers))


def test_a_toggle_measures_the_captions_of_the_layers_above_it_only(monkeypatch):
    """Layer j's captions depend on the text and the heads off below j only: after a toggle in layer 3 the page
    measures layers 4 and 5, and layers 0-3 keep the captions of the run before. Every caption sent equals the
    ablated run measured whole."""
    from collections import OrderedDict

    from mha_viz.app.views import layer as view

    measured, real = [], view._captions
    monkeypatch.setattr(view, "_LAYER_CAPTIONS", OrderedDict())  # nothing kept from other tests' runs
    monkeypatch.setattr(view, "_captions", lambda run, causal, layers, n: measured.append(layers) or
                        real(run, causal, layers, n))
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert measured == [(0,), (1, 2, 3, 4, 5)], "the layer on screen first, then the others"
    set_layer(at, "minilm", 3)
    assert measured == [(0,), (1, 2, 3, 4, 5)], "a tab measures nothing again"
    at.toggle(key="tg|minilm|3|5").set_value(False).run()
    assert not at.exception, at.exception
    assert measured[2:] == [(4, 5)], measured
    model = loaded("minilm")
    run = model.run(DEFAULT_TEXT, ablate={(3, 5)})
    whole = (*analysis.run_scores(run, model.causal), analysis.run_support(run, model.causal))
    badges = grid_data(at)["badges"]
    assert badges == {f"{l},{h}": analysis.badge_caption(*whole, l, h, n=2)
                      for l in range(model.n_layers) for h in range(model.n_heads)}


def test_a_page_that_lost_layers_is_sent_them_again():
    """The grid's "resend" trigger (a message the page never saw) makes the next run send every layer: its
    callback forgets what the session sent."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.run()
    assert grid_layers(grid_data(at)) == {}, "nothing moved, nothing sent"
    assert len(at.session_state["grid|minilm|held"]["digests"]) == 6
    at.session_state["grid|minilm|held"] = None  # what the trigger's callback (head_grid, _resend) does
    at.run()
    data = grid_data(at)
    assert sorted(grid_layers(data)) == list(range(data["L"]))


def test_the_saved_figures_font_is_sent_once():
    """The font (a subset made in a thread, sent once it is ready) rides with the grid until the page holds it;
    after that the grid's messages name it (`font`) and carry it no more."""
    import time

    at = AppTest.from_file(APP, default_timeout=180)
    carried = []
    for _ in range(30):
        at.run()
        data = grid_data(at)
        carried.append((data["font"], data["att"] is not None and "font" in data["att"].column_names))
        if sum(sent for _, sent in carried) and data["font"] and not carried[-1][1]:
            break
        time.sleep(0.5)
    if not any(font for font, _ in carried):
        pytest.skip("no font subset here (DejaVu Sans or fontTools missing)")
    sent = [i for i, (font, column) in enumerate(carried) if column]
    assert len(sent) == 1 and carried[sent[0]][0], carried  # sent once, with its name
    assert all(font == carried[sent[0]][0] for font, _ in carried[sent[0]:]), carried


def test_shared_scale_sends_weights_on_zero_to_one():
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.sidebar.radio(key="scale").set_value("shared 0–1").run()
    data = grid_data(at)
    assert data["shared"] and set(data["scale"]) == {1.0}


def test_band_heads_of_minilm_l0_carry_the_census_nearby_badge():
    """MiniLM L0 H4 and H5 draw a band along the diagonal, yet their badges said "no location stands
    out". The badge now names the census's `nearby` score (mass within 2 positions, itself excluded), measured on
    the sentence shown, with the census's own scorer giving the same value."""

    from helpers import open_link

    text = "The keys to the old cabinet were on the table, so she took them."
    at = open_link({"model": "minilm", "text": text, "view": "Layer", "layer": "0"})
    data = grid_data(at)
    model = loaded("minilm")
    run = model.run(text)
    positions = measures.Positions.of(len(run.tokens), model.causal, run.tokens, run.token_ids, run.special)
    nearby, uniform = measures.get("nearby").measure(run.attentions, positions)  # (L, H), float
    word = measures.get("nearby").label
    for head in (4, 5):
        badge = data["badges"][f"0,{head}"]
        assert f"{float(nearby[0, head]):.0%} → {word}" in badge, badge
        assert float(nearby[0, head]) > uniform + 0.1
    # A previous-token head is named for that, not for the wider window that also holds its weight.
    assert data["badges"]["0,2"].startswith("measured: 100% → previous token"), data["badges"]["0,2"]
    assert word not in data["badges"]["0,2"], "its nearby mass is the previous token's: not said twice"


def test_the_badges_follow_what_off_means():
    """The captions were cached by the heads off alone: the same heads zero- and then mean-ablated kept the zero
    run's captions, though the two runs attend differently downstream."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    for head in range(4):
        at.toggle(key=f"tg|minilm|0|{head}").set_value(False).run()
    model = loaded("minilm")
    off = {(0, h) for h in range(4)}
    seen = {}
    for ablation in ("zero", "mean"):
        at.sidebar.radio(key="ablation").set_value(ablation).run()
        assert not at.exception, at.exception
        data = grid_data(at)
        run = model.run(DEFAULT_TEXT, ablate=off, ablation=ablation)
        scores, baselines = analysis.run_scores(run, model.causal)
        support = analysis.run_support(run, model.causal)
        for layer in range(1, model.n_layers):
            for head in range(model.n_heads):
                top = analysis.top_badges(scores, baselines, layer, head, n=1, support=support)
                want = "measured: " + (f"{top[0][1]:.0%}" if top else "no")
                assert data["badges"][f"{layer},{head}"].startswith(want), (ablation, layer, head)
        seen[ablation] = data["badges"]
    assert seen["zero"] != seen["mean"]  # the two runs' captions differ somewhere, so the check above can fail


def test_unknown_words_and_lone_repeats_give_no_role_on_the_badges():
    """Every unknown word shares one id, so each "repeated" every other: "<script>alert(1)</script>" (every word
    unknown to tiny) had its L0 H3 badge read "induction 86%", and a lone repeat was read as a percentage over one
    query. Now unknowns repeat nothing, and a reading over fewer than SUPPORT_FLOOR queries shows no number."""
    from helpers import open_link

    for text in ("<script>alert(1)</script>", "the quick brown fox jumps over the lazy dog near the quick brown fox"):
        data = grid_data(open_link({"model": "tiny", "text": text, "view": "Layer", "layer": "0"}))
        run = loaded("tiny").run(text)
        assert len(run.unknown) >= 9 and data["unknown"] == list(run.unknown)
        support = analysis.run_support(run, loaded("tiny").causal)
        assert support["induction"] < measures.SUPPORT_FLOOR and support["duplicate"] < measures.SUPPORT_FLOOR
        for badge in data["badges"].values():
            for label in (measures.get("induction").label, measures.get("duplicate").label):
                assert f"→ {label}" not in badge, (text, badge)  # never a number for them
    # MiniLM: emoji become [UNK]; the badges read no repeat from them
    text = "🙂 and 🙃 then 🙂 and 🙃 again 🙂 🙃"
    data = grid_data(open_link({"model": "minilm", "text": text, "view": "Layer", "layer": "0"}))
    assert data["unknown"] and all("→ induction" not in b and "→ same token earlier" not in b
                                   for b in data["badges"].values())


def test_the_layer_view_sets_this_input_against_the_census_once_one_is_made(monkeypatch):
    """No census, no line; with MiniLM's census made, L0's previous-token head (named by the census) is checked
    against the sentence shown, and a role on too few queries says so."""
    import mha_viz
    from mha_viz.app import cache

    from helpers import open_link

    link = {"model": "minilm", "text": DEFAULT_TEXT, "view": "Layer", "layer": "0"}
    at = open_link(link)
    assert not [c for c in at.caption if "Against the census" in c.value]
    census = mha_viz.head_census(loaded("minilm"))
    monkeypatch.setattr(cache, "census_made", lambda name, seed=0: census if name == "minilm" else None)
    at = open_link(link)
    line = " ".join(c.value for c in at.caption if "Against the census" in c.value)
    named = [h for h, _ in census.named("previous")]
    assert named and named[0][0] == 0 and f"L0 H{named[0][1]}" in line and "previous token" in line, line
