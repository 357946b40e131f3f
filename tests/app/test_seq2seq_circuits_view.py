"""The Circuits view for an encoder-decoder folder (BART) through the page: it opens the kind the Layer view's switch
holds, and its maps are `circuits(model, kind)`'s: a cross-attention head's Q-composition (the only mode that holds
there, with the page saying why) and its OV map through the LM head; the encoder's OV map reads the token embedding
in the unembedding's place."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import heatmap_z, seq2seq_page
from page_steps import open_view

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from tests.models.hf.test_seq2seq import seq2seq_folder

    return seq2seq_folder(tmp_path_factory.mktemp("bart"))


def _heatmap(at, title_part: str) -> dict:
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if title_part in spec["layout"].get("title", {}).get("text", ""):
            return spec
    raise AssertionError(f"no figure titled with {title_part!r}")


def test_cross_heads_circuits_and_the_encoders(folder):
    from mha_viz.analysis import circuits as circ
    from mha_viz.app.state import KIND_KEY
    from mha_viz.models.hf.loading import load_custom

    model = load_custom(str(folder))
    at = seq2seq_page(folder, SOURCE, TARGET)
    at.session_state[KIND_KEY] = "Cross"  # as the Layer view's switch left it
    open_view(at, "Circuits")
    assert at.get("segmented_control")[0].value == "Cross"
    c = circ.circuits(model, kind="Cross")
    assert at.radio(key="circ_mode").options == ["queries"]  # Q-composition only
    captions = " ".join(x.value for x in at.caption)
    assert "only Q-composition between them is measured" in captions
    assert "Causal check" not in " ".join(m.value for m in at.markdown)  # induction is over one text
    n = c.n_layers * c.n_heads
    grid = heatmap_z(_heatmap(at, "Q-composition (white")["data"][0]).astype(float)
    np.testing.assert_allclose(grid, c.composition["q"].reshape(n, n).T.numpy(), atol=1e-6, equal_nan=True)
    layer, head = at.selectbox(key="circ_head").value
    w, emb = model.head_weights(layer, kind="Cross"), model.embeddings(kind="Cross")
    assert emb.unembed is not None  # a cross head writes into the stream the LM head reads
    want = circ.ov_token_map(emb.tokens, w.w_v[head], w.w_o[head], emb.unembed)  # (V, V)
    got = heatmap_z(_heatmap(at, "OV map W_E W_V W_O W_U")["data"][0]).astype(float)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)

    at.session_state[KIND_KEY] = "Encoder"
    at.run()
    assert not at.exception, at.exception
    enc = circ.circuits(model, kind="Encoder")
    assert at.radio(key="circ_mode").options == ["keys", "queries", "values"]
    at.radio(key="circ_mode").set_value("v").run()  # the switch kept Cross's "q"
    grid = heatmap_z(_heatmap(at, "V-composition (white")["data"][0]).astype(float)
    n = enc.n_layers * enc.n_heads
    np.testing.assert_allclose(grid, enc.composition["v"].reshape(n, n).T.numpy(), atol=1e-6, equal_nan=True)
    _heatmap(at, "OV map W_E W_V W_O W_Eᵀ")  # no logits: the token embedding in the unembedding's place
