"""Every number on the page is the one the analysis measured. Each test drives the page through AppTest
and compares what it shows with the analysis run on its own, so each fails if its bug came back."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1 import app_test as app_test_module

from mha_viz import analysis, load_model, measures
from mha_viz.app.page import DEFAULT_TEXT
from mha_viz.contract import ModelLoadError

from helpers import app_at, grid_data, heatmap_z, loaded, tiny_masked_lm
from page_steps import open_view, send_sentence, set_layer
from reference import head_importance_loop, same_token_reference

_app = app_at



def _chart(at: AppTest, key: str) -> dict:
    """The plotly figure of the chart with this key, as the page sent it."""
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith("-" + key):  # a keyed element's id ends with its key
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart {key!r}; have {[c.proto.id for c in at.get('plotly_chart')]}")


_z = heatmap_z


@pytest.fixture
def downloads(monkeypatch):
    """The files behind the page's download buttons: AppTest keeps them in an in-memory store per run."""
    stores = []

    class Recording(app_test_module.MemoryMediaFileStorage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stores.append(self)

    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", Recording)

    def read(button) -> bytes:
        return stores[-1].get_file(button.proto.url.rsplit("/", 1)[-1]).content

    return read


def _badges(at: AppTest) -> list[str]:
    """The measured-score caption under each head of the layer view (drawn by its browser grid), in head order."""
    data = grid_data(at)
    return [data["badges"][f"{data['layer']},{h}"] for h in range(data["H"])]


# -- 1. the same-token score reaches the badge, the table, the spread over examples ----------------------------
def test_same_token_score_reaches_the_badges_the_table_and_the_spread():
    model = loaded("minilm")
    run = model.run(DEFAULT_TEXT)
    scores, baselines = analysis.run_scores(run, model.causal)
    # The same-token score and its baseline from an independent loop, so a regression in run_scores shows here.
    scores["duplicate"] = same_token_reference(run.attentions, run.token_ids, run.special)
    uniform = analysis.uniform_pattern(len(run.tokens), model.causal)[None, None]  # (1, 1, T, T)
    baselines["duplicate"] = float(same_token_reference(uniform, run.token_ids, run.special)[0, 0])
    support = analysis.run_support(run, model.causal)
    expected = {h: f"{v:.0%} → {measures.get(name).label}, {measures.queries_words(support[name])}"
                for h in range(model.n_heads)
                for name, v in analysis.top_badges(scores, baselines, 0, h, n=2, support=support)
                if name == "duplicate"}
    # The caption names a head's two strongest scores (" · " between them); the same-token score is one of them.
    assert expected, "the default sentence repeats words; some L0 head should name the same-token score"

    at = _app()
    badges = _badges(at)
    assert len(badges) == model.n_heads
    for head, piece in expected.items():
        assert badges[head].startswith("measured: ") and piece in badges[head].split(": ", 1)[1].split(" · "), \
            (badges[head], piece)

    open_view(at, "Similarity & scores")
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    shown = table["duplicate"].iloc[:-1].to_numpy(dtype=float).reshape(model.n_layers, model.n_heads)
    assert not np.isnan(shown).any()
    assert np.allclose(shown, scores["duplicate"].numpy().round(3), atol=1e-6)

    at.button(key="scores_multi").click().run()
    assert not at.exception, at.exception
    spread = at.dataframe[1].value["duplicate"]
    assert (spread != "—").all(), "every example repeats a token, so every head has a mean ± spread"


# -- 8 (and 1). the JSON export carries every score of the run it exports ---------------------------------------
def test_json_export_carries_the_scores_of_the_run_shown(downloads):
    model = loaded("minilm")
    at = _app()
    set_layer(at, "minilm", 1)
    at.toggle(key="tg|minilm|1|2").set_value(False).run()
    open_view(at, "Notes & export")
    assert not at.exception, at.exception
    button = [b for b in at.get("download_button") if "JSON" in b.label][0]
    payload = json.loads(downloads(button))
    run = model.run(DEFAULT_TEXT, ablate={(1, 2)})
    scores, _ = analysis.run_scores(run, model.causal)
    scores["duplicate"] = same_token_reference(run.attentions, run.token_ids, run.special)  # independent of run_scores
    assert payload["ablated"] == [[1, 2]]
    assert set(payload["scores"]) == set(analysis.SCORE_NAMES)
    for name, value in scores.items():
        exported = np.array(payload["scores"][name], dtype=float)  # null (NaN) where not measurable
        assert exported.shape == (model.n_layers, model.n_heads)
        assert np.allclose(exported, value.numpy(), atol=1e-4, equal_nan=True), name
    assert not np.isnan(np.array(payload["scores"]["duplicate"], dtype=float)).any()


# -- 2. byte-level pieces are text on the page; part of a character is a byte marker, never mojibake or U+FFFD --
def test_smollm2_token_strip_shows_decoded_pieces():
    at = _app("smollm2")
    send_sentence(at, "naïve 日本")
    grid = grid_data(at)["tokens"]  # the Layer view's strip is the grid's own
    assert "ïve" in grid and "⟨e6⟩" in " ".join(grid)
    assert not any("Ã" in t or "�" in t for t in grid)
    open_view(at, "Compare")  # a view without its own strip: the page draws it, once
    strips = [md.value for md in at.markdown if "token-strip" in md.value]
    assert len(strips) == 1
    assert ">ïve<" in strips[0] and "⟨e6⟩" in strips[0]
    assert "Ã" not in strips[0] and "�" not in strips[0]


# -- 3. merged words: punctuation and lines apart, each word's label the decoding of its ids ------------------
def test_merged_words_are_decoded_and_never_cross_a_line():
    from mha_viz import plotting

    at = _app("smollm2")
    send_sentence(at, "The naïve café,\nunbelievable 日本語.")
    at.sidebar.checkbox(key="merge").check().run()
    open_view(at, "Compare")  # a plotly view: the Layer grid is drawn in the browser
    assert not at.exception, at.exception
    row = _chart(at, "cmp_row")
    words = ["The", " naïve", " café", ",", "\n", "unbelievable", " 日本語", "."]
    assert row["data"][0]["x"] == plotting.axis_labels(words)
    assert any("word pieces are merged" in c.value for c in at.caption)


# -- 4. the norm view: a switched-off head adds nothing, and the page says so -----------------------------------
@pytest.mark.parametrize("name", ["minilm", "tiny"])
def test_norm_inputs_of_a_switched_off_head_are_zero(name):
    model = loaded(name)
    text = "the keys to the cabinet are on the table ."
    values, _ = model.norm_inputs(text, {(1, 2)})  # (L, H, K, dh)
    assert torch.count_nonzero(values[1, 2]) == 0
    assert torch.count_nonzero(values[1, 3]) > 0 and torch.count_nonzero(values[0, 2]) > 0


def test_norm_view_says_the_head_is_off_and_draws_no_norms_for_it():
    at = _app()
    set_layer(at, "minilm", 1)
    at.toggle(key="tg|minilm|1|2").set_value(False).run()
    open_view(at, "Rollout & norms")
    at.selectbox(key="norm_head").set_value(2).run()
    assert not at.exception, at.exception
    assert any("L1 H2 is switched off" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-norm_fig")]
    at.selectbox(key="norm_head").set_value(3).run()
    assert not any("switched off" in i.value for i in at.info)
    assert [c for c in at.get("plotly_chart") if c.proto.id.endswith("-norm_fig")]


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_norm_view_draws_weights_and_values_of_one_run(ablation):
    """The page's norm map ||alpha f(x)|| for a head after a switched-off one, against values recorded by forward
    hooks on an independent copy of the model with that head's output set by hand (0, or its reference mean over
    the examples' ordinary tokens): weights and values from the same run, whatever "off" means."""
    from reference import HookedReference, reference_means

    model = loaded("minilm")
    at = _app()
    text = at.session_state["text"]
    at.sidebar.radio(key="ablation").set_value(ablation).run()
    set_layer(at, "minilm", 2)
    at.toggle(key="tg|minilm|2|1").set_value(False).run()
    open_view(at, "Rollout & norms")
    at.selectbox(key="norm_head").set_value(2).run()  # L2 H2: its values do not depend on L2 H1, its weights do
    set_layer(at, "minilm", 3)
    at.selectbox(key="norm_head").set_value(0).run()  # L3 H0: after the switched-off head
    assert not at.exception, at.exception
    shown = heatmap_z(_chart(at, "norm_fig")["data"][0])  # (Q, K)
    ref = HookedReference(model)
    examples = [t for _, t, _ in model.examples()]
    setting = {(2, 1): 0.0 if ablation == "zero" else reference_means(ref, model, examples)[2, 1]}
    values = ref.values(text, setting)[3, 0]  # (K, dh)
    w_o = model.head_weights(3).w_o[0]  # (dh, D)
    att = model.run(text, ablate={(2, 1)}, ablation=ablation).attentions[3, 0]  # (Q, K)
    expected = att * (values @ w_o).norm(dim=-1)[None, :]  # (Q, K)
    np.testing.assert_allclose(shown, expected.numpy(), atol=1e-4)


# -- 5. rollout's raw panel averages the same heads as the rollout beside it ----------------------------------
def test_rollout_raw_mean_leaves_switched_off_heads_out():
    model = loaded("minilm")
    run = model.run(DEFAULT_TEXT, ablate={(1, 2)})
    on = torch.ones(model.n_heads, dtype=torch.bool)
    on[2] = False
    expected = run.attentions[1][on].mean(0)  # (Q, K)
    all_heads = run.attentions[1].mean(0)  # (Q, K) what the bug drew
    assert not torch.allclose(expected, all_heads, atol=1e-3), "the off head must make a visible difference"

    at = _app()
    set_layer(at, "minilm", 1)
    at.toggle(key="tg|minilm|1|2").set_value(False).run()
    open_view(at, "Rollout & norms")
    assert not at.exception, at.exception
    raw = _chart(at, "roll_raw")
    assert f"mean of the {model.n_heads - 1} heads on" in json.dumps(raw["layout"]["title"])
    assert np.allclose(_z(raw["data"][0]), expected.numpy(), atol=1e-6)
    assert any("Switched-off heads are left out of both panels" in c.value for c in at.caption)


# -- 6. head importance of a masked LM is measured where its prediction is read: the mask -----------------------
@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    return tiny_masked_lm(tmp_path_factory.mktemp("masked_lm"))


def test_masked_lm_importance_is_measured_at_the_mask(masked_lm):
    text = "The capital of France is [MASK] , they say ."
    model = load_model(str(masked_lm))
    base = model.run(text)
    mask = base.tokens.index(model.mask_token)
    assert mask < len(base.tokens) - 1, "the mask must not be the last position, or the bug would not show"

    at = _app()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(masked_lm)).run()
    send_sentence(at, text)
    open_view(at, "Ablation effects")
    assert at.selectbox(key="pred_pos").value == mask
    assert any(f"the KL divergence of the prediction at the masked position {mask}" in c.value for c in at.caption)
    at.button(key="imp_btn").click().run()
    assert not at.exception, at.exception
    shown = _z(_chart(at, "imp_map")["data"][0])
    at_mask = head_importance_loop(model, text, position=mask).numpy()  # (L, H)
    at_last = head_importance_loop(model, text, position=len(base.tokens) - 1).numpy()  # (L, H)
    assert not np.allclose(at_mask, at_last, rtol=0.05), "the two positions must differ for the test to mean much"
    assert np.allclose(shown, at_mask, rtol=1e-3, atol=1e-6)


# -- 7. a causal model gets no sentence-embedding cosine: that is an encoder's measure -------------------------
def test_causal_model_shows_no_embedding_cosine():
    at = _app("tiny")
    at.toggle(key="tg|tiny|0|1").set_value(False).run()
    assert not at.exception, at.exception
    labels = [m.label for m in at.metric]
    assert any(label.startswith("KL(before") for label in labels)
    assert not any("Cosine similarity" in label for label in labels), labels
    open_view(at, "Ablation effects")
    assert not at.exception, at.exception
    assert not any("Cosine similarity" in m.label for m in at.metric)
    assert not any("cosine" in c.value.lower() for c in at.caption)


# -- 12. a committed model that fails to load fails the suite, it is never skipped -----------------------------
def test_a_model_that_fails_to_load_fails_the_suite(monkeypatch):
    import helpers

    def broken(name):
        raise ModelLoadError(f"{name}: weights do not match the config")

    monkeypatch.setattr(helpers, "load_model", broken)
    # pytest.skip raises an exception that is not an Exception; catch everything so a skip shows up as a failure.
    with pytest.raises(BaseException) as raised:
        helpers._load.__wrapped__("tiny")
    assert raised.type is ModelLoadError
