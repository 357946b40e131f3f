"""The page through Streamlit's AppTest: no exception, a sentence in, a head off, a non-zero change shown."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from helpers import app_at, grid_data
from page_steps import layer_of, open_view, send_sentence, set_layer

APP = str(Path(__file__).resolve().parents[2] / "app.py")


_app = app_at


def _metric(at: AppTest, label_start: str) -> str:
    for metric in at.metric:
        if metric.label.startswith(label_start):
            return metric.value
    raise AssertionError(f"no metric starting {label_start!r}; have {[m.label for m in at.metric]}")



def test_minilm_sentence_toggle_and_change():
    at = _app()
    assert len(at.toggle) == 12 and at.toggle[0].label == "L0 H0"
    send_sentence(at, "Seven purple giraffes played chess beside the quiet river.")
    assert "chess" in grid_data(at)["tokens"], "the grid (and its token strip) shows the new sentence"
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    assert not at.exception, at.exception
    cos = float(_metric(at, "Cosine similarity"))
    assert cos < 1.0
    assert float(_metric(at, "Largest per-token change").rstrip("%")) > 0
    assert any("L0 H3" in md.value for md in at.markdown if "Heads off" in md.value)
    # Switching it back on restores the baseline: the effect panel disappears.
    at.toggle(key="tg|minilm|0|3").set_value(True).run()
    assert not any(m.label.startswith("Cosine similarity") for m in at.metric)


def test_heads_of_another_layer_keep_their_state():
    at = _app()
    at.toggle(key="tg|minilm|0|0").set_value(False).run()
    set_layer(at, "minilm", 3)
    assert [t.label for t in at.toggle][:1] == ["L3 H0"] and all(t.value for t in at.toggle)
    assert "L0 H0" in " ".join(md.value for md in at.markdown if "Heads off" in md.value)
    set_layer(at, "minilm", 0)
    assert at.toggle(key="tg|minilm|0|0").value is False


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_empty_text_is_a_friendly_message(text):
    at = _app()
    send_sentence(at, text)
    assert any("empty" in w.value for w in at.warning)


def test_long_text_says_how_much_was_dropped():
    at = _app()
    send_sentence(at, "word " * 600)
    assert any("tokens were dropped" in c.value for c in at.caption)


def test_layer_bulk_controls():
    at = _app()
    labels = [b.label for b in at.button]
    at.button[labels.index("All off")].click().run()
    assert not at.exception and all(t.value is False for t in at.toggle)
    labels = [b.label for b in at.button]
    at.button[labels.index("Reset")].click().run()
    assert all(t.value for t in at.toggle)


def test_effect_panel_shows_each_tokens_measured_change():
    from mha_viz import analysis
    from mha_viz.app.page import DEFAULT_TEXT

    from helpers import loaded

    at = _app()
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    assert not at.exception, at.exception
    model = loaded("minilm")
    base, run = model.run(DEFAULT_TEXT), model.run(DEFAULT_TEXT, ablate={(0, 3)})
    change = analysis.token_change(base.output, run.output, relative=True)  # (T,)
    strip = next(md.value for md in at.markdown if "change-strip" in md.value)
    for i, value in enumerate(change):
        assert f"title='position {i}: {float(value):.2%}'" in strip
    assert strip.count("position ") == len(base.tokens)


def test_only_this_head_keeps_one_head_of_the_layer():
    at = _app()
    at.selectbox(key="only|minilm|0").set_value("H5").run()
    assert not at.exception, at.exception
    on = [t.label for t in at.toggle if t.value]
    assert on == ["L0 H5"]
    assert at.selectbox(key="only|minilm|0").value == "Only one on…"


VIEWS = ["All layers", "Compare", "Ablation effects", "Similarity & scores", "Rollout & norms", "Notes & export"]


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_renders_with_a_head_off(view):
    at = _app()
    set_layer(at, "minilm", 1)
    at.toggle(key="tg|minilm|1|2").set_value(False).run()
    open_view(at, view)
    assert not at.exception, at.exception
    if view in ("All layers", "Compare", "Ablation effects", "Similarity & scores", "Rollout & norms"):
        assert len(at.get("plotly_chart")) >= 1  # the view's own
        assert any("change-strip" in md.value for md in at.markdown)  # the effect panel's per-token change
    if view == "Notes & export":
        assert any("Jain & Wallace 2019" in md.value for md in at.markdown)
        assert len(at.get("download_button")) >= 2


def test_importance_map_is_computed_on_request():
    at = _app()
    open_view(at, "Ablation effects")
    before = len(at.get("plotly_chart"))
    assert any(c.proto.spec and "Estimate (instant)" in c.proto.spec for c in at.get("plotly_chart"))
    button = at.button(key="imp_btn")
    assert "72 heads, about " in button.label and "on this server" in button.label  # said before it is pressed
    button.click().run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == before + 1
    # The estimate's rank correlation with the exact map, computed from both maps on the page's path.
    assert any(c.value.startswith("Rank correlation of the estimate with the exact map: 0.")
               or "Rank correlation of the estimate with the exact map: 1.00" in c.value for c in at.caption)


def test_a_stopped_importance_map_says_so_and_keeps_nothing():
    """Stop (any click while it runs) ends the script run mid-way: the next run finds the job's key still marked
    as running, says it stopped, and shows no exact map."""
    from mha_viz.app.common import _running_key
    from mha_viz.app.views.effects import BUTTON

    at = _app()
    open_view(at, "Ablation effects")
    before = len(at.get("plotly_chart"))
    at.session_state[_running_key(BUTTON)] = ("minilm", at.session_state["text"], (), None, "zero")
    at.run()
    assert any("Stopped before every head was measured" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == before


def test_compare_view_shows_chosen_heads_and_their_difference():
    at = _app()
    open_view(at, "Compare")
    at.multiselect(key="compare_pick").set_value(["L0 H2", "L3 H4", "L5 H0"]).run()
    assert not at.exception, at.exception
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(charts) == 1 + 2  # the three heads in one figure, two difference maps
    assert all(f'"{name}"' in charts[0] for name in ("L0 H2", "L3 H4", "L5 H0"))
    at.text_input(key="second_text").input("A completely different sentence.").run()
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(charts) == 1 + 2 + 1 and '"L3 H4, second sentence"' in charts[-1]


def test_a_shared_link_restores_the_view():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = "minilm"
    at.query_params["text"] = "Dogs chase cats in the yard."
    at.query_params["layer"] = "2"
    at.query_params["off"] = "L2H3,L4H0"
    at.query_params["compare"] = "L1H1,L2H2"
    at.query_params["view"] = "Layer"
    at.run()
    assert not at.exception, at.exception
    assert at.text_area(key="text_box").value == "Dogs chase cats in the yard."
    assert layer_of(at, "minilm") == 2
    assert at.toggle(key="tg|minilm|2|3").value is False
    heads_off = " ".join(md.value for md in at.markdown if "Heads off" in md.value)
    assert "L2 H3" in heads_off and "L4 H0" in heads_off
    open_view(at, "Compare")
    assert at.multiselect(key="compare_pick").value == ["L1 H1", "L2 H2"]


def test_garbage_in_the_link_is_a_notice():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["layer"] = "banana"
    at.query_params["off"] = "L99H99,zzz"
    at.run()
    assert not at.exception, at.exception
    notices = " ".join(w.value for w in at.warning)
    assert "not a number" in notices and "ignored" in notices
    assert len(at.toggle) == 12


def test_smollm2_toggle_shows_prediction_change():
    at = _app("smollm2")
    assert len(at.toggle) == 9
    send_sentence(at, "The capital of France is")
    at.toggle(key="tg|smollm2|0|0").set_value(False).run()
    assert not at.exception, at.exception
    kl = float(_metric(at, "KL(before").split()[0])
    assert kl > 0
    assert _metric(at, "Top prediction before")


def test_tiny_model_predictions_examples_and_unknown_words():
    at = _app("tiny")
    assert not at.exception, at.exception
    assert len(at.toggle) >= 4  # one per head of the layer
    labels = [b.label for b in at.button]
    assert any(label.startswith("agreement") for label in labels)
    assert any(label.startswith("repeat") for label in labels)
    assert any(label.startswith("nearby") for label in labels)
    send_sentence(at, "the keys to the zorblax are on the table .")
    assert any("unknown token" in c.value for c in at.caption)
    first = at.toggle[0]
    first.set_value(False).run()
    assert not at.exception, at.exception
    assert float(_metric(at, "KL(before").split()[0]) >= 0
    assert _metric(at, "Top prediction after")


# "Trained vs untrained" is now the Training view at its last step over step 0: tests/app/test_training_view.py


def test_similarity_pick_opens_compare_with_those_heads():
    at = _app()
    open_view(at, "Similarity & scores")
    a = at.selectbox(key="sim_a").value
    at.selectbox(key="sim_b").set_value("L5 H11" if a != "L5 H11" else "L0 H0").run()
    b = at.selectbox(key="sim_b").value
    at.button(key="sim_cmp").click().run()
    assert not at.exception, at.exception
    assert at.session_state["view"] == "Compare"
    assert at.multiselect(key="compare_pick").value == [a, b]


def test_tiny_scores_show_ground_truth_beside_the_measure():
    at = _app("tiny")
    agreement = [b for b in at.button if b.label.startswith("agreement")][0]
    agreement.click().run()
    open_view(at, "Similarity & scores")
    assert not at.exception, at.exception
    tables = [t for t in at.table]
    assert tables, "a ground-truth table"
    text = " ".join(str(t.value) for t in tables)
    assert "subject" in text and "uniform attention" in text


def test_all_layers_view_focuses_the_picked_head():
    at = _app()
    open_view(at, "All layers")
    at.selectbox(key="focus_pick").set_value((4, 7)).run()
    assert not at.exception, at.exception
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any('"L4 H7"' in spec for spec in titles)


def test_a_clicked_head_is_read_from_customdata():
    """One reader for every chart a head is clicked in (All layers' tiles, the Census map and scatter)."""
    from mha_viz.app.common import clicked_head

    assert clicked_head({"selection": {"points": [{"customdata": [2, 5], "x": 1, "y": 2}]}}) == (2, 5)
    assert clicked_head({"selection": {"points": [{"x": 1}, {"customdata": [0, 3]}]}}) == (0, 3)
    assert clicked_head({"selection": {"points": []}}) is None
    assert clicked_head(None) is None


def test_custom_masked_lm_folder_compares_predictions_at_the_mask(tmp_path):
    from helpers import tiny_masked_lm

    tiny_masked_lm(tmp_path)
    at = _app()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(tmp_path)).run()
    assert not at.exception, at.exception
    assert len(at.toggle) == 4
    send_sentence(at, "The capital of France is [MASK] .")
    at.toggle(key=f"tg|{tmp_path}|0|1").set_value(False).run()
    assert not at.exception, at.exception
    assert float(_metric(at, "KL(before").split()[0]) >= 0
    assert any("masked position" in c.value for c in at.caption), [c.value for c in at.caption]


