"""`mha_viz.circuits` through the model contract on every kind of model, and the weights it reads checked against
what the model computes: x @ W_Q + b_Q is the q that `inside` reports (likewise k and v), and z @ W_O summed over
heads plus the bias is the attention output."""
from __future__ import annotations

import math

import pytest
import torch

import mha_viz
from mha_viz.analysis.circuits import MODES, causal_check, composition_scores, copying_scores, head_weights

from helpers import loaded

TEXT = "the keys to the old cabinet are on the table ."


def _model(name: str):
    return loaded(name)


@pytest.mark.parametrize("name", ["tiny", "minilm", "smollm2"])
def test_circuits_shapes_nan_and_baseline(name):
    model = _model(name)
    c = mha_viz.circuits(model)
    L, H = model.n_layers, model.n_heads
    assert (c.n_layers, c.n_heads) == (L, H)
    for mode in MODES:
        scores = c.composition[mode]
        assert scores.shape == (L, H, L, H)
        later = torch.arange(L)[:, None, None, None] < torch.arange(L)[None, None, :, None]  # (L, 1, L, 1)
        assert torch.equal(scores.isfinite(), later.expand(L, H, L, H))
        assert ((scores[scores.isfinite()] > 0) & (scores[scores.isfinite()] <= 1)).all()
        assert 0 < c.baseline[mode].mean < 1
    assert c.copying is not None and c.copying.shape == (L, H) and (c.copying.abs() <= 1 + 1e-5).all()
    assert mha_viz.circuits(model) is c  # kept on the model


def test_tiny_the_previous_token_head_feeds_the_induction_heads_keys():
    """Measured, not typed: the head that attends most to the previous token on repeated random words (L0 H1 in
    the shipped model) is the earlier head of the top K-composition pairs, far above random matrices; the heads
    with the highest induction scores are the ones it feeds, and they copy (positive OV eigenvalues)."""
    model = _model("tiny")
    c = mha_viz.circuits(model)
    check = causal_check(model, (0, 0))  # its "all heads on" scores locate the heads; which one is off is irrelevant
    prev_head = (0, int(check.previous_on[0].argmax()))
    induction = [divmod(int(i), c.n_heads) for i in check.induction_on.flatten().argsort(descending=True)[:3]]
    k_scores = [float(c.composition["k"][prev_head + tuple(h)]) for h in induction]
    base = c.baseline["k"]
    assert min(k_scores) > base.mean + 8 * base.std and min(k_scores) > base.p99  # random: 0.125 +- 0.007
    # ...and above what it sends a head of the same layer that does no induction (score under 0.1).
    others = [float(c.composition["k"][prev_head + (1, h)]) for h in range(c.n_heads)
              if float(check.induction_on[1, h]) < 0.1]
    assert others and min(k_scores) > max(others)
    assert all(float(c.copying[tuple(h)]) > 0.9 for h in induction)
    # The causal check: with the previous-token head mean-ablated, the induction heads' scores collapse.
    cut = causal_check(model, prev_head)
    for h in induction:
        on, off = float(cut.induction_on[tuple(h)]), float(cut.induction_off[tuple(h)])
        assert on > 0.5 and off < 0.1 * on, (h, on, off)  # a uniform pattern scores about 0.06


def test_tiny_the_previous_token_heads_position_map_peaks_at_offset_one():
    """From the weights alone: the layer-0 head that attends most to the previous token (measured on repeated
    random words) scores the previous position highest, in its position x position QK map."""
    from mha_viz.analysis.circuits import offset_profile, qk_position_map

    model = _model("tiny")
    check = causal_check(model, (0, 0))
    head = int(check.previous_on[0].argmax())
    w, emb = model.head_weights(0), model.embeddings()
    scores = qk_position_map(emb.positions, w.w_q[head], w.w_k[head], causal=True)  # (P, P)
    profile = offset_profile(scores, max_offset=8)
    assert int(profile.argmax()) == 1
    n = scores.shape[0]
    assert (scores[1:].nan_to_num(float("-inf")).argmax(-1) == torch.arange(n - 1)).float().mean() > 0.6


def test_tiny_untrained_scores_sit_at_the_baseline():
    model = loaded("tiny-untrained")
    c = mha_viz.circuits(model)
    k = c.composition["k"][c.composition["k"].isfinite()]
    assert abs(float(k.mean()) - c.baseline["k"].mean) < 3 * c.baseline["k"].std


