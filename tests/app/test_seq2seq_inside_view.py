"""Inside a head for an encoder-decoder folder (BART) through the page: the view opens the kind the Layer view's
switch holds, its query tokens are that kind's queries (the target's for Cross), and the drawn weights of a cross
head's query row are the run's cross_attentions row, over the source's tokens."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from helpers import seq2seq_page
from page_steps import open_view

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran"  # shorter than the source: cross-attention is (T, S), not square


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from tests.models.hf.test_seq2seq import seq2seq_folder

    return seq2seq_folder(tmp_path_factory.mktemp("bart"))


def _page(folder: Path):
    return seq2seq_page(folder, SOURCE, TARGET)


def _chart(at, key: str) -> dict:
    charts = [c for c in at.get("plotly_chart") if c.proto.id and key in c.proto.id]
    assert charts, f"no chart {key!r}"
    return json.loads(charts[0].proto.spec)


def _values(array) -> list[float]:
    if isinstance(array, dict):  # plotly's base64 typed array
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def test_a_cross_head_draws_the_runs_cross_attention_row(folder):
    from mha_viz.app.state import KIND_KEY
    from mha_viz.models.hf.loading import load_custom

    run = load_custom(str(folder)).run(SOURCE, target=TARGET)
    at = _page(folder)
    at.session_state[KIND_KEY] = "Cross"  # as the Layer view's switch left it
    open_view(at, "Inside a head")
    assert at.get("segmented_control")[0].value == "Cross"
    at.selectbox(key=f"layer_pick|{folder}").set_value(1).run()
    at.selectbox(key="inside_head").set_value(2).run()
    picker = at.pills(key="token_pick")
    assert len(picker.options) == len(run.target_tokens)  # the queries are the target's tokens
    picker.set_value(2).run()
    assert not at.exception, at.exception
    steps = _chart(at, "inside_steps")
    weights = torch.tensor(_values(steps["data"][1]["y"]))  # (S,): the weights row as the page draws it
    assert torch.allclose(weights, run.cross_attentions[1, 2, 2], atol=1e-5)
    assert len(steps["data"][1]["x"]) == len(run.tokens)  # over the source's tokens
    pattern = _chart(at, "inside_pattern")["data"][0]
    assert len(pattern["y"]) == len(run.target_tokens) and len(pattern["x"]) == len(run.tokens)
    assert any("carry no readings" in md.value for md in at.markdown)  # cross-attention: why none
    assert "Cross L1 H2" in steps["layout"]["title"]["text"]


def test_the_decoder_and_encoder_kinds_open_too(folder):
    from mha_viz.app.state import KIND_KEY
    from mha_viz.models.hf.loading import load_custom

    run = load_custom(str(folder)).run(SOURCE, target=TARGET)
    at = _page(folder)
    at.session_state[KIND_KEY] = "Decoder"
    open_view(at, "Inside a head")
    at.selectbox(key=f"layer_pick|{folder}").set_value(2).run()  # a layer the encoder (2 layers) has not
    at.pills(key="token_pick").set_value(1).run()
    assert not at.exception, at.exception
    weights = torch.tensor(_values(_chart(at, "inside_steps")["data"][1]["y"]))  # (T,)
    assert torch.allclose(weights, run.decoder_attentions[2, 0, 1], atol=1e-5)
    # The decoder head's readings: this input's, measured on the decoder's self-attention over the target, as the
    # Layer view's Decoder grid words them; the census does not measure decoder heads.
    from mha_viz import analysis, measures
    from mha_viz.web import kinds

    decoder, causal = kinds.one_stack(run, "Decoder")
    scores, baselines = analysis.run_scores(decoder, causal, names=measures.BADGES)
    support = analysis.run_support(decoder, causal, names=measures.BADGES)
    caption = analysis.badge_caption(scores, baselines, support, 2, 0).removeprefix("measured: ").replace(
        "no location stands out", "no measured pattern stands out on this input")  # as the view words it
    said = [md.value for md in at.markdown if "Decoder L2 H0 on this input" in md.value]
    assert len(said) == 1 and caption.split(" (")[0] in said[0] and "encoder's heads only" in said[0], said
    at.session_state[KIND_KEY] = "Encoder"
    at.run()
    assert not at.exception, at.exception
    layer = at.selectbox(key=f"layer_pick|{folder}").value  # clamped to the encoder's last layer
    weights = torch.tensor(_values(_chart(at, "inside_steps")["data"][1]["y"]))  # (S,)
    query = at.pills(key="token_pick").value
    assert torch.allclose(weights, run.attentions[layer, 0, query], atol=1e-5)
    assert any("on this input" in md.value for md in at.markdown)  # the encoder's readings
