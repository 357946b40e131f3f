"""Inside a head for ALiBi models (Bloom, MPT, Falcon with alibi; Press et al. 2022, "Train Short, Test Long"):
the per-head linear position bias the model adds to its scaled scores is shown as its own term, `position_bias`,
and the pieces sum to the scores: q . kᵀ * scale + position_bias where the mask allows. Checked against
transformers: the bias against its own ALiBi builders (`build_alibi_tensor`, `build_mpt_alibi_tensor`), and
softmax(scores) against its eager attention weights on the same folder."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import mha_viz
from tests.models.hf import matrix
from tests.models.hf.architectures import BY_NAME, H, build

FALCON_ALIBI = dataclasses.replace(
    BY_NAME["Falcon"],  # the same name: the same tokenizer as the matrix's Falcon
    args=dict(BY_NAME["Falcon"].args, alibi=True, new_decoder_architecture=False, multi_query=False, num_kv_heads=H,
              parallel_attn=False, bias=True))
ARCHS = {"Bloom": BY_NAME["Bloom"], "MPT": BY_NAME["MPT"], "Falcon (alibi)": FALCON_ALIBI}
LAYER = 1


def _reference_bias(name: str, ref, n_heads: int, n_keys: int) -> torch.Tensor:
    """transformers' own ALiBi for one text of n_keys tokens, as the layer adds it to its scaled scores
    -> (H, 1, K)."""
    ones = torch.ones(1, n_keys, dtype=torch.long)
    if name == "Bloom":
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        beta = ref.transformer.h[LAYER].self_attention.beta
        return beta * build_alibi_tensor(ones, n_heads, torch.float32).view(n_heads, 1, n_keys)
    if name == "MPT":
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

        full = build_mpt_alibi_tensor(n_heads, ref.config.max_seq_len)  # (H, 1, max_seq_len)
        return full[:, :, -n_keys:]  # the last K columns, as MptAttention slices them
    assert name == "Falcon (alibi)"
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    # Falcon adds ALiBi before scaling, and FalconModel.forward has already folded alibi / sqrt(dh) into the causal
    # mask the layer adds too (transformers 5.x): the scores carry it twice.
    scale = ref.transformer.h[LAYER].self_attention.inv_norm_factor
    return 2 * scale * build_alibi_tensor(ones, n_heads, torch.float32).view(n_heads, 1, n_keys)


@pytest.mark.parametrize("name", list(ARCHS))
def test_alibi_is_its_own_term_and_the_pieces_sum_to_the_scores(name, tmp_path):
    with matrix.offline():
        folder = build(ARCHS[name], tmp_path / "model", (matrix.TEXT,))
        loaded = matrix.load(ARCHS[name], folder)
    model = loaded.model
    heads = model.inside_layer(matrix.TEXT, LAYER)
    n = len(heads[0].tokens)
    want = _reference_bias(name, loaded.ref, model.n_heads, n)  # (H, 1, K)
    ref_weights = loaded.ref_run(matrix.TEXT, output_attentions=True).attentions[LAYER][0]  # (H, Q, K)
    moved = 0.0
    for h in heads:
        assert h.position_bias is not None and h.position_bias.shape == (n, n)
        allowed = torch.isfinite(h.scores)  # (Q, K)
        assert allowed.any(-1).all() and not allowed.triu(1).any()  # causal: every query sees itself, none later
        torch.testing.assert_close(h.position_bias[allowed], want[h.head].expand(n, n)[allowed], atol=1e-6, rtol=0)
        pieces = h.q @ h.k.T * h.scale + h.position_bias  # (Q, K)
        torch.testing.assert_close(h.scores[allowed], pieces[allowed], atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.softmax(h.scores, -1), ref_weights[h.head].float(), atol=2e-5, rtol=0)
        plain = torch.softmax((h.q @ h.k.T * h.scale).masked_fill(~allowed, float("-inf")), -1)
        moved = max(moved, float((plain - h.weights).abs().max()))
    assert moved > 1e-2  # the bias is not a constant per query (which softmax would ignore): it moves the weights


def test_models_without_a_score_bias_show_none():
    model = mha_viz.load_model("tiny")
    assert all(h.position_bias is None for h in model.inside_layer("the cat sat on the mat", 0))


def test_the_inside_view_shows_the_bias_as_its_own_term(tmp_path):
    """The page's steps for a Bloom folder: the formula names the bias, and the scores' row marks it, the model's
    numbers (Bloom's ALiBi depends on the key's position alone) at the keys the picked query sees."""
    import base64
    import json

    import numpy as np
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    from helpers import app_at

    with matrix.offline():
        folder = build(BY_NAME["Bloom"], tmp_path / "bloom", (matrix.TEXT,))
    at = app_at("custom")
    at.sidebar.text_input(key="custom_id").input(str(folder)).run()
    assert not at.exception, at.exception
    at.session_state["view"] = "Inside a head"
    at.run()
    assert not at.exception, at.exception
    assert any("position term for this head" in md.value and "ALiBi" in md.value for md in at.markdown)
    charts = [c for c in at.get("plotly_chart") if c.proto.id and "inside_steps" in c.proto.id]
    spec = json.loads(charts[0].proto.spec)
    marks = [t for t in spec["data"] if t.get("name") == "position bias"]
    assert len(marks) == 1
    y = marks[0]["y"]
    if isinstance(y, dict):  # plotly's base64 typed array
        y = np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    y = np.array([np.nan if v is None else v for v in y], dtype=float)  # (K,): NaN at the masked keys
    head = at.selectbox(key="inside_head").value
    want = build_alibi_tensor(torch.ones(1, len(y), dtype=torch.long), H, torch.float32)[head, 0]  # (K,)
    seen = ~np.isnan(y)
    assert seen.sum() >= 2 and seen[0]
    np.testing.assert_allclose(y[seen], want.numpy()[seen], atol=1e-6)