def test_circuits_equal_the_scores_of_the_stacked_weights():
    model = _model("tiny")
    w_q, w_k, w_v, w_o, _ = head_weights(model)
    c = mha_viz.circuits(model)
    direct = composition_scores(w_q, w_k, w_v, w_o)
    for mode in MODES:
        assert torch.allclose(c.composition[mode], direct[mode], equal_nan=True)
    emb = model.embeddings()
    assert torch.allclose(c.copying, copying_scores(w_v, w_o, emb.tokens, emb.unembed))


def _projection_input(model, name: str, layer: int, resid: torch.Tensor) -> torch.Tensor:
    """x of HeadWeights: tiny's ln1 output (pre-LN), BERT's block input."""
    with torch.no_grad():
        if name.startswith("tiny"):
            return model.lm.blocks[layer].ln1(resid)
        if name == "smollm2":  # Llama-style: the decoder layer's input RMSNorm
            return model._model.model.layers[layer].input_layernorm(resid)
    return resid


@pytest.mark.parametrize("name", ["tiny", "minilm"])
@pytest.mark.parametrize("layer", [0, 1])
def test_weights_parity_with_inside(name, layer):
    model = _model(name)
    w = model.head_weights(layer)
    inside = model.inside_layer(TEXT, layer)
    x = _projection_input(model, name, layer, inside[0].resid)  # (T, D)
    for h, hi in enumerate(inside):
        for which, got in (("q", hi.q), ("k", hi.k), ("v", hi.v)):
            weight, bias = getattr(w, f"w_{which}")[h], getattr(w, f"b_{which}")
            want = x @ weight + (0 if bias is None else bias[h])  # (T, dh)
            assert torch.allclose(want, got, atol=1e-4), (name, layer, h, which)
    total = sum(hi.contribution for hi in inside)  # (T, D)
    z = torch.stack([hi.weights @ hi.v for hi in inside])  # (H, T, dh)
    out = torch.einsum("htd,hde->te", z, w.w_o) + (0 if w.b_o is None else w.b_o)  # (T, D)
    assert torch.allclose(out, total + (0 if inside[0].bias is None else inside[0].bias), atol=1e-4)
    assert math.isclose(inside[0].scale, 1 / math.sqrt(w.w_q.shape[-1]))


@pytest.mark.parametrize("layer", [0, 3])
def test_weights_parity_with_inside_rotary_grouped_query(layer):
    """SmolLM2 rotates q and k by position after the projection and shares each key/value head among 3 query heads:
    v is x @ W_V + b_V exactly; a rotation keeps each q's and k's length and, at one position, their dot product."""
    model = _model("smollm2")
    w = model.head_weights(layer)
    assert w.rotary and len(set(w.kv_head)) == 3 and w.w_k.shape[0] == model.n_heads
    inside = model.inside_layer(TEXT, layer)
    x = _projection_input(model, "smollm2", layer, inside[0].resid)  # (T, D)
    for h, hi in enumerate(inside):
        assert hi.kv_head == w.kv_head[h]
        q, k, v = (x @ getattr(w, f"w_{n}")[h] + (0 if getattr(w, f"b_{n}") is None else getattr(w, f"b_{n}")[h])
                   for n in "qkv")  # (T, dh) each, q and k before the rotation
        assert torch.allclose(v, hi.v, atol=1e-4)
        assert torch.allclose(q.norm(dim=-1), hi.q.norm(dim=-1), rtol=1e-4, atol=1e-4)
        assert torch.allclose(k.norm(dim=-1), hi.k.norm(dim=-1), rtol=1e-4, atol=1e-4)
        assert torch.allclose((q * k).sum(-1), (hi.q * hi.k).sum(-1), rtol=1e-3, atol=1e-3)


def test_smollm2_a_previous_token_head_feeds_an_induction_head():
    """Measured on SmolLM2: the top K-composition pair runs from a head that attends to the previous token on
    repeated random words into one with a high induction score there, and switching the first off (mean) takes the
    second's induction score away. The heads are found, not typed."""
    model = _model("smollm2")
    c = mha_viz.circuits(model)
    earlier, later, score = c.top_pairs("k", 1)[0]
    assert score > 3 * c.baseline["k"].p99
    check = causal_check(model, earlier)
    assert float(check.previous_on[earlier]) > 0.5
    assert float(check.induction_on[later]) > 0.5 > 0.1 > float(check.induction_off[later])
