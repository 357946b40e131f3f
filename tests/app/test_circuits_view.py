"""The Circuits view through AppTest: one head's maps, the composition map with its random baseline, the causal
check, the over-training timeline and the comparison of two steps, each checked against `mha_viz.circuits` and
`causal_check` computed here, outside the page."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from mha_viz import checkpoints, circuits, load_model
from mha_viz.analysis.circuits import causal_check, qk_position_map

from helpers import APP, heatmap_z

TEXT = "the keys to the old cabinet are on the table ."


def _open(model: str = "tiny") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"model": model, "view": "Circuits", "text": TEXT, "layer": "1"})
    at.run()
    assert not at.exception, at.exception
    return at


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _heatmap(at: AppTest, title_part: str) -> dict:
    for spec in _figures(at):
        title = spec["layout"].get("title", {}).get("text", "")
        if title_part in title:
            return spec
    raise AssertionError(f"no figure titled with {title_part!r}")


def test_tiny_the_page_shows_the_weights_own_numbers():

    model = load_model("tiny")
    c = circuits(model)
    at = _open()
    # The default head is the later head of the highest K-composition pair; the composition map is that tensor.
    (earlier, later, score) = c.top_pairs("k", 1)[0]
    assert at.selectbox(key="circ_head").value == later
    comp = _heatmap(at, "K-composition (white")
    grid = heatmap_z(comp["data"][0]).astype(float)
    n = c.n_layers * c.n_heads
    np.testing.assert_allclose(grid, c.composition["k"].reshape(n, n).T.numpy(), atol=1e-6, equal_nan=True)
    assert comp["data"][0]["zmin"] == pytest.approx(c.baseline["k"].mean)  # white up to the random baseline
    table = at.table[1].value if "offset" in at.table[0].value.columns else at.table[0].value
    assert list(table["score"])[0] == f"{score:.3f}"
    # The full token maps: tiny's whole vocabulary on both axes.
    ov = _heatmap(at, "OV map W_E W_V W_O W_U")
    assert heatmap_z(ov["data"][0]).shape == (len(model.embeddings().labels), len(model.embeddings().labels))
    pos = _heatmap(at, "QK map of positions")
    w = model.head_weights(later[0])
    want = qk_position_map(model.embeddings().positions, w.w_q[later[1]], w.w_k[later[1]], causal=True)
    np.testing.assert_allclose(heatmap_z(pos["data"][0]).astype(float), want.numpy(), atol=1e-5, equal_nan=True)


def test_tiny_causal_check_is_the_measured_one():

    at = _open()
    off, later = at.selectbox(key="circ_off").value, at.selectbox(key="circ_later").value
    # By default the measured pair: the head attending most to the previous token and the induction head after it.
    check = causal_check(load_model("tiny"), off)
    ind = check.induction_on[1:]  # (L - 1, H): heads outside layer 0
    assert later == (1 + int(ind.argmax()) // ind.shape[1], int(ind.argmax()) % ind.shape[1])
    prev = check.previous_on[: later[0]]  # (later's layer, H)
    assert off == divmod(int(prev.argmax()), prev.shape[1])
    assert float(check.induction_off[later]) < float(check.induction_on[later]) / 2  # and switching it off tells
    text = " ".join(m.value for m in at.markdown)
    assert (f"induction score: {float(check.induction_on[later]):.1%} with every head on, "
            f"{float(check.induction_off[later]):.1%}") in text


def test_tiny_timeline_and_comparison():
    steps = checkpoints("tiny")
    at = _open()
    spec = next((s for s in _figures(at)
                 if any("OV copying" in a.get("text", "") for a in s["layout"].get("annotations", []))), None)
    assert spec is not None, "no timeline figure"
    k_line = next(t for t in spec["data"] if t.get("name", "").startswith("K-composition"))
    earlier, later = at.selectbox(key="circ_t_from").value, at.selectbox(key="circ_t_into").value

    want = [float(circuits(load_model(f"tiny@{s}")).composition["k"][earlier + later]) for s in steps]
    np.testing.assert_allclose(heatmap_z({"z": k_line["y"]}).astype(float), want, atol=1e-6)
    # Compare: first and last step side by side, and their difference.
    assert at.selectbox(key="circ_cmp_a").value == f"tiny@{steps[0]}"
    diff = _heatmap(at, f"minus tiny@{steps[0]}")
    assert np.nanmax(np.abs(heatmap_z(diff["data"][0]).astype(float))) > 0.05  # training changed the compositions


def test_a_model_without_head_weights_says_so(monkeypatch):
    from mha_viz.contract import UnavailableError
    from mha_viz.models.tiny.adapter import TinyModel

    def unavailable(self, layer):
        raise UnavailableError("tiny test: no weights per head")

    monkeypatch.setattr(TinyModel, "head_weights", unavailable, raising=False)
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"model": "tiny-untrained", "view": "Circuits", "text": TEXT})
    at.run()
    assert not at.exception, at.exception
    assert any("no weights per head" in i.value for i in at.info)


def test_minilm_big_vocabulary_shows_a_row_of_the_ov_map():
    from mha_viz.analysis.circuits import ov_token_map

    at = _open("minilm")
    layer, head = at.selectbox(key="circ_head").value
    position = at.selectbox(key="circ_token").value
    model = load_model("minilm")
    ids = model.run(TEXT).token_ids
    w, emb = model.head_weights(layer), model.embeddings()
    row = ov_token_map(emb.tokens, w.w_v[head], w.w_o[head], emb.unembed, rows=torch.tensor([ids[position]]))[0]
    # MiniLM has no language-model head: the bars are the tokens its OV map writes toward (not logits it raises)
    bars = next(s for s in _figures(at) if s["data"][0].get("type") == "bar" and "OV map writes toward most" in
                s["layout"]["title"]["text"])
    shown = heatmap_z({"z": bars["data"][0]["x"]}).astype(float)
    np.testing.assert_allclose(shown, row.topk(len(shown)).values.numpy(), rtol=1e-4)
    titles = [s["layout"].get("title", {}).get("text", "") for s in _figures(at)]
    assert not any(t.endswith("OV map W_E W_V W_O W_U") for t in titles)  # no V x V map of 30k tokens


def test_smollm2_says_why_there_is_no_position_map():
    at = _open("smollm2")
    assert any("rotary embeddings" in c.value for c in at.caption)
    assert not any("QK map of positions" in s["layout"].get("title", {}).get("text", "") for s in _figures(at))


def test_tiny_every_seed_is_shown_with_its_own_top_pair():
    from mha_viz import seeds

    names = seeds("tiny")
    at = _open()
    spec = next((s for s in _figures(at) if any(t.get("name", "").startswith("tiny#seed") for t in s["data"])), None)
    assert spec is not None and len(names) >= 2
    for name in names:
        steps = checkpoints(name)
        c = circuits(load_model(f"{name}@{steps[-1]}"))
        (earlier, later, _) = c.top_pairs("k", 1)[0]
        line = next(t for t in spec["data"] if t.get("name", "").startswith(f"{name}: "))
        assert line["name"].endswith(f"L{earlier[0]} H{earlier[1]} → L{later[0]} H{later[1]}")
        last = heatmap_z({"z": line["y"]}).astype(float)[-1]
        assert last == pytest.approx(float(c.composition["k"][earlier + later]), abs=1e-6)


def test_tiny_token_maps_are_not_washed_out_by_a_few_tokens():
    """Screenshot matrix: the OV map of tiny's default head was white but for three columns (the logits of
    <pad>, <unk> and <bos>, 4x the 99th percentile of |value|) and its 210 token labels were 5 px. Now the colours
    end at the 99th percentile, the page says so and names the tokens past it, and labels are thinned, never under
    8 px."""
    from mha_viz.analysis import circuits as circ

    model = load_model("tiny")
    at = _open()
    layer, head = at.selectbox(key="circ_head").value
    emb, w = model.embeddings(), model.head_weights(layer)
    ov = circ.ov_token_map(emb.tokens, w.w_v[head], w.w_o[head], emb.unembed).abs()  # (V, V)
    fig = _heatmap(at, "OV map W_E W_V W_O W_U")
    bound = float(np.quantile(ov.numpy(), 0.99))
    assert fig["data"][0]["zmax"] == pytest.approx(bound, rel=1e-4) and bound < float(ov.max()) / 1.05
    for axis in ("xaxis", "yaxis"):
        assert fig["layout"][axis]["tickfont"]["size"] >= 8
        assert fig["layout"][axis]["tickmode"] == "auto"  # plotly labels every k-th token, 1.2 fonts apart
    worst = int(torch.maximum(ov.amax(0), ov.amax(1)).argmax())
    note = next(c.value for c in at.caption if "Colours end at the 99% quantile" in c.value)
    assert f"OV: ±{bound:.2f} (the largest is {float(ov.max()):.2f}" in note, note
    from mha_viz.app.common import md_safe
    from mha_viz.app.names import quoted

    assert md_safe(quoted(emb.labels[worst], 12)) in note, note


def test_an_encoder_without_an_lm_head_is_not_said_to_have_logits():
    """Screenshot matrix: under MiniLM, a sentence encoder with no language-model head, the view titled
    its bars "the logits its OV map raises most" (axis: "logit change"), though the map is read through the token
    embedding. It now says what it draws and why."""
    assert load_model("minilm").embeddings().unembed is None  # the premise: no output layer
    at = _open("minilm")
    bars = next(s for s in _figures(at) if s["data"][0].get("type") == "bar" and "OV map" in
                s["layout"]["title"]["text"])
    assert "logit" not in bars["layout"]["title"]["text"] + bars["layout"]["xaxis"]["title"]["text"], bars["layout"]
    assert "writes toward" in bars["layout"]["title"]["text"]
    assert any("has no output layer" in c.value and "W_E W_V W_O W_Eᵀ" in c.value for c in at.caption)