def test_effect_panel_shows_the_top_predictions_before_and_after_as_bars():
    # A causal model's toggle shows its top-5 predictions as HTML bars (no plotly.js to load on a toggle): every
    # word of either top-5 list, with the probabilities the model gives it.
    import html

    from mha_viz.app.common import top_predictions, visible

    from helpers import loaded

    at = _app("tiny")
    set_layer(at, "tiny", 2)
    at.toggle(key="tg|tiny|2|1").set_value(False).run()
    assert not at.exception, at.exception
    model = loaded("tiny")
    text = at.session_state["text"]
    base, run = model.run(text), model.run(text, ablate={(2, 1)})
    bars = next(md.value for md in at.markdown if "prediction-bars" in md.value)
    before, after = top_predictions(model, base.logits[-1]), top_predictions(model, run.logits[-1])
    b, a = dict(before), dict(after)
    for word in dict.fromkeys([w for w, _ in before + after]):
        label = html.escape(visible(word, 24))
        assert f"title='{label}: {b.get(word, 0.0):.2%} before, {a.get(word, 0.0):.2%} after'" in bars
    assert not at.get("plotly_chart"), "the Layer view with a head off draws no plotly chart"


def test_ablation_effects_with_every_head_on_shows_no_before_and_after():
    """With no head off, "before" and "after" are the same run: the view showed a KL of 0.0000 and two equal
    top-5 lists above its note that nothing differs yet. Now the note stands alone; a head off brings the panel."""
    at = _app("tiny")
    open_view(at, "Ablation effects")
    assert not at.exception, at.exception
    assert not [m for m in at.metric if m.label.startswith("KL(before")]
    assert any("nothing differs yet" in i.value for i in at.info)
    open_view(at, "Layer")
    at.toggle[0].set_value(False).run()
    open_view(at, "Ablation effects")
    assert not at.exception, at.exception
    assert float(_metric(at, "KL(before")) > 0
    assert not any("nothing differs yet" in i.value for i in at.info)
