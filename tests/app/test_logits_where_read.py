"""The page's runs compute the LM head only where the open view reads it (app/effect_panel.logits_at): the Layer view's
readout needs the prediction position, the Ablation effects view every position. Counted on the tiny model's LM
head through the page (AppTest), never timed; the page's numbers equal those of a run with every position's
logits; and the run cache answers a request for fewer positions from a kept superset, never with rows it lacks."""
from __future__ import annotations

import pytest
import torch

from mha_viz import analysis
from mha_viz.app import cache
from mha_viz.app.common import top_predictions
from mha_viz.app.effect_panel import logits_at

from helpers import app_at, open_link, tiny_masked_lm
from page_steps import open_view

# In tiny's vocabulary; each test runs its own text, so the page computes its runs here instead of finding them kept.
TEXT = "anna met ben at the park . later ben gave the book to"


@pytest.fixture
def head_rows():
    """Positions the tiny model's LM head has run over since the fixture began (rows of its input)."""
    model = cache.get_model("tiny")
    seen = [0]

    def count(_module, args, _out):
        seen[0] += args[0].shape[:-1].numel()  # (B, P, D) -> B * P positions

    hook = model.lm.head.register_forward_hook(count)
    yield seen
    hook.remove()


def _caption(at) -> str:
    lines = [c.value for c in at.caption if c.value.startswith("Off means")]
    assert len(lines) == 1, [c.value for c in at.caption]
    return lines[0]


def test_the_layer_view_runs_the_lm_head_at_its_prediction_only(head_rows):
    text = TEXT + " anna"
    at = open_link({"model": "tiny", "text": text})
    assert head_rows[0] == 1, f"the LM head ran over {head_rows[0]} positions for one prediction"
    at.toggle(key="tg|tiny|0|0").set_value(False).run()
    assert not at.exception, at.exception
    assert head_rows[0] == 2, f"a toggle ran the LM head over {head_rows[0] - 1} positions for one prediction"
    # the readout equals the one read off runs holding every position's logits
    model = cache.get_model("tiny")
    base, run = model.run(text), model.run(text, ablate=[(0, 0)])
    position = len(base.tokens) - 1
    kl = analysis.next_token_kl(base.logits, run.logits, position)
    before = top_predictions(model, base.logits[position], 1)[0][0]
    after = top_predictions(model, run.logits[position], 1)[0][0]
    caption = _caption(at)
    assert f"KL {kl:.4f} nats" in caption and f"“{before}” → “{after}”" in caption, caption


def test_a_view_reading_every_position_gets_every_position(head_rows):
    text = TEXT + " ben"
    at = open_view(open_link({"model": "tiny", "text": text}), "Ablation effects")
    n = len(cache.get_model("tiny").run(text).tokens)
    assert head_rows[0] >= n + n, head_rows  # the page's run over every position, then the check run above
    at.selectbox(key="pred_pos").set_value(0).run()
    assert not at.exception, at.exception


def test_a_kept_superset_answers_and_a_missing_position_makes_a_new_run(head_rows):
    text = TEXT + " the"
    full = cache.get_run("tiny", text)
    n = len(full.tokens)
    assert head_rows[0] == n and full.logits_at is None
    one = cache.get_run("tiny", text, logits_at=(-1,))
    assert one is full and head_rows[0] == n  # every position held: no new run
    off = cache.get_run("tiny", text, off=((0, 1),), logits_at=(2, -1))
    assert off.logits_at == (2, n - 1) and head_rows[0] == n + 2
    assert cache.get_run("tiny", text, off=((0, 1),), logits_at=(n - 1,)) is off and head_rows[0] == n + 2
    wider = cache.get_run("tiny", text, off=((0, 1),), logits_at=(0, 2))  # position 0 is not held: run again
    assert wider.logits_at == (0, 2) and head_rows[0] == n + 4
    fresh = cache.get_model("tiny").run(text, ablate=[(0, 1)])
    for position in (0, 2, n - 1):
        held = wider if position in wider.logits_at else off
        assert torch.allclose(cache.logit_row(held, position), fresh.logits[position], atol=1e-6)
    with pytest.raises(LookupError, match="logits_at"):
        cache.logit_row(off, 0)


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    return str(tiny_masked_lm(tmp_path_factory.mktemp("masked_lm_logits")))


def test_a_masked_lm_reads_its_mask_and_nothing_without_one(masked_lm):
    """Where the mask is the prediction position (not the last), the page's run holds that row; a text with no
    mask reads no prediction, and its run computes no logits; the summary's numbers equal a full run's."""
    model = cache.get_model(masked_lm)
    text = "The capital of France is [MASK] , they say ."
    mask = model.run(text).tokens.index(model.mask_token)
    assert logits_at(model, text, "Layer") == (mask,) and logits_at(model, text, "Ablation effects") is None
    assert logits_at(model, "The capital of France .", "Layer") == ()
    empty = cache.get_run(masked_lm, "The capital of France .", logits_at=())
    assert empty.logits_at == () and model.prediction_position(empty) is None
    at = app_at()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(masked_lm).run()
    at.text_area(key="text_box").input(text)
    at.button[0].click().run()  # the form's "Show attention"
    assert not at.exception, at.exception
    full = model.run(text)
    now, p = top_predictions(model, full.logits[mask], 1)[0]
    assert f"top prediction now “{now}” ({p:.0%})" in _caption(at), _caption(at)


def test_a_model_without_an_lm_head_names_no_prediction_position():
    """MiniLM (an encoder: no LM head) predicts nowhere, so the page asks its runs for no particular positions and a
    text is kept once in the run cache, not once per view (as a run keyed by a prediction position it has not got)."""
    from mha_viz import load_model

    model = load_model("minilm")
    assert model.info.kind == "encoder"
    assert logits_at(model, "The cat sat on the mat.", "Layer") is None
    assert logits_at(cache.get_model("tiny"), TEXT, "Layer") == (len(cache.get_model("tiny").run(TEXT).tokens) - 1,)
